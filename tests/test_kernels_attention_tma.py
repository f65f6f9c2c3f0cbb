"""attention_tma: interpreter correctness over host TensorDescriptors (TRITON_INTERPRET=1 runs
them in triton 3.6; warp specialization is a no-op there), causal block skipping, space
constraints, error paths, and sm_90 AOT compiles of the space's largest configs, warp
specialization included (in a worker without the interpreter)."""

from __future__ import annotations

import pytest
import torch

from costtune.build.pool import get_pool
from costtune.hardware import H200
from costtune.kernels import attention as at
from costtune.kernels import attention_tma as tm
from costtune.kernels import relative_error


def cfg(block_m: int, block_n: int, ws: int = 0, warps: int = 4, stages: int = 2) -> dict:
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "WARP_SPECIALIZE": ws,
            "num_warps": warps, "num_stages": stages}


def prob(b: int, h: int, s: int, d: int, causal: int) -> dict:
    return {"B": b, "H": h, "S": s, "D": d, "causal": causal}


# Several heads (rows must not bleed across heads), BLOCK_M > BLOCK_N on and off the diagonal.
CASES = [
    (prob(1, 2, 64, 64, 1), cfg(32, 16, ws=1, warps=8)),
    (prob(2, 1, 64, 64, 0), cfg(16, 32)),
    (prob(1, 2, 32, 128, 1), cfg(16, 16)),
    (prob(1, 1, 64, 128, 0), cfg(32, 64, ws=1, warps=8)),
]


@pytest.mark.parametrize("dtype", tm.DTYPES)
@pytest.mark.parametrize("problem,config", CASES)
def test_matches_reference(dtype, problem, config):
    inputs = tm.make_inputs(problem, dtype, seed=1)
    out = tm.launch(inputs, config)
    assert out.dtype == inputs["q"].dtype and out.shape == inputs["q"].shape
    assert relative_error(out, tm.reference(inputs)) <= tm.TOLERANCE[dtype]


def test_causal_skips_blocks_past_the_diagonal():
    # NaN in K/V rows >= 32 poisons any query block that loads them: finite rows < 32 prove
    # those blocks were skipped, not just masked.
    inputs = tm.make_inputs(prob(1, 1, 64, 64, 1), "float16", seed=2)
    ref = tm.reference(inputs)
    for name in ("k", "v"):
        inputs[name][..., 32:, :] = float("nan")
    out = tm.launch(inputs, cfg(32, 16))
    assert relative_error(out[..., :32, :], ref[..., :32, :]) <= tm.TOLERANCE["float16"]


def test_suites_and_family_facts():
    assert tm.FAMILY == "attention" and tm.NAME == "attention_tma" and tm.DESCRIPTION
    assert tm.reference is at.reference and tm.TOLERANCE == at.TOLERANCE
    dropped = [p["S"] for p in at.TRAIN_SHAPES + at.TEST_SHAPES
               if p not in tm.TRAIN_SHAPES + tm.TEST_SHAPES]
    assert sorted(dropped) == [197, 577, 777, 3000]
    assert tm.implied_params(tm.TEST_SHAPES[0], cfg(64, 64)) == {}


def test_space_constraints_and_counts():
    sizes = []
    for p in tm.TRAIN_SHAPES + tm.TEST_SHAPES:
        configs = tm.config_space(p).configs()
        sizes.append(len(configs))
        for c in configs:
            assert p["S"] % c["BLOCK_M"] == 0 and p["S"] % c["BLOCK_N"] == 0
            assert not p["causal"] or c["BLOCK_M"] % c["BLOCK_N"] == 0
            assert not c["WARP_SPECIALIZE"] or c["num_warps"] == 8
            assert tm._smem_estimate(c, p["D"]) + 1024 <= H200.max_shared_per_block
        assert {c["WARP_SPECIALIZE"] for c in configs} == {0, 1}
    assert 40 <= min(sizes) and max(sizes) <= 60
    assert tm.config_space(prob(1, 1, 128, 128, 1)).violated(cfg(64, 128, ws=1, stages=4)) == [
        "shared_memory_le_sm90", "warp_specialize_needs_8_warps",
        "causal_block_m_multiple_of_block_n"]
    assert tm.config_space(prob(1, 1, 192, 64, 0)).violated(cfg(128, 64)) == [
        "s_multiple_of_block_m"]


