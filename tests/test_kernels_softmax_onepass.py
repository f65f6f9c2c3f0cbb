"""softmax_onepass: interpreter correctness, the persistent grid, space constraints, error paths
and sm_90 AOT compiles of the space's largest configs (in a worker without the interpreter)."""

from __future__ import annotations

import pytest
import torch

from costtune.build.pool import get_pool
from costtune.hardware import H200
from costtune.kernels import relative_error
from costtune.kernels import softmax as sm
from costtune.kernels import softmax_onepass as op


def cfg(warps: int = 1, stages: int = 1) -> dict:
    return {"num_warps": warps, "num_stages": stages}


# Odd cols; rows > the 32-warp grid (264 programs) so programs loop over rows, pipelined.
CASES = [(5, 77, cfg(1)), (3, 1000, cfg(4, 2)), (300, 64, cfg(32, 3)), (270, 33, cfg(32, 4))]


@pytest.mark.parametrize("dtype", op.DTYPES)
@pytest.mark.parametrize("rows,cols,config", CASES)
def test_matches_reference(dtype, rows, cols, config):
    inputs = op.make_inputs({"rows": rows, "cols": cols}, dtype, seed=1)
    out = op.launch(inputs, config)
    assert out.dtype == inputs["x"].dtype and out.shape == (rows, cols)
    assert relative_error(out, op.reference(inputs)) <= op.TOLERANCE[dtype]


def test_strided_and_neg_inf():
    x = torch.randn(4, 600)[:, ::2]
    x[2, :150] = -float("inf")
    out = torch.zeros(4, 400)[:, 50:350]
    op.launch({"x": x, "out": out}, cfg(2, 2))
    torch.testing.assert_close(out, torch.softmax(x, -1), atol=1e-6, rtol=1e-5)


def test_family_facts_reexported():
    assert op.FAMILY == "softmax" and op.NAME == "softmax_onepass" and op.DESCRIPTION
    assert op.TRAIN_SHAPES == sm.TRAIN_SHAPES and op.TEST_SHAPES == sm.TEST_SHAPES
    assert op.TOLERANCE == sm.TOLERANCE and op.reference is sm.reference
    assert op.implied_params({"rows": 3, "cols": 1000}, cfg()) == {"BLOCK_N": 1024,
                                                                    "ROWS_PER_PROG": 1}


def test_grid_is_persistent():
    assert op.grid({"rows": 10, "cols": 64}, cfg(4)) == (10,)
    assert op.grid({"rows": 65536, "cols": 64}, cfg(1)) == (H200.num_sms * 32,)  # CTA cap
    assert op.grid({"rows": 65536, "cols": 64}, cfg(16)) == (H200.num_sms * 4,)
    for p in sm.TEST_SHAPES[::4]:
        x = torch.empty(1, 1, dtype=torch.float16).expand(p["rows"], p["cols"])
        inputs = {"x": x, "out": torch.empty(1, 1, dtype=torch.float16).expand_as(x)}
        for c in op.config_space(p):
            (call,) = op.kernel_calls(inputs, c)
            assert call.grid == op.grid(p, c)
            assert call.kwargs == {"BLOCK_N": op.implied_params(p, c)["BLOCK_N"],
                                   "NUM_STAGES": c["num_stages"]}


def test_space_constraints():
    sizes = []
    for p in sm.TRAIN_SHAPES + sm.TEST_SHAPES:
        block_n = 1 << (p["cols"] - 1).bit_length()
        configs = op.config_space(p).configs()
        sizes.append(len(configs))
        for c in configs:
            assert 1 <= block_n / (32 * c["num_warps"]) <= 64
            assert (c["num_stages"] - 1) * block_n * 4 <= H200.max_shared_per_block
            assert c["num_stages"] == 1 or p["rows"] > op.grid(p, c)[0]
    assert min(sizes) >= 1 and max(sizes) <= 24
    assert len(op.config_space()) == 24
    assert op.config_space({"rows": 64, "cols": 65536}).violated(cfg(16, 2)) == [
        "values_per_thread_1_to_64", "stages_only_when_a_program_loops",
        "staged_rows_fit_shared_memory"]


def test_shared_memory_floor():
    p = {"rows": 8, "cols": 4096}
    assert op.shared_memory_floor(p, cfg(4, 3), dtype="float32", aligned={"x": True}) == 32768
    assert op.shared_memory_floor(p, cfg(4, 1), dtype="float32", aligned={"x": True}) == 0
    assert op.shared_memory_floor(p, cfg(4, 3), dtype="float16", aligned={"x": False}) == 0
    assert op.shared_memory_floor({"rows": 8, "cols": 1000}, cfg(4, 3), dtype="float16",
                                  aligned={"x": True}) == 0
    import numpy as np

    arr = op.shared_memory_floor(p, {"num_warps": np.array([4, 4]),
                                     "num_stages": np.array([1, 2])},
                                 dtype="float16", aligned={"x": True})
    assert arr.tolist() == [0, 8192]


@pytest.mark.parametrize("config,match", [
    ({**cfg(), "BLOCK_N": 64}, "unknown \\['BLOCK_N'\\]"),
    ({"num_warps": 4}, "missing \\['num_stages'\\]"),
    (cfg(3), "num_warps=3 must be one of"),
    (cfg(64), "num_warps=64"),
    (cfg(4, 0), "num_stages=0"),
])
def test_bad_configs(config, match):
    with pytest.raises(ValueError, match=match):
        op.launch({"x": torch.zeros(4, 8)}, config)
    with pytest.raises(ValueError, match=match):
        op.grid({"rows": 4, "cols": 8}, config)


@pytest.mark.parametrize("inputs,match", [
    ({"x": torch.zeros(4, 8, dtype=torch.int32)}, "x has dtype"),
    ({"x": torch.zeros(2, 4, 8)}, "x must have 2 dims"),
    ({"x": torch.zeros(4, 8), "out": torch.zeros(4, 9)}, "out has shape"),
    ({"x": torch.empty(1, 1).expand(2, 65537)}, "65537 columns"),
])
def test_bad_inputs(inputs, match):
    with pytest.raises(ValueError, match=match):
        op.launch(inputs, cfg(32))


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
    # Per shape, the config staging the most bytes (fp32) and the fewest warps (most values
    # per thread); long rows and many rows.
    cases = []
    for p in ({"rows": 4096, "cols": 32768}, {"rows": 65536, "cols": 4096},
              {"rows": 2048, "cols": 65536}, {"rows": 65536, "cols": 1024},
              {"rows": 8192, "cols": 8192}):
        configs = op.config_space(p).configs()
        for c in (max(configs, key=lambda c: (c["num_stages"], -c["num_warps"])),
                  min(configs, key=lambda c: (c["num_warps"], c["num_stages"]))):
            cases.append(("softmax_onepass", p, "float32", c.as_dict()))
    pool = get_pool(1)
    records = pool.submit(_aot, cases).result()
    for (_, p, dtype, c), r in zip(cases, records, strict=True):
        assert r["status"] == "ok", (p, c, r["error"])
        assert r["shared_bytes"] <= H200.max_shared_per_block
        # 32 warps cap a thread at 64 registers: 65536-column rows spill (a small stack).
        assert r["stack_bytes"] == 0 or p["cols"] == 65536, (p, c, r["stack_bytes"])
        floor = op.shared_memory_floor(p, c, dtype=dtype, aligned={"x": True})
        assert floor <= r["shared_bytes"], (p, c)
