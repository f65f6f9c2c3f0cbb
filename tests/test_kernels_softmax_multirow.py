"""softmax_multirow: interpreter correctness (multi-chunk rows, several rows per program, odd
cols), space constraints, error paths and sm_90 AOT compiles of the space's largest blocks."""

from __future__ import annotations

import pytest
import torch

from costtune.build.pool import get_pool
from costtune.hardware import H200
from costtune.kernels import relative_error
from costtune.kernels import softmax as sm
from costtune.kernels import softmax_multirow as mr


def cfg(block_n: int, rows_per_prog: int = 1, warps: int = 1, stages: int = 1) -> dict:
    return {"BLOCK_N": block_n, "ROWS_PER_PROG": rows_per_prog, "num_warps": warps,
            "num_stages": stages}


# Multi-chunk rows with a ragged last chunk and masked tail rows; one chunk; one exact chunk.
CASES = [(7, 77, cfg(16, 4)), (5, 1000, cfg(128, 2, 2)), (3, 33, cfg(64, 8)),
         (4, 256, cfg(64, 2))]


@pytest.mark.parametrize("dtype", mr.DTYPES)
@pytest.mark.parametrize("rows,cols,config", CASES)
def test_matches_reference(dtype, rows, cols, config):
    inputs = mr.make_inputs({"rows": rows, "cols": cols}, dtype, seed=1)
    out = mr.launch(inputs, config)
    assert out.dtype == inputs["x"].dtype and out.shape == (rows, cols)
    assert relative_error(out, mr.reference(inputs)) <= mr.TOLERANCE[dtype]


def test_strided_and_neg_inf():
    x = torch.randn(5, 600)[:, ::2]
    x[2, :150] = -float("inf")
    x[3, ::7] = -float("inf")
    out = torch.zeros(5, 400)[:, 50:350]
    mr.launch({"x": x, "out": out}, cfg(64, 2))
    torch.testing.assert_close(out, torch.softmax(x, -1), atol=1e-6, rtol=1e-5)


def test_family_facts_and_grid():
    assert mr.FAMILY == "softmax" and mr.NAME == "softmax_multirow" and mr.DESCRIPTION
    assert mr.TRAIN_SHAPES == sm.TRAIN_SHAPES and mr.TEST_SHAPES == sm.TEST_SHAPES
    assert mr.implied_params({"rows": 3, "cols": 100}, cfg(64)) == {}
    for p in sm.TEST_SHAPES[::4]:
        x = torch.empty(1, 1, dtype=torch.float16).expand(p["rows"], p["cols"])
        inputs = {"x": x, "out": torch.empty(1, 1, dtype=torch.float16).expand_as(x)}
        for c in mr.config_space(p).sample(5, seed=0):
            (call,) = mr.kernel_calls(inputs, c)
            assert call.grid == mr.grid(p, c) == (-(-p["rows"] // c["ROWS_PER_PROG"]),)


def test_space_constraints_and_counts():
    sizes, gap = [], 0
    for p in sm.TRAIN_SHAPES + sm.TEST_SHAPES:
        configs = mr.config_space(p).configs()
        sizes.append(len(configs))
        for c in configs:
            assert 4 <= c["BLOCK_N"] * c["ROWS_PER_PROG"] / (32 * c["num_warps"]) <= 32
            assert c["BLOCK_N"] <= max(128, 1 << (p["cols"] - 1).bit_length())
            assert c["ROWS_PER_PROG"] == 1 or p["rows"] >= c["ROWS_PER_PROG"] * H200.num_sms
            gap += c["BLOCK_N"] < p["cols"] and c["ROWS_PER_PROG"] > 1
    assert min(sizes) >= 1 and max(sizes) <= 90
    assert gap > 500  # looped rows with several rows per program: the configs this adds
    assert mr.config_space({"rows": 100, "cols": 100}).violated(cfg(256, 2, 16)) == [
        "values_per_thread_4_to_32", "block_n_le_next_pow2_cols", "rows_per_prog_fills_sms"]


@pytest.mark.parametrize("config,match", [
    ({**cfg(64), "BLOCK_M": 64}, "unknown \\['BLOCK_M'\\]"),
    ({"BLOCK_N": 64, "num_warps": 1, "num_stages": 1}, "missing \\['ROWS_PER_PROG'\\]"),
    (cfg(96), "BLOCK_N=96 must be a power of two"),
    (cfg(64, 3), "ROWS_PER_PROG=3 must be a power of two"),
    (cfg(64, stages=0), "num_stages=0"),
])
def test_bad_configs(config, match):
    with pytest.raises(ValueError, match=match):
        mr.launch({"x": torch.zeros(4, 8)}, config)
    with pytest.raises(ValueError, match=match):
        mr.grid({"rows": 4, "cols": 8}, config)


@pytest.mark.parametrize("inputs,match", [
    ({"x": torch.zeros(4, 8, dtype=torch.float64)}, "x has dtype"),
    ({"x": torch.zeros(2, 4, 8)}, "x must have 2 dims"),
    ({"x": torch.zeros(4, 8), "out": torch.zeros(4, 8, dtype=torch.float16)}, "out has dtype"),
])
def test_bad_inputs(inputs, match):
    with pytest.raises(ValueError, match=match):
        mr.launch(inputs, cfg(64))


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


def test_largest_blocks_compile_for_sm90():
    # The most values per thread and the largest 2-D blocks of a few shapes, fp32.
    cases = []
    for p in ({"rows": 65536, "cols": 1024}, {"rows": 4096, "cols": 32768},
              {"rows": 32768, "cols": 3072}, {"rows": 1024, "cols": 50257}):
        configs = mr.config_space(p).configs()
        by_block = sorted(configs, key=lambda c: (c["BLOCK_N"] * c["ROWS_PER_PROG"],
                                                  -c["num_warps"]))
        cases += [("softmax_multirow", p, "float32", c.as_dict()) for c in by_block[-3:]]
    records = get_pool(1).submit(_aot, cases).result()
    for (_, p, _, c), r in zip(cases, records, strict=True):
        assert r["status"] == "ok", (p, c, r["error"])
        assert r["shared_bytes"] <= H200.max_shared_per_block and r["stack_bytes"] == 0, (p, c)
