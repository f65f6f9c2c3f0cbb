"""Baselines return valid rankings: tutorial lists, greedy static list, random, roofline."""

import itertools

import numpy as np
import pandas as pd
import pytest

from costtune.model.baselines import (
    TUTORIAL_ALL,
    TUTORIAL_FP16,
    BestStaticList,
    RandomConfigs,
    Roofline,
    TritonTutorialList,
    expected_random_scores,
    greedy_cover,
)
from costtune.types import Config, Workload


def gemm_rows(problem, *, warps=(4, 8), stages=(2, 3, 4, 5), seed=0):
    """Test fixture, not data: one GEMM workload over a small grid, times from the roofline
    times a fixed random factor."""
    rows = []
    w = Workload("gemm", problem, "float16")
    for bm, bn, bk, nw, ns in itertools.product((32, 64, 128, 256), (32, 64, 128, 256),
                                                (32, 64, 128), warps, stages):
        if ns * (bm * bk + bk * bn) * 2 > 227 * 1024:
            continue
        c = Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": 1},
                   num_warps=nw, num_stages=ns)
        rows.append({"kernel": "gemm", "workload": w.id, "dtype": "float16", **problem,
                     **c.as_dict(), "config": c.key, "status": "ok"})
    df = pd.DataFrame(rows)
    rng = np.random.default_rng(seed)
    df["time_ms"] = Roofline().predict_time(df) * 1e3 * rng.uniform(0.8, 1.2, len(df))
    return df


def softmax_rows():
    w = Workload("softmax", {"rows": 4096, "cols": 3000}, "float16")
    rows = []
    for bn, rpp, nw in itertools.product((256, 1024, 4096), (1, 2), (4, 8)):
        c = Config({"BLOCK_N": bn, "ROWS_PER_PROG": rpp}, num_warps=nw, num_stages=1)
        rows.append({"kernel": "softmax", "workload": w.id, "dtype": "float16", "rows": 4096,
                     "cols": 3000, **c.as_dict(), "config": c.key, "status": "ok",
                     "time_ms": 1.0})
    return pd.DataFrame(rows)


def assert_valid_ranking(ranking, n_rows):
    real = ranking[ranking >= 0]
    assert ((ranking >= -1) & (ranking < n_rows)).all()
    assert len(np.unique(real)) == len(real)


def test_tutorial_lists_are_the_tutorials():
    assert len(TUTORIAL_FP16) == 8 and len(TUTORIAL_ALL) == 16
    assert TUTORIAL_ALL[:8] == TUTORIAL_FP16
    assert TUTORIAL_FP16[0] == (128, 256, 64, 8, 8, 3)
    assert all(entry[3] == 8 for entry in TUTORIAL_ALL)  # GROUP_SIZE_M == our fixed GROUP_M


def test_tutorial_mapping_exact_nearest_infeasible():
    rows = gemm_rows({"M": 2048, "N": 2048, "K": 2048})
    mapping = TritonTutorialList(which="all").mapping(rows)
    assert len(mapping) == 16
    assert mapping.loc[0, "how"] == "exact"  # 128x256x64, 8 warps, 3 stages is on our grid
    # num_warps=2 is off our grid: the nearest measured config stands in.
    assert mapping.loc[6, "how"] == "nearest" and mapping.loc[6, "position"] >= 0
    # 128x256x128 with 3 stages needs 288 KiB of shared memory: fails on the H200.
    assert mapping.loc[8, "how"] == "infeasible" and mapping.loc[8, "position"] == -1
    ranking = TritonTutorialList(which="all").rank(rows)
    assert_valid_ranking(ranking, len(rows))
    chosen = rows.iloc[ranking[ranking >= 0]]
    assert (chosen["num_warps"] >= 4).all()


def test_tutorial_drop_policy_and_gemm_only():
    rows = gemm_rows({"M": 512, "N": 512, "K": 512}, warps=(4,), stages=(4,))
    ranking = TritonTutorialList(which="fp16", missing="drop").rank(rows)
    assert len(ranking) == 8
    assert (ranking[[0, 6, 7]] == -1).all()  # 8 warps / 2 warps entries are not measured
    assert rows.iloc[ranking[2]]["config"] == (
        "BLOCK_M=128,BLOCK_N=128,BLOCK_K=32,SPLIT_K=1,num_warps=4,num_stages=4")
    with pytest.raises(ValueError, match="gemm rows only"):
        TritonTutorialList().rank(softmax_rows())
    with pytest.raises(ValueError, match="which"):
        TritonTutorialList(which="fp8")


