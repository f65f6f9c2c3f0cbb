"""attention_tma_persistent: interpreter correctness with tiles outnumbering the persistent
programs (causal and not, both head dims), causal blocks past the diagonal never read, every
tile written once, the grid, error paths, and sm_90 AOT compiles of the space's largest configs
against the shared-memory floor (in a worker without the interpreter)."""

from __future__ import annotations

import pytest
import torch

from costtune.build.pool import get_pool
from costtune.hardware import H200
from costtune.kernels import IMPLEMENTATIONS, relative_error
from costtune.kernels import attention_tma as at
from costtune.kernels import attention_tma_persistent as atp


def cfg(block_m: int, block_n: int, warps: int = 4, stages: int = 2) -> dict:
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}


def prob(b: int, h: int, s: int, d: int, causal: int) -> dict:
    return {"B": b, "H": h, "S": s, "D": d, "causal": causal}


# Several heads and batches, BLOCK_M above and below BLOCK_N (not causal), both head dims.
CASES = [
    (prob(1, 3, 64, 64, 1), cfg(32, 16)),
    (prob(2, 1, 64, 64, 0), cfg(16, 32)),
    (prob(1, 2, 32, 128, 1), cfg(32, 32)),
    (prob(2, 2, 48, 64, 0), cfg(16, 16)),
]


@pytest.mark.parametrize("programs", [3, 132])
@pytest.mark.parametrize("dtype", atp.DTYPES)
@pytest.mark.parametrize("problem,config", CASES)
def test_matches_reference(monkeypatch, programs, dtype, problem, config):
    # 3 programs: every program runs several tiles (the persistent loop and its tile order).
    monkeypatch.setattr(atp, "PROGRAMS", programs)
    inputs = atp.make_inputs(problem, dtype, seed=1)
    out = atp.launch(inputs, config)
    assert out.dtype == inputs["q"].dtype and out.shape == inputs["q"].shape
    assert relative_error(out, atp.reference(inputs)) <= atp.TOLERANCE[dtype]


def test_causal_skips_blocks_past_the_diagonal(monkeypatch):
    monkeypatch.setattr(atp, "PROGRAMS", 2)
    inputs = atp.make_inputs(prob(1, 2, 64, 64, 1), "float16", seed=2)
    ref = atp.reference(inputs)
    for name in ("k", "v"):
        inputs[name][..., 32:, :] = float("nan")
    out = atp.launch(inputs, cfg(32, 16))
    assert relative_error(out[..., :32, :], ref[..., :32, :]) <= atp.TOLERANCE["float16"]


def test_every_tile_written_once(monkeypatch):
    # An output prefilled with NaN: any tile the loop skipped would stay NaN.
    monkeypatch.setattr(atp, "PROGRAMS", 5)
    inputs = atp.make_inputs(prob(3, 2, 32, 64, 0), "float16", seed=3)
    inputs["out"] = torch.full_like(inputs["q"], float("nan"))
    out = atp.launch(inputs, cfg(16, 16))
    assert out.data_ptr() == inputs["out"].data_ptr() and not out.isnan().any()


def test_family_facts_registration_and_space():
    assert atp.NAME in IMPLEMENTATIONS["attention"] and atp.FAMILY == "attention"
    assert atp.reference is at.reference and atp.TOLERANCE == at.TOLERANCE
    assert atp.TRAIN_SHAPES == at.TRAIN_SHAPES and atp.TEST_SHAPES == at.TEST_SHAPES
    assert atp.implied_params(atp.TEST_SHAPES[0], cfg(64, 64)) == {}
    for p in atp.TRAIN_SHAPES + atp.TEST_SHAPES:
        # attention_tma's configs without warp specialization whose estimate leaves room for
        # the output tile.
        ws_free = {tuple(sorted((k, v) for k, v in c.as_dict().items() if k != "WARP_SPECIALIZE"))
                   for c in at.config_space(p) if not c["WARP_SPECIALIZE"]
                   and at._smem_estimate(c, p["D"]) + c["BLOCK_M"] * p["D"] * 2 + 1024
                   <= H200.max_shared_per_block}
        assert {tuple(sorted(c.as_dict().items())) for c in atp.config_space(p)} == ws_free


