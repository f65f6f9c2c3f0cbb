"""softmax_splitrow and softmax_tma: interpreter correctness (looped and one-chunk rows, ragged
tails, several segments or boxes per row, -inf), grids, space constraints, error paths, the TMA
shared-memory floor against sm_90 AOT compiles (in a worker without the interpreter)."""

from __future__ import annotations

import re

import pytest
import torch

from costtune.build.pool import get_pool
from costtune.hardware import H200
from costtune.kernels import IMPLEMENTATIONS, relative_error
from costtune.kernels import softmax as sm
from costtune.kernels import softmax_splitrow as sr
from costtune.kernels import softmax_tma as st


def split(block_n: int, segment: int = 1, warps: int = 1, stages: int = 1) -> dict:
    return {"BLOCK_N": block_n, "SEGMENT": segment, "num_warps": warps, "num_stages": stages}


def tma(block_n: int, rows_per_prog: int = 1, warps: int = 1, stages: int = 1) -> dict:
    return {"BLOCK_N": block_n, "ROWS_PER_PROG": rows_per_prog, "num_warps": warps,
            "num_stages": stages}


# (rows, cols, config): several segments with a ragged last one; one segment of two chunks;
# one chunk wider than the row; many segments, pipelined.
SPLIT_CASES = [(3, 1000, split(128, 2)), (2, 200, split(128, 2, stages=2)),
               (4, 77, split(128)), (1, 5000, split(256, 4, 2, 3))]
# Looped rows with a ragged last box and rows past the end; one box per row; exact boxes.
TMA_CASES = [(5, 1000, tma(128, 2, stages=2)), (7, 80, tma(128, 4)), (9, 200, tma(64, 4, 2, 3)),
             (2, 64, tma(64, 1, 2))]


@pytest.mark.parametrize("dtype", sm.DTYPES)
@pytest.mark.parametrize("module,rows,cols,config",
                         [(sr, *c) for c in SPLIT_CASES] + [(st, *c) for c in TMA_CASES])
def test_matches_reference(module, dtype, rows, cols, config):
    inputs = module.make_inputs({"rows": rows, "cols": cols}, dtype, seed=1)
    out = module.launch(inputs, config)
    assert out.dtype == inputs["x"].dtype and out.shape == (rows, cols)
    assert relative_error(out, module.reference(inputs)) <= module.TOLERANCE[dtype]


@pytest.mark.parametrize("module,config", [(sr, split(128, 1)), (sr, split(128, 2)),
                                           (st, tma(64, 2)), (st, tma(256, 1))])
def test_neg_inf_rows_and_given_out(module, config):
    x = torch.randn(5, 400)
    x[2, :150] = -float("inf")
    x[3, ::7] = -float("inf")
    out = torch.zeros(5, 400)
    got = module.launch({"x": x, "out": out}, config)
    assert got.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, torch.softmax(x, -1), atol=1e-6, rtol=1e-5)


def test_splitrow_strided_and_scratch():
    x = torch.randn(3, 1200)[:, ::2]
    out = torch.zeros(3, 700)[:, 50:650]
    calls = sr.kernel_calls({"x": x, "out": out}, split(128, 2))
    assert [c.grid for c in calls] == [(3, 3)] * 2 == [sr.grid({"rows": 3, "cols": 600},
                                                               split(128, 2))] * 2
    assert calls[0].args[1] is calls[1].args[2] and calls[0].args[1].numel() == 3 * 3 * 2
    assert calls[1].kwargs["SEG_P2"] == 4
    for call in calls:
        call.run()
    torch.testing.assert_close(out, torch.softmax(x, -1), atol=1e-6, rtol=1e-5)


def test_family_facts():
    assert {"softmax_splitrow", "softmax_tma"} <= set(IMPLEMENTATIONS["softmax"])
    for module in (sr, st):
        assert module.FAMILY == "softmax" and module.DESCRIPTION
        assert module.reference is sm.reference and module.TOLERANCE == sm.TOLERANCE
    assert sr.TRAIN_SHAPES == sm.TRAIN_SHAPES and sr.TEST_SHAPES == sm.TEST_SHAPES
    assert sr.implied_params({"rows": 3, "cols": 100}, split(128)) == {"ROWS_PER_PROG": 1,
                                                                        "PASSES": 2}
    assert st.implied_params({"rows": 3, "cols": 100}, tma(128)) == {}
    # TMA keeps exactly the shapes whose fp16 rows are 16-byte multiples.
    kept = {p["cols"] for p in st.TRAIN_SHAPES + st.TEST_SHAPES}
    dropped = {p["cols"] for p in sm.TRAIN_SHAPES + sm.TEST_SHAPES} - kept
    assert dropped == {50257, 21843, 100, 91, 1234} and all(c % 8 == 0 for c in kept)


