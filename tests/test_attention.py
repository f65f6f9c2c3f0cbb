"""Attention family: correctness under the interpreter, causal block skipping, space, suites,
input checks. Blocks of 16/32 (outside the default space) keep the interpreter fast."""

from __future__ import annotations

import pytest
import torch

from costtune.hardware import H200
from costtune.kernels import attention as at
from costtune.kernels import relative_error
from costtune.types import Config


def cfg(block_m: int, block_n: int, warps: int = 4, stages: int = 2) -> dict:
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}


def prob(b: int, h: int, s: int, d: int, causal: int) -> dict:
    return {"B": b, "H": h, "S": s, "D": d, "causal": causal}


# Ragged S everywhere; BLOCK_M > BLOCK_N, < BLOCK_N, and S < BLOCK_N (a single masked block).
CASES = [
    (prob(1, 2, 40, 64, 1), cfg(16, 16)),
    (prob(1, 1, 40, 64, 0), cfg(16, 32)),
    (prob(2, 1, 72, 128, 1), cfg(32, 16)),
    (prob(1, 1, 72, 128, 0), cfg(16, 64)),
    (prob(1, 1, 17, 64, 1), cfg(16, 32)),
]


@pytest.mark.parametrize("dtype", at.DTYPES)
@pytest.mark.parametrize("problem,config", CASES)
def test_matches_reference(dtype, problem, config):
    inputs = at.make_inputs(problem, dtype, seed=1)
    out = at.launch(inputs, config)
    q = inputs["q"]
    assert out.dtype == q.dtype and out.shape == q.shape
    assert relative_error(out, at.reference(inputs)) <= at.TOLERANCE[dtype]
    assert relative_error(at.torch_op(inputs), at.reference(inputs)) <= at.TOLERANCE[dtype]


def test_default_space_config_and_strides():
    # (B, S, H, D) storage viewed as (B, H, S, D), a strided out, causal as a plain bool.
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 72, 2, 64, generator=gen).half().transpose(1, 2)
               for _ in range(3))
    out = torch.zeros(1, 72, 2, 64, dtype=torch.float16).transpose(1, 2)
    inputs = {"q": q, "k": k, "v": v, "out": out, "causal": True}
    at.launch(inputs, Config(cfg(64, 32), num_warps=4, num_stages=2))
    assert relative_error(out, at.reference(inputs)) <= at.TOLERANCE["float16"]


def test_causal_skips_blocks_past_the_diagonal():
    # NaN in K/V rows >= 48 poisons any query block that even loads them (masked P=0 times
    # NaN is NaN), so finite rows < 48 prove those blocks were skipped, not just masked.
    inputs = at.make_inputs(prob(1, 1, 64, 64, 1), "float16", seed=2)
    ref = at.reference(inputs)
    for name in ("k", "v"):
        inputs[name][..., 48:, :] = float("nan")
    out = at.launch(inputs, cfg(16, 16))
    assert relative_error(out[..., :48, :], ref[..., :48, :]) <= at.TOLERANCE["float16"]


def test_causal_flag_survives_rebuild_from_shapes():
    # Compile workers rebuild inputs from specs; the flag must come back the same.
    from costtune.build.workload import rebuild_inputs, tensor_specs

    for causal in (0, 1):
        inputs = at.make_inputs(prob(1, 1, 20, 64, causal), "float16")
        rebuilt = rebuild_inputs(tensor_specs(inputs))
        for ins in (inputs, rebuilt):
            assert at.kernel_calls(ins, cfg(64, 32))[0].kwargs["CAUSAL"] is bool(causal)


def test_make_inputs_seeded():
    a = at.make_inputs(prob(1, 2, 20, 64, 0), "bfloat16", seed=3)
    b = at.make_inputs(prob(1, 2, 20, 64, 0), "bfloat16", seed=3)
    c = at.make_inputs(prob(1, 2, 20, 64, 0), "bfloat16", seed=4)
    assert a["q"].dtype == torch.bfloat16 and a["q"].shape == (1, 2, 20, 64)
    assert all(torch.equal(a[n], b[n]) for n in ("q", "k", "v"))
    assert not torch.equal(a["q"], c["q"]) and not torch.equal(a["q"], a["k"])


def test_flops_and_bytes():
    p = prob(2, 3, 100, 64, 0)
    assert at.flops(p) == 4 * 2 * 3 * 100**2 * 64
    assert at.flops({**p, "causal": True}) == at.flops(p) / 2
    assert at.min_bytes(p, "float16") == 4 * 2 * 3 * 100 * 64 * 2


