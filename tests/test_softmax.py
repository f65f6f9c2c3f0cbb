"""Softmax family: correctness under the interpreter, space constraints, suites, input checks."""

from __future__ import annotations

import pytest
import torch

from costtune.kernels import relative_error
from costtune.kernels import softmax as sm
from costtune.types import Config


def cfg(block_n: int, rows_per_prog: int = 1, warps: int = 1, stages: int = 1) -> dict:
    return {"BLOCK_N": block_n, "ROWS_PER_PROG": rows_per_prog, "num_warps": warps,
            "num_stages": stages}


# (rows, cols, config): one pass, one pass with masked rows, looped with a ragged last chunk,
# looped with several rows per program (outside the default space, which the kernel allows).
CASES = [
    (5, 77, cfg(128)),
    (5, 77, cfg(128, rows_per_prog=4, warps=2)),
    (3, 1000, cfg(256, stages=2)),
    (5, 77, cfg(32, rows_per_prog=2, stages=3)),
]


@pytest.mark.parametrize("dtype", sm.DTYPES)
@pytest.mark.parametrize("rows,cols,config", CASES)
def test_matches_reference(dtype, rows, cols, config):
    inputs = sm.make_inputs({"rows": rows, "cols": cols}, dtype, seed=1)
    out = sm.launch(inputs, config)
    assert out.dtype == inputs["x"].dtype and out.shape == (rows, cols)
    assert relative_error(out, sm.reference(inputs)) <= sm.TOLERANCE[dtype]
    assert relative_error(sm.torch_op(inputs), sm.reference(inputs)) <= sm.TOLERANCE[dtype]


@pytest.mark.parametrize("block_n", [64, 512])
def test_strided_and_neg_inf(block_n):
    # Non-unit strides on both sides, and -inf logits (masked scores) in the looped path.
    x = torch.randn(4, 600)[:, ::2]
    x[2, :150] = -float("inf")
    x[3, ::7] = -float("inf")
    out = torch.zeros(4, 400)[:, 50:350]
    sm.launch({"x": x, "out": out}, Config(cfg(block_n)))
    torch.testing.assert_close(out, torch.softmax(x, -1), atol=1e-6, rtol=1e-5)


def test_make_inputs_seeded():
    a = sm.make_inputs({"rows": 3, "cols": 70}, "bfloat16", seed=3)["x"]
    b = sm.make_inputs({"rows": 3, "cols": 70}, "bfloat16", seed=3)["x"]
    c = sm.make_inputs({"rows": 3, "cols": 70}, "bfloat16", seed=4)["x"]
    assert a.dtype == torch.bfloat16 and torch.equal(a, b) and not torch.equal(a, c)


def test_flops_and_bytes():
    p = {"rows": 10, "cols": 100}
    assert sm.flops(p) == 5 * 1000
    assert sm.min_bytes(p, "float16") == 2 * 1000 * 2
    assert sm.min_bytes(p, "float32") == 2 * 1000 * 4


def test_suites():
    assert 35 <= len(sm.TRAIN_SHAPES) <= 45 and 15 <= len(sm.TEST_SHAPES) <= 25
    train = {tuple(p.items()) for p in sm.TRAIN_SHAPES}
    test = {tuple(p.items()) for p in sm.TEST_SHAPES}
    assert len(train) == len(sm.TRAIN_SHAPES) and len(test) == len(sm.TEST_SHAPES)
    assert not train & test
    shapes = sm.TRAIN_SHAPES + sm.TEST_SHAPES
    assert all(set(p) == set(sm.PROBLEM_KEYS) for p in shapes)
    assert all(1 <= p["rows"] <= 65536 and 64 <= p["cols"] <= 65536 for p in shapes)
    assert all(p["rows"] * p["cols"] <= 2**27 for p in shapes)
    pairs = {(p["rows"], p["cols"]) for p in shapes}
    assert {(4096, 4096), (8192, 8192)} <= pairs
    assert any(c & (c - 1) for _, c in pairs), "needs non-power-of-two cols"
    assert {1000, 50257} <= {c for _, c in pairs}