def test_grid_matches_kernel_calls():
    for p in tm.TRAIN_SHAPES[::6] + tm.TEST_SHAPES[::4]:
        inputs = {n: torch.empty(p["B"], p["H"], p["S"], p["D"], dtype=torch.float16,
                                 device="meta") for n in ("q", "k", "v")}
        inputs["causal"] = p["causal"]
        for c in tm.config_space(p).sample(4, seed=0):
            (call,) = tm.kernel_calls(inputs, c)
            assert call.grid == tm.grid(p, c) == (p["S"] // c["BLOCK_M"], p["B"] * p["H"])
            assert call.kwargs["WARP_SPECIALIZE"] is bool(c["WARP_SPECIALIZE"])
            assert call.args[0].block_shape == [c["BLOCK_M"], p["D"]]


def _qkv(s: int = 64, **over) -> dict:
    base = {n: torch.zeros(1, 2, s, 64, dtype=torch.float16) for n in ("q", "k", "v")}
    return {**base, **over}


@pytest.mark.parametrize("inputs,config,match", [
    (_qkv(q=torch.zeros(1, 2, 64, 64)), cfg(64, 32), "q has dtype"),
    (_qkv(k=torch.zeros(1, 2, 64, 128, dtype=torch.float16).transpose(2, 3)[..., :64, :]),
     cfg(64, 32), "k must be contiguous"),
    (_qkv(s=40), cfg(16, 16), "S=40 must be a multiple of BLOCK_M=16"),
    (_qkv(s=48), cfg(16, 32), "S=48 must be a multiple of BLOCK_N=32"),
    (_qkv(causal=True), cfg(16, 32), "causal needs BLOCK_M=16"),
    (_qkv(), {**cfg(64, 32), "GROUP_SIZE_M": 8}, "unknown \\['GROUP_SIZE_M'\\]"),
    (_qkv(), cfg(64, 32, ws=2), "WARP_SPECIALIZE=2 must be 0 or 1"),
    (_qkv(), {**cfg(64, 32), "WARP_SPECIALIZE": True}, "WARP_SPECIALIZE=True"),
    (_qkv(), cfg(64, 48), "BLOCK_N=48"),
])
def test_bad_inputs_and_configs(inputs, config, match):
    with pytest.raises(ValueError, match=match):
        tm.launch(inputs, config)


def _aot(cases: list[tuple]) -> list[dict]:
    from costtune.build.aot import compile_job, specialize
    from costtune.features.compiled import meta_inputs
    from costtune.kernels import get_implementation

    out = []
    for name, problem, dtype, config in cases:
        mod = get_implementation(name)
        (call,) = mod.kernel_calls(meta_inputs(mod, problem, dtype), config)
        out.append(compile_job(specialize(call), sass=False))
    return out


def test_largest_configs_compile_for_sm90():
    # The 8 largest (by the shared-memory estimate) of causal and non-causal D=128 spaces,
    # both WARP_SPECIALIZE values among them, plus a D=64 warp-specialized one.
    cases = []
    for p in (prob(1, 2, 1024, 128, 0), prob(1, 2, 1024, 128, 1)):
        configs = sorted(tm.config_space(p), key=lambda c: tm._smem_estimate(c, p["D"]))
        cases += [("attention_tma", p, "float16", c.as_dict()) for c in configs[-8:]]
    cases.append(("attention_tma", prob(2, 2, 512, 64, 1), "bfloat16",
                  cfg(128, 64, ws=1, warps=8, stages=4)))
    assert {c["WARP_SPECIALIZE"] for *_, c in cases} == {0, 1}
    records = get_pool(1).submit(_aot, cases).result()
    for (_, p, dtype, c), r in zip(cases, records, strict=True):
        assert r["status"] == "ok", (p, c, r["error"])
        assert r["shared_bytes"] <= H200.max_shared_per_block
        floor = tm.shared_memory_floor(p, c, dtype=dtype, aligned={})
        assert floor <= r["shared_bytes"] <= tm._smem_estimate(c, p["D"]) + 1024, (p, c)