def test_suites():
    assert 24 <= len(at.TRAIN_SHAPES) <= 32 and 12 <= len(at.TEST_SHAPES) <= 16
    train = {tuple(p.items()) for p in at.TRAIN_SHAPES}
    test = {tuple(p.items()) for p in at.TEST_SHAPES}
    assert len(train) == len(at.TRAIN_SHAPES) and len(test) == len(at.TEST_SHAPES)
    assert not train & test
    for suite in (at.TRAIN_SHAPES, at.TEST_SHAPES):
        assert all(set(p) == set(at.PROBLEM_KEYS) for p in suite)
        assert all(128 <= p["S"] <= 16384 and p["D"] in (64, 128) for p in suite)
        assert {p["causal"] for p in suite} == {0, 1} and {p["D"] for p in suite} == {64, 128}
        assert all(at.flops({**p, "causal": 0}) <= 2.2e12 for p in suite)
    assert any(p["S"] & (p["S"] - 1) for p in at.TEST_SHAPES + at.TRAIN_SHAPES)


def test_space_constraints_and_counts():
    assert len(at.config_space()) == len(at.config_space(prob(1, 1, 4096, 128, 1)))
    for p in at.TRAIN_SHAPES + at.TEST_SHAPES:
        configs = at.config_space(p).configs()
        assert 24 <= len(configs) <= 300
        for c in configs:
            smem = c["num_stages"] * c["BLOCK_N"] * p["D"] * 4 + c["BLOCK_M"] * p["D"] * 2
            assert smem <= H200.max_shared_per_block
    # D=128 drops the 4-stage BLOCK_N=128 configs; short sequences cap the blocks.
    assert at.config_space(prob(1, 1, 128, 128, 0)).violated(cfg(64, 128, stages=4)) == [
        "shared_memory_le_sm90"]
    small = at.config_space(prob(1, 1, 40, 64, 0))
    assert {c["BLOCK_M"] for c in small} == {64} and {c["BLOCK_N"] for c in small} == {32, 64}
    with pytest.raises(ValueError, match="D=96"):
        at.config_space(prob(1, 1, 128, 96, 0))


def test_grid_matches_kernel_calls():
    # Zero-stride views stand in for suite-sized tensors without allocating them.
    for p in at.TRAIN_SHAPES[::5] + at.TEST_SHAPES[::4]:
        shape = (p["B"], p["H"], p["S"], p["D"])
        t = torch.empty(1, 1, 1, 1, dtype=torch.bfloat16).expand(*shape)
        inputs = {"q": t, "k": t, "v": t, "out": t, "causal": p["causal"]}
        for c in at.config_space(p).sample(4, seed=0):
            (call,) = at.kernel_calls(inputs, c)
            assert call.grid == at.grid(p, c)
            assert call.kwargs["CAUSAL"] is bool(p["causal"]) and call.kwargs["HEAD_DIM"] == p["D"]
            assert (call.num_warps, call.num_stages) == (c["num_warps"], c["num_stages"])


def _qkv(**over) -> dict:
    base = {n: torch.zeros(1, 2, 8, 64, dtype=torch.float16) for n in ("q", "k", "v")}
    return {**base, **over}


@pytest.mark.parametrize("inputs,match", [
    (_qkv(q=torch.zeros(1, 2, 8, 64)), "q has dtype"),
    (_qkv(k=torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16)), "k has dtype"),
    (_qkv(v=torch.zeros(2, 8, 64, dtype=torch.float16)), "v must have 4 dims"),
    (_qkv(k=torch.zeros(1, 2, 9, 64, dtype=torch.float16)), "k has shape"),
    (_qkv(v=torch.zeros(1, 2, 8, 64, dtype=torch.float16, device="meta")), "v is on meta"),
    (_qkv(out=torch.zeros(1, 2, 8, 128, dtype=torch.float16)), "out has shape"),
    ({"q": torch.zeros(1, 2, 8, 64, dtype=torch.float16)}, "k must be a torch.Tensor"),
    ({n: torch.zeros(1, 1, 8, 32, dtype=torch.float16) for n in "qkv"}, "head dim 32"),
    (_qkv(causal=torch.ones(2)), "causal must be"),
])
def test_bad_inputs(inputs, match):
    with pytest.raises(ValueError, match=match):
        at.launch(inputs, cfg(64, 32))


@pytest.mark.parametrize("config,match", [
    ({**cfg(64, 32), "BLOCK_K": 32}, "unknown \\['BLOCK_K'\\]"),
    ({"BLOCK_M": 64, "num_warps": 4, "num_stages": 2}, "missing \\['BLOCK_N'\\]"),
    (cfg(8, 32), "BLOCK_M=8 must be a power of two >= 16"),
    (cfg(64, 48), "BLOCK_N=48"),
    (cfg(64, 32, warps=0), "num_warps=0"),
])
def test_bad_configs(config, match):
    with pytest.raises(ValueError, match=match):
        at.launch(_qkv(), config)
    with pytest.raises(ValueError, match=match):
        at.grid(prob(1, 2, 8, 64, 0), config)
