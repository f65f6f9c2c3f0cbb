"""attention_persistent: interpreter correctness with tiles outnumbering the persistent programs
(every tile visited once, causal and not, ragged S), the grid, error paths, and sm_90 AOT
compiles of the space's largest configs (in a worker without the interpreter)."""

from __future__ import annotations

import pytest
import torch

from costtune.build.pool import get_pool
from costtune.hardware import H200
from costtune.kernels import IMPLEMENTATIONS, relative_error
from costtune.kernels import attention as at
from costtune.kernels import attention_persistent as ap


def cfg(block_m: int, block_n: int, warps: int = 4, stages: int = 2) -> dict:
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}


def prob(b: int, h: int, s: int, d: int, causal: int) -> dict:
    return {"B": b, "H": h, "S": s, "D": d, "causal": causal}


# Ragged S (row masks), several heads and batches, BLOCK_M above and below BLOCK_N.
CASES = [
    (prob(1, 3, 40, 64, 1), cfg(16, 16)),
    (prob(2, 1, 70, 64, 0), cfg(32, 16)),
    (prob(1, 2, 33, 128, 1), cfg(16, 32)),
    (prob(2, 2, 48, 64, 0), cfg(16, 64)),
]


@pytest.mark.parametrize("programs", [3, 132])
@pytest.mark.parametrize("dtype", ap.DTYPES)
@pytest.mark.parametrize("problem,config", CASES)
def test_matches_reference(monkeypatch, programs, dtype, problem, config):
    # 3 programs: every program runs several tiles (the persistent loop and its tile order).
    monkeypatch.setattr(ap, "PROGRAMS", programs)
    inputs = ap.make_inputs(problem, dtype, seed=1)
    out = ap.launch(inputs, config)
    assert out.dtype == inputs["q"].dtype and out.shape == inputs["q"].shape
    assert relative_error(out, ap.reference(inputs)) <= ap.TOLERANCE[dtype]


def test_causal_skips_blocks_past_the_diagonal(monkeypatch):
    monkeypatch.setattr(ap, "PROGRAMS", 2)
    inputs = ap.make_inputs(prob(1, 2, 64, 64, 1), "float16", seed=2)
    ref = ap.reference(inputs)
    for name in ("k", "v"):
        inputs[name][..., 32:, :] = float("nan")
    out = ap.launch(inputs, cfg(32, 16))
    assert relative_error(out[..., :32, :], ref[..., :32, :]) <= ap.TOLERANCE["float16"]


def test_every_tile_written_once(monkeypatch):
    # An output prefilled with NaN: any tile the loop skipped would stay NaN.
    monkeypatch.setattr(ap, "PROGRAMS", 5)
    inputs = ap.make_inputs(prob(3, 2, 50, 64, 0), "float16", seed=3)
    inputs["out"] = torch.full_like(inputs["q"], float("nan"))
    out = ap.launch(inputs, cfg(16, 16))
    assert out is inputs["out"] and not out.isnan().any()


def test_family_facts_and_registration():
    assert ap.NAME in IMPLEMENTATIONS["attention"] and ap.FAMILY == "attention"
    assert ap.reference is at.reference and ap.TOLERANCE == at.TOLERANCE
    assert ap.TRAIN_SHAPES == at.TRAIN_SHAPES and ap.TEST_SHAPES == at.TEST_SHAPES
    assert ap.implied_params(ap.TEST_SHAPES[0], cfg(64, 64)) == {}
    p = ap.TRAIN_SHAPES[0]
    assert [c.as_dict() for c in ap.config_space(p)] == [c.as_dict() for c in at.config_space(p)]


def test_grid_matches_kernel_calls():
    for p in ap.TRAIN_SHAPES[::5] + ap.TEST_SHAPES[::4]:
        inputs = {n: torch.empty(p["B"], p["H"], p["S"], p["D"], dtype=torch.float16,
                                 device="meta") for n in ("q", "k", "v")}
        inputs["causal"] = p["causal"]
        for c in ap.config_space(p).sample(4, seed=0):
            (call,) = ap.kernel_calls(inputs, c)
            n_tiles = -(-p["S"] // c["BLOCK_M"]) * p["B"] * p["H"]
            assert call.grid == ap.grid(p, c) == (min(n_tiles, H200.num_sms),)
            assert call.args[-1] == n_tiles == ap.tiles(p, c)


def _qkv(s: int = 64, **over) -> dict:
    base = {n: torch.zeros(1, 2, s, 64, dtype=torch.float16) for n in ("q", "k", "v")}
    return {**base, **over}


@pytest.mark.parametrize("inputs,config,match", [
    (_qkv(q=torch.zeros(1, 2, 64, 64)), cfg(64, 32), "q has dtype"),
    (_qkv(v=torch.zeros(1, 2, 32, 64, dtype=torch.float16)), cfg(64, 32), "v has shape"),
    (_qkv(), {**cfg(64, 32), "GROUP_SIZE_M": 8}, "attention_persistent config: unknown"),
    (_qkv(), cfg(64, 48), "BLOCK_N=48"),
    (_qkv(causal=torch.ones(2)), cfg(64, 32), "causal must be"),
])
def test_bad_inputs_and_configs(inputs, config, match):
    with pytest.raises(ValueError, match=match):
        ap.launch(inputs, config)


def _aot(cases: list[tuple]) -> list[dict]:
    from costtune.build.aot import compile_job, specialize
    from costtune.features.compiled import meta_inputs

    out = []
    for problem, dtype, config in cases:
        (call,) = ap.kernel_calls(meta_inputs(ap, problem, dtype), config)
        out.append(compile_job(specialize(call), sass=False))
    return out


def test_largest_configs_compile_for_sm90():
    # The 4 largest (by the family's shared-memory estimate) of causal and non-causal D=128
    # spaces, and a D=64 bf16 one.
    cases = []
    for p in (prob(1, 2, 1024, 128, 0), prob(1, 2, 1024, 128, 1)):
        floor = {c.key: ap.shared_memory_floor(p, c.as_dict(), dtype="float16",
                                               aligned={"k": True, "v": True})
                 for c in ap.config_space(p)}
        configs = sorted(ap.config_space(p), key=lambda c: floor[c.key])
        cases += [(p, "float16", c.as_dict()) for c in configs[-4:]]
    cases.append((prob(2, 2, 512, 64, 1), "bfloat16", cfg(128, 64, warps=8, stages=4)))
    records = get_pool(1).submit(_aot, cases).result()
    for (p, dtype, c), r in zip(cases, records, strict=True):
        assert r["status"] == "ok", (p, c, r["error"])
        floor = ap.shared_memory_floor(p, c, dtype=dtype, aligned={"k": True, "v": True})
        assert floor <= r["shared_bytes"] <= H200.max_shared_per_block, (p, c)