def test_splitrow_space():
    sizes = []
    for p in sm.TRAIN_SHAPES + sm.TEST_SHAPES:
        configs = sr.config_space(p).configs()
        sizes.append(len(configs))
        few = p["rows"] < 8 * H200.num_sms
        for c in configs:
            assert 2 <= c["BLOCK_N"] / (32 * c["num_warps"]) <= 16
            assert c["SEGMENT"] * c["BLOCK_N"] <= max(128, 1 << (p["cols"] - 1).bit_length())
            n_seg = sr.segments(p["cols"], c)
            assert n_seg <= sr.MAX_SEGMENTS and (few or n_seg == 1)
            assert c["num_stages"] == 1 or c["SEGMENT"] > 1
    assert min(sizes) >= 2 and max(sizes) <= 300
    # A few long rows spread over many programs.
    most = max(sr.segments(65536, c) for c in sr.config_space({"rows": 4, "cols": 65536}))
    assert most == sr.MAX_SEGMENTS
    assert sr.config_space({"rows": 4096, "cols": 4096}).violated(split(128, 2, 2, 2)) == [
        "split_only_for_few_rows"]


def test_tma_space_and_shapes():
    for p in st.TRAIN_SHAPES + st.TEST_SHAPES:
        for c in st.config_space(p).configs():
            assert 1 <= c["BLOCK_N"] * c["ROWS_PER_PROG"] / (32 * c["num_warps"]) <= 32
            assert c["BLOCK_N"] <= min(st.MAX_BOX, max(16, 1 << (p["cols"] - 1).bit_length()))
            assert c["ROWS_PER_PROG"] == 1 or p["rows"] >= c["ROWS_PER_PROG"] * H200.num_sms
    with pytest.raises(ValueError, match="rows_tma_aligned_in_16_bits"):
        st.config_space({"rows": 8, "cols": 1001}).configs()


@pytest.mark.parametrize("module,config,match", [
    (sr, {**split(128), "ROWS_PER_PROG": 1}, "unknown \\['ROWS_PER_PROG'\\]"),
    (sr, {"BLOCK_N": 128, "num_warps": 1, "num_stages": 1}, "missing \\['SEGMENT'\\]"),
    (sr, split(128, 3), "SEGMENT=3 must be a power of two"),
    (st, tma(512), "BLOCK_N=512 exceeds a TMA box's 256"),
    (st, tma(96), "BLOCK_N=96 must be a power of two"),
    (st, tma(64, stages=0), "num_stages=0"),
])
def test_bad_configs(module, config, match):
    with pytest.raises(ValueError, match=match):
        module.launch({"x": torch.zeros(4, 8)}, config)
    with pytest.raises(ValueError, match=match):
        module.grid({"rows": 4, "cols": 8}, config)


@pytest.mark.parametrize("module,inputs,config,match", [
    (sr, {"x": torch.zeros(4, 8, dtype=torch.float64)}, split(128), "x has dtype"),
    (sr, {"x": torch.zeros(2, 4, 8)}, split(128), "x must have 2 dims"),
    (sr, {"x": torch.zeros(2, 100000)}, split(128), "into 782 segments; at most 512"),
    (st, {"x": torch.zeros(4, 16), "out": torch.zeros(4, 16, dtype=torch.float16)},
     tma(16), "out has dtype"),
    (st, {"x": torch.zeros(4, 30, dtype=torch.float16)}, tma(32),
     "x needs unit column stride and 16-byte aligned rows"),
    (st, {"x": torch.zeros(4, 64)[:, ::2]}, tma(32), "x needs unit column stride"),
])
def test_bad_inputs(module, inputs, config, match):
    with pytest.raises(ValueError, match=match):
        module.launch(inputs, config)


