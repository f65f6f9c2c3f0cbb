"""Static features: hand-checked values, family grid/FLOP agreement, vectorised == row by row."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pandas as pd
import pytest

from costtune.features import STATIC_FEATURES, static_features, static_features_for
from costtune.kernels import get_family

GEMM = {"kernel": "gemm", "dtype": "float16", "M": 1000, "N": 1000, "K": 1000,
        "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "SPLIT_K": 2, "num_warps": 4,
        "num_stages": 3}
SOFTMAX = {"kernel": "softmax", "dtype": "float32", "rows": 100, "cols": 5000, "BLOCK_N": 1024,
           "ROWS_PER_PROG": 1, "num_warps": 4, "num_stages": 2}
ATTENTION = {"kernel": "attention", "dtype": "bfloat16", "B": 2, "H": 4, "S": 1000, "D": 64,
             "causal": 1, "BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}


def one(row: dict) -> pd.Series:
    return static_features([row]).iloc[0]


def test_gemm_hand_checked():
    f = one(GEMM)
    # 8 x 8 output tiles, 2 K splits; 16 K tiles of 64 -> 8 per split.
    assert f["num_programs"] == 128
    assert f["waves"] == pytest.approx(128 / 132)
    assert f["wave_efficiency"] == pytest.approx(128 / 132)
    assert f["pad_waste_m"] == pytest.approx(1 - 1000 / 1024)
    assert f["pad_waste_k"] == pytest.approx(1 - 1000 / 1024)
    assert f["loop_trips"] == 8
    assert f["smem_bytes_est"] == 3 * (128 * 64 + 64 * 128) * 2
    assert f["tile_intensity"] == pytest.approx(2 * 128 * 128 / (256 * 2))
    assert f["threads_per_program"] == 128 and f["elems_per_thread"] == 128
    assert f["log2_SPLIT_K"] == 1 and f["log2_BLOCK_K"] == 6 and f["dtype_bytes"] == 2
    assert f["kernel_gemm"] == 1 and f["kernel_softmax"] == 0


def test_gemm_waves_past_one():
    f = one({**GEMM, "M": 4096, "N": 4096, "SPLIT_K": 1})
    assert f["num_programs"] == 1024
    assert f["waves"] == pytest.approx(1024 / 132)
    assert f["wave_efficiency"] == pytest.approx(1024 / (8 * 132))
    assert f["pad_waste_m"] == 0


def test_softmax_hand_checked():
    f = one(SOFTMAX)
    assert f["num_programs"] == 100
    assert f["loop_trips"] == 5  # ceil(5000 / 1024) chunks per pass
    assert f["pad_waste_n"] == pytest.approx(1 - 5000 / 5120)
    assert f["pad_waste_m"] == 0
    assert f["load_amplification"] == pytest.approx(2.0)  # online pass + output pass
    g = one({**SOFTMAX, "rows": 1001, "cols": 1000, "ROWS_PER_PROG": 4, "num_stages": 1})
    assert g["num_programs"] == 251 and g["loop_trips"] == 1
    assert g["pad_waste_m"] == pytest.approx(1 - 1001 / 1004)
    # Padding rows of the last program re-read the last row (their loads are not masked).
    assert g["load_amplification"] == pytest.approx(1004 / 1001)


def test_attention_trips_causal_and_not():
    f = one(ATTENTION)
    # Query block i (rows 128i..128i+127) sees 2i unmasked + 2 diagonal KV blocks: mean 9.
    assert f["loop_trips"] == pytest.approx(9.0)
    assert f["num_programs"] == 8 * 2 * 4
    g = one({**ATTENTION, "causal": 0})
    assert g["loop_trips"] == 16  # ceil(1000 / 64)
    assert g["log2_flops"] == pytest.approx(f["log2_flops"] + 1)


@pytest.mark.parametrize("s,bm,bn", [(1000, 128, 64), (777, 64, 128), (4096, 128, 32),
                                     (197, 64, 64), (100, 128, 128)])
def test_causal_trips_match_the_kernel_loops(s, bm, bn):
    # The kernel's two tl.range loops, walked in Python.
    trips = []
    for m0 in range(0, s, bm):
        full_end = ((m0 + 1) // bn) * bn
        hi = min(m0 + bm, s)
        trips.append(len(range(0, full_end, bn)) + len(range(full_end, hi, bn)))
    f = one({**ATTENTION, "S": s, "BLOCK_M": bm, "BLOCK_N": bn})
    assert f["loop_trips"] == pytest.approx(np.mean(trips))


def test_nan_where_not_applicable():
    f = static_features([GEMM, SOFTMAX, ATTENTION]).set_index(
        pd.Index(["gemm", "softmax", "attention"]))
    assert f.loc["gemm", ["log2_rows", "log2_S", "causal", "log2_ROWS_PER_PROG"]].isna().all()
    assert f.loc["softmax", ["log2_size_k", "log2_tile_k", "pad_waste_k", "log2_BLOCK_K",
                             "log2_SPLIT_K", "log2_BLOCK_M"]].isna().all()
    assert f.loc["attention", ["log2_SPLIT_K", "log2_ROWS_PER_PROG", "log2_M"]].isna().all()
    shared = ["num_programs", "waves", "loop_trips", "smem_bytes_est", "tile_intensity",
              "elems_per_thread", "log2_flops", "log2_tile_m", "load_amplification"]
    assert f[shared].notna().all().all()
    assert list(static_features([GEMM]).columns) == STATIC_FEATURES


def _sample_rows(n_per_problem: int = 6) -> list[dict]:
    rows = []
    for kernel, dtype in (("gemm", "float16"), ("softmax", "float32"), ("attention", "float16")):
        family = get_family(kernel)
        for problem in family.TRAIN_SHAPES[::7]:
            for c in family.config_space(problem).sample(n_per_problem, seed=1):
                rows.append({"kernel": kernel, "dtype": dtype, "workload": f"{kernel}{problem}",
                             **problem, **c.as_dict(), "config": c.key})
    return rows


def test_agrees_with_family_grid_flops_and_bytes():
    rows = _sample_rows()
    feats = static_features(rows)
    for row, (_, f) in zip(rows, feats.iterrows(), strict=True):
        family = get_family(row["kernel"])
        problem = {k: row[k] for k in family.PROBLEM_KEYS}
        config = {k: v for k, v in row.items() if k in ("BLOCK_M", "BLOCK_N", "BLOCK_K",
                                                        "SPLIT_K", "ROWS_PER_PROG",
                                                        "num_warps", "num_stages")}
        assert f["num_programs"] == math.prod(family.grid(problem, config)), row
        assert f["log2_flops"] == pytest.approx(math.log2(family.flops(problem)))
        assert f["log2_min_bytes"] == pytest.approx(
            math.log2(family.min_bytes(problem, row["dtype"])))


def test_vectorised_equals_row_by_row_and_config_list():
    rows = _sample_rows(4)
    df = pd.DataFrame(rows)
    whole = static_features(df)
    single = pd.concat([static_features([r]) for r in rows], ignore_index=True)
    pd.testing.assert_frame_equal(whole.reset_index(drop=True), single)
    # A store holding several families loads sizes as nullable Int64 with <NA>.
    nullable = df.astype({c: "Int64" for c in ("M", "N", "K", "rows", "cols", "BLOCK_K")})
    pd.testing.assert_frame_equal(static_features(nullable), whole)
    # The hook's call: one problem, a config list.
    family = get_family("gemm")
    problem = family.TRAIN_SHAPES[0]
    configs = family.config_space(problem).configs()
    hook = static_features_for("gemm", problem, "float16", configs)
    frame = static_features([{"kernel": "gemm", "dtype": "float16", **problem, **c.as_dict()}
                             for c in configs])
    pd.testing.assert_frame_equal(hook, frame.reset_index(drop=True))
    triton_configs = static_features_for("gemm", problem, "float16",
                                         [c.to_triton() for c in configs])
    pd.testing.assert_frame_equal(triton_configs, hook)


def test_params_parsed_from_config_key_when_columns_are_missing():
    keyed = {"kernel": "softmax", "dtype": "float32", "rows": 100, "cols": 5000,
             "workload": "w", "config": "BLOCK_N=1024,ROWS_PER_PROG=1,num_warps=4,num_stages=2"}
    f = static_features([keyed])
    assert list(f.columns[:2]) == ["workload", "config"]
    pd.testing.assert_series_equal(f[STATIC_FEATURES].iloc[0], one(SOFTMAX), check_names=False)


def test_hook_budget_for_1000_configs():
    family = get_family("gemm")
    problem = {"M": 4096, "N": 4096, "K": 4096}
    configs = [c.to_triton() for c in family.config_space().configs()[:1000]]
    static_features_for("gemm", problem, "float16", configs)  # warm imports
    start = time.perf_counter()
    for _ in range(5):
        static_features_for("gemm", problem, "float16", configs)
    per_call = (time.perf_counter() - start) / 5
    # ~4 ms on a 2-core shared box; the bound leaves room for a loaded CI machine.
    assert per_call < 0.05, f"{per_call * 1e3:.1f} ms for 1000 configs"


def test_compute_features_writes_a_joinable_table(tmp_path):
    import pyarrow.parquet as pq

    from costtune.features import KEY_COLUMNS, compute_features
    from costtune.store.dataset import Store

    store = Store(tmp_path / "h200")
    for kernel, row in (("gemm", GEMM), ("softmax", SOFTMAX)):
        params = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "ROWS_PER_PROG", "num_warps",
                  "num_stages")
        key = ",".join(f"{k}={row[k]}" for k in params if k in row)
        store.append([{**row, "workload": f"{kernel}_w", "config": key, "status": "ok",
                       "time_ms": 0.1}], meta={"gpu": "test"})
    table = compute_features(tmp_path / "h200", compiled=False)
    path = tmp_path / "h200" / "features.parquet"
    meta = json.loads(pq.read_schema(path).metadata[b"costtune_features"])
    assert meta["static"] == STATIC_FEATURES and meta["compiled"] == []
    written = pd.read_parquet(path)
    assert len(written) == 2 and list(written.columns) == [*KEY_COLUMNS, *STATIC_FEATURES]
    dataset = store.load()
    joined = dataset.merge(table, on=KEY_COLUMNS, suffixes=("", "_f"))
    assert len(joined) == 2 and set(joined["num_programs"]) == {128.0, 100.0}


def test_launched_programs_from_the_implementations_grid_or_a_persistent_cap():
    """A persistent implementation's rows describe the programs its grid starts (min(SMs,
    tiles)); the hook's persistent cap gives the same features; without either, one program
    per tile (launched_per_tile 1)."""
    from costtune.kernels import attention_persistent as ap
    from costtune.types import Config

    problem = {"B": 2, "H": 16, "S": 2048, "D": 64, "causal": 1}
    configs = [Config({"BLOCK_M": m, "BLOCK_N": 64}, num_warps=w, num_stages=3)
               for m in (64, 128) for w in (4, 8)]
    rows = [{"kernel": "attention", "implementation": "attention_persistent", "dtype": "float16",
             "workload": "w", **problem, **c.as_dict(), "config": c.key} for c in configs]
    f = static_features(pd.DataFrame(rows))
    tiles = np.array([32 * (2048 // c["BLOCK_M"]) for c in configs], float)
    assert np.array_equal(f["num_programs"], tiles)
    launched = np.array([math.prod(ap.grid(problem, c)) for c in configs], float)
    assert (launched == 132).all()
    assert np.allclose(f["launched_per_tile"], launched / tiles)
    assert np.allclose(f["log2_launched"], np.log2(132))
    # One resident program per SM at most: 132 programs on 132 SMs.
    assert np.allclose(f["ctas_per_sm_launch"], 1.0)
    assert np.allclose(f["warps_per_sm_launch"], [c.num_warps for c in configs])
    hook = static_features_for("attention", problem, "float16", configs, programs_cap=132)
    pd.testing.assert_frame_equal(hook, f[STATIC_FEATURES].reset_index(drop=True))
    plain = static_features_for("attention", problem, "float16", configs)
    assert (plain["launched_per_tile"] == 1).all()
    assert np.allclose(plain["ctas_per_sm_launch"], plain["ctas_per_sm_est"])
    # The original kernel (one program per tile) and an explicit column agree with that.
    original = static_features(pd.DataFrame([{**r, "implementation": "attention"}
                                             for r in rows]))
    pd.testing.assert_frame_equal(original[STATIC_FEATURES].reset_index(drop=True), plain)
    told = static_features(pd.DataFrame([{**r, "implementation": "mine",
                                          "launched_programs": 132.0} for r in rows]))
    pd.testing.assert_frame_equal(told[STATIC_FEATURES].reset_index(drop=True), hook)