def test_space_constraints_and_counts():
    shapes = sm.TRAIN_SHAPES + sm.TEST_SHAPES
    for p in shapes:
        space = sm.config_space(p)
        configs = space.configs()
        assert 10 <= len(configs) <= 300, (p, len(configs))
        assert len({c.key for c in configs}) == len(configs)
        for c in configs:
            v = c.as_dict()
            assert 1 <= v["BLOCK_N"] * v["ROWS_PER_PROG"] / (32 * v["num_warps"]) <= 64
            assert v["BLOCK_N"] <= max(64, 1 << (p["cols"] - 1).bit_length())
            assert v["ROWS_PER_PROG"] <= p["rows"]
            assert v["num_stages"] == 1 or v["BLOCK_N"] < p["cols"]
    # Every shape keeps a one-pass config: a row always fits some BLOCK_N <= 65536.
    assert all(any(c["BLOCK_N"] >= p["cols"] for c in sm.config_space(p)) for p in shapes)
    assert len(sm.config_space()) > len(sm.config_space(sm.TEST_SHAPES[0]))
    assert sm.config_space({"rows": 2, "cols": 100}).violated(
        cfg(64, rows_per_prog=4, warps=1, stages=1)) == [
            "rows_per_prog_le_rows", "rows_per_prog_only_one_pass"]


def test_grid_matches_kernel_calls():
    # Zero-stride views stand in for suite-sized tensors without allocating them.
    for p in sm.TRAIN_SHAPES[::7] + sm.TEST_SHAPES[::5]:
        x = torch.empty(1, 1, dtype=torch.float16).expand(p["rows"], p["cols"])
        inputs = {"x": x, "out": torch.empty(1, 1, dtype=torch.float16).expand_as(x)}
        for c in sm.config_space(p).sample(5, seed=0):
            calls = sm.kernel_calls(inputs, c)
            assert len(calls) == 1 and calls[0].grid == sm.grid(p, c)
            one_pass = c["BLOCK_N"] >= p["cols"]
            assert (calls[0].fn is sm._softmax_one_pass) == one_pass
            assert calls[0].num_stages == c["num_stages"]


@pytest.mark.parametrize("inputs,match", [
    ({"x": torch.zeros(4, 8, dtype=torch.int32)}, "x has dtype"),
    ({"x": torch.zeros(4, 8, dtype=torch.float64)}, "x has dtype"),
    ({"x": torch.zeros(2, 4, 8)}, "x must have 2 dims"),
    ({"x": [[1.0]]}, "x must be a torch.Tensor"),
    ({"y": torch.zeros(4, 8)}, "x must be a torch.Tensor"),
    ({"x": torch.zeros(4, 8), "out": torch.zeros(4, 8, device="meta")}, "out is on meta"),
    ({"x": torch.zeros(4, 8), "out": torch.zeros(4, 9)}, "out has shape"),
    ({"x": torch.zeros(4, 8), "out": torch.zeros(4, 8, dtype=torch.float16)}, "out has dtype"),
])
def test_bad_inputs(inputs, match):
    with pytest.raises(ValueError, match=match):
        sm.launch(inputs, cfg(64))


@pytest.mark.parametrize("config,match", [
    ({**cfg(64), "BLOCK_M": 64}, "unknown \\['BLOCK_M'\\]"),
    ({"BLOCK_N": 64, "num_warps": 1, "num_stages": 1}, "missing \\['ROWS_PER_PROG'\\]"),
    (cfg(96), "BLOCK_N=96 must be a power of two"),
    (cfg(64, stages=0), "num_stages=0"),
])
def test_bad_configs(config, match):
    with pytest.raises(ValueError, match=match):
        sm.launch({"x": torch.zeros(4, 8)}, config)
    with pytest.raises(ValueError, match=match):
        sm.grid({"rows": 4, "cols": 8}, config)