def _aot(cases: list[tuple]) -> list[list[dict]]:
    from costtune.build.aot import compile_job, specialize
    from costtune.features.compiled import meta_inputs
    from costtune.kernels import get_implementation

    out = []
    for name, problem, dtype, config in cases:
        mod = get_implementation(name)
        calls = mod.kernel_calls(meta_inputs(mod, problem, dtype), config)
        out.append([compile_job(specialize(c), sass=False) for c in calls])
    return out


def test_largest_configs_compile_for_sm90_within_floor():
    # The most values per thread of a few shapes (fp16, as collected): no spill, every launch
    # compiles, and the TMA floor never claims more than the compile uses.
    cases = []
    for name, module in (("softmax_splitrow", sr), ("softmax_tma", st)):
        for p in ({"rows": 4, "cols": 65536}, {"rows": 8192, "cols": 4096}):
            configs = module.config_space(p).configs()
            by_values = sorted(configs, key=lambda c: (
                c["BLOCK_N"] * c.as_dict().get("ROWS_PER_PROG", 1) / c["num_warps"],
                c["num_stages"]))
            cases += [(name, p, "float16", c.as_dict()) for c in by_values[-2:]]
    records = get_pool(1).submit(_aot, cases).result()
    for (name, p, dtype, c), recs in zip(cases, records, strict=True):
        assert len(recs) == (2 if name == "softmax_splitrow" else 1)
        for r in recs:
            assert r["status"] == "ok", (name, p, c, r["error"])
            assert r["stack_bytes"] == 0, (name, p, c, r["stack_bytes"], r["n_regs"])
            assert r["shared_bytes"] <= H200.max_shared_per_block
        if name == "softmax_tma":
            floor = st.shared_memory_floor(p, c, dtype=dtype, aligned={"x": True})
            assert 0 < floor <= recs[0]["shared_bytes"], (p, c)


def test_splitrow_reads_x_twice_in_its_features_and_names_its_main_launch():
    # Two launches read x twice also where one block holds the row (BLOCK_N >= cols).
    from costtune.features.static import static_features

    rows = [{"kernel": "softmax", "implementation": "softmax_splitrow", "dtype": "float16",
             "rows": 4096, "cols": 1000, "config": f"BLOCK_N={bn},SEGMENT={seg},num_warps=4,"
             "num_stages=1", "BLOCK_N": bn, "SEGMENT": seg, "num_warps": 4, "num_stages": 1}
            for bn, seg in ((1024, 1), (512, 2))]
    f = static_features(rows)
    assert f["log2_bytes_loaded"].iloc[0] == pytest.approx(f["log2_bytes_loaded"].iloc[1], 0.01)
    assert f["tile_intensity"].tolist() == [1.25, 1.25]
    # The compiled features describe the normalising launch (both launches share the grid).
    names, main = get_pool(1).submit(_main_launch).result()
    assert names == ["_segment_stats", "_segment_normalize"] and main == sr.MAIN_LAUNCH == 1


def _main_launch() -> tuple[list[str], int]:
    from costtune.features.compiled import launch_jobs

    jobs, main = launch_jobs("softmax_splitrow", {"rows": 8, "cols": 4096}, "float16",
                             split(128, 2))
    return [j.resolve_fn().__name__ for j in jobs], main


def test_splitrow_check_fails_if_the_statistics_launch_writes_nothing():
    from costtune.kernels.base import poisoned_scratch

    x = sr.make_inputs({"rows": 16, "cols": 1000}, "float16", seed=1)
    with poisoned_scratch():
        assert relative_error(sr.launch(x, split(128, 2)), sr.reference(x)) <= 2e-3
        calls = sr.kernel_calls(x, split(128, 2))
        calls[1].run()  # the normalising launch alone reads NaN statistics
    assert relative_error(calls[1].args[1], sr.reference(x)) == float("inf")


def test_tma_bf16_shapes_are_the_familys():
    from costtune.collect.plan import suite_workloads

    for suite in ("train", "test"):
        family = {w.id.removeprefix("softmax_") for w in suite_workloads("softmax", suite)
                  if w.dtype == "bfloat16"}
        mine = {w.id.removeprefix("softmax_tma_") for w in suite_workloads("softmax_tma", suite)
                if w.dtype == "bfloat16"}
        assert mine and mine <= family
        assert mine == {i for i in family if int(re.search(r"cols(\d+)", i)[1]) % 8 == 0}