def test_greedy_cover_hand_checked():
    # speeds per workload (L*/t): A: x 1, y .5, z .9 | B: x .2, y 1, z .9 | C: x .1, y .3, z 1
    df = pd.DataFrame({
        "kernel": "gemm", "workload": list("AAABBBCCC"), "config": list("xyzxyzxyz"),
        "status": "ok", "time_ms": [1, 2, 1 / .9, 5, 1, 1 / .9, 10, 1 / .3, 1]})
    assert greedy_cover(df, k=1) == ["z"]  # 2.8 beats x (1.3) and y (1.8)
    assert greedy_cover(df, k=3) == ["z", "x", "y"]  # x adds .1, y adds .1: tie -> key order


def test_greedy_cover_failures_count_zero():
    df = pd.DataFrame({"kernel": "gemm", "workload": ["A", "A"], "config": ["fast", "ok"],
                       "status": ["wrong_result", "ok"], "time_ms": [0.1, 1.0]})
    assert greedy_cover(df, k=1) == ["ok"]


def test_best_static_list_keeps_positions_on_test_workloads():
    train = pd.concat([gemm_rows({"M": 1024, "N": 1024, "K": 1024}, seed=1),
                       gemm_rows({"M": 4096, "N": 1024, "K": 512}, seed=2)], ignore_index=True)
    model = BestStaticList(k=4).fit(train)
    assert len(model.lists_["gemm"]) == 4
    test = gemm_rows({"M": 777, "N": 999, "K": 555}, seed=3)
    missing = test[test["config"] != model.lists_["gemm"][1]].reset_index(drop=True)
    ranking = model.rank(missing)
    assert len(ranking) == 4 and ranking[1] == -1  # absent config: a wasted slot, not skipped
    assert_valid_ranking(ranking, len(missing))
    skipping = BestStaticList(k=4, absent="skip").fit(train).rank(missing)
    assert skipping.tolist() == ranking[ranking >= 0].tolist()
    with pytest.raises(ValueError, match="not fitted on kernel"):
        model.rank(softmax_rows())


def test_random_ranking_is_a_reproducible_permutation():
    rows = gemm_rows({"M": 256, "N": 256, "K": 256}, warps=(4,), stages=(3,))
    a, b = RandomConfigs(seed=3).rank(rows), RandomConfigs(seed=3).rank(rows)
    assert sorted(a.tolist()) == list(range(len(rows))) and (a == b).all()
    assert not (RandomConfigs(seed=4).rank(rows) == a).all()


def test_expected_random_scores_exact_and_sampled():
    df = pd.DataFrame({"kernel": "gemm", "workload": "w", "config": list("abcd"),
                       "status": ["ok", "ok", "ok", "compile_error"],
                       "time_ms": [1.0, 2.0, 4.0, np.nan]})
    out = expected_random_scores(df, ks=(1, 2, 4), worst=(1, 2), draws=20000, seed=0)
    # k=1: (1 + 1/2 + 1/4 + 0) / 4. k=2: min rank i with prob C(4-i,1)/C(4,2) = 3,2,1,0 / 6.
    exact1, exact2 = 1.75 / 4, (3 * 1 + 2 * 0.5 + 1 * 0.25) / 6
    assert out["worst1"] == pytest.approx(exact1)
    assert out["worst2"] == pytest.approx(exact2)
    assert out["top1"] == pytest.approx(exact1, abs=0.02)  # one workload: mean of draws
    assert out["top4"] == 1.0


def test_roofline_sane_and_valid():
    rows = gemm_rows({"M": 4096, "N": 4096, "K": 4096})
    t = Roofline().predict_time(rows)
    assert np.isfinite(t).all() and (t > 0).all()
    best = rows.iloc[Roofline().rank(rows)[0]]
    assert best["BLOCK_M"] * best["BLOCK_N"] >= 128 * 128  # big square GEMM: big tiles
    small = rows[(rows["BLOCK_M"] == 32) & (rows["BLOCK_N"] == 32)].index
    assert t[small].min() > t.min() * 2
    sm = softmax_rows()
    assert_valid_ranking(Roofline().rank(sm), len(sm))
    one_pass = (sm["BLOCK_N"] >= 3000).to_numpy()
    ts = Roofline().predict_time(sm)
    assert ts[one_pass].min() <= ts[~one_pass].min()  # the re-read row comes from L2 here
    assert ts[~one_pass].max() > ts[one_pass].max()


def test_roofline_attention_causal_is_cheaper():
    base = {"kernel": "attention", "dtype": "float16", "B": 1, "H": 32, "S": 4096, "D": 128,
            "BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "config": "c"}
    rows = pd.DataFrame([{**base, "causal": 0}, {**base, "causal": 1}])
    t = Roofline().predict_time(rows)
    assert t[1] < t[0] * 0.6