def test_grid_matches_kernel_calls():
    for p in atp.TRAIN_SHAPES[::5] + atp.TEST_SHAPES[::4]:
        inputs = {n: torch.empty(p["B"], p["H"], p["S"], p["D"], dtype=torch.float16,
                                 device="meta") for n in ("q", "k", "v")}
        inputs["causal"] = p["causal"]
        for c in atp.config_space(p).sample(4, seed=0):
            (call,) = atp.kernel_calls(inputs, c)
            n_tiles = p["S"] // c["BLOCK_M"] * p["B"] * p["H"]
            assert call.grid == atp.grid(p, c) == (min(n_tiles, H200.num_sms),)
            assert call.args[-1] == n_tiles == atp.tiles(p, c)


def _qkv(s: int = 64, **over) -> dict:
    base = {n: torch.zeros(1, 2, s, 64, dtype=torch.float16) for n in ("q", "k", "v")}
    return {**base, **over}


@pytest.mark.parametrize("inputs,config,match", [
    (_qkv(q=torch.zeros(1, 2, 64, 64)), cfg(64, 32), "q has dtype"),
    (_qkv(), {**cfg(64, 32), "WARP_SPECIALIZE": 1}, "no warp specialization"),
    (_qkv(), {**cfg(64, 32), "GROUP_SIZE_M": 8}, "attention_tma_persistent config: unknown"),
    (_qkv(), cfg(64, 48), "BLOCK_N=48"),
    (_qkv(s=80), cfg(64, 16), "attention_tma_persistent: S=80 must be a multiple of BLOCK_M"),
    (_qkv(causal=True), cfg(32, 64), "causal needs BLOCK_M=32 to be a multiple of BLOCK_N"),
    (_qkv(k=torch.zeros(1, 64, 2, 64, dtype=torch.float16).transpose(1, 2)), cfg(64, 32),
     "k must be contiguous"),
])
def test_bad_inputs_and_configs(inputs, config, match):
    with pytest.raises(ValueError, match=match):
        atp.launch(inputs, config)


def _aot(cases: list[tuple]) -> list[dict]:
    from costtune.build.aot import compile_job, specialize
    from costtune.features.compiled import meta_inputs

    out = []
    for problem, dtype, config in cases:
        (call,) = atp.kernel_calls(meta_inputs(atp, problem, dtype), config)
        out.append(compile_job(specialize(call), sass=False))
    return out


def test_largest_configs_compile_for_sm90():
    # The 3 largest (by the shared-memory floor) of causal and non-causal D=128 spaces, and a
    # D=64 bf16 one.
    cases = []
    for p in (prob(1, 2, 1024, 128, 0), prob(1, 2, 1024, 128, 1)):
        floor = {c.key: atp.shared_memory_floor(p, c.as_dict(), dtype="float16",
                                                aligned={"k": True, "v": True})
                 for c in atp.config_space(p)}
        configs = sorted(atp.config_space(p), key=lambda c: floor[c.key])
        cases += [(p, "float16", c.as_dict()) for c in configs[-3:]]
    cases.append((prob(2, 2, 512, 64, 1), "bfloat16", cfg(128, 64, warps=8, stages=4)))
    records = get_pool(1).submit(_aot, cases).result()
    for (p, dtype, c), r in zip(cases, records, strict=True):
        assert r["status"] == "ok", (p, c, r["error"])
        floor = atp.shared_memory_floor(p, c, dtype=dtype, aligned={"k": True, "v": True})
        assert 0 < floor <= r["shared_bytes"] <= H200.max_shared_per_block, (p, c)
