"""TenSet top-k score, per-workload scores, regret and Kendall tau on hand-checked toy frames."""

import numpy as np
import pandas as pd
import pytest

from costtune.evaluate.metrics import (
    kendall_tau,
    rank_positions,
    rankings_from_scores,
    regret,
    summarize,
    tenset_score,
    topk_scores,
    topk_table,
)


@pytest.fixture
def toy():
    """Test fixture, not data: two workloads with known L* and L(k).

    w1: a=2.0, b=1.0 OK; c fails (wrong_result) but recorded a faster 0.5 ms: never the truth.
    w2: d=4.0, e=3.0, f=6.0, all OK.
    """
    return pd.DataFrame({
        "kernel": "gemm",
        "workload": ["w1", "w1", "w1", "w2", "w2", "w2"],
        "config": ["a", "b", "c", "d", "e", "f"],
        "status": ["ok", "ok", "wrong_result", "ok", "ok", "ok"],
        "time_ms": [2.0, 1.0, 0.5, 4.0, 3.0, 6.0],
    })


def test_topk_hand_checked(toy):
    rankings = {"w1": [2, 0, 1], "w2": [5, 4, 3]}  # c, a, b and f, e, d
    table = topk_table(toy, rankings, ks=(1, 2, 3))
    assert table["L_star"].tolist() == [1.0, 3.0]  # the failing 0.5 ms is not L*
    assert table["L1"].tolist() == [np.inf, 6.0]
    assert table["score1"].tolist() == [0.0, 0.5]
    assert table["L2"].tolist() == [2.0, 3.0]
    assert table["score2"].tolist() == [0.5, 1.0]
    scores = topk_scores(table, ks=(1, 2, 3), worst=(1, 2))
    # k=1: only w2 holds an OK config: (1/2) * 3/6; k=2: (1+3)/(2+3); k=3: both exact.
    assert scores["top1"] == pytest.approx(0.25)
    assert scores["top2"] == pytest.approx(0.8)
    assert scores["top3"] == pytest.approx(1.0)
    assert scores["worst1"] == 0.0 and scores["worst2"] == 0.5
    assert regret(table, 2).tolist() == [1.0, 0.0]


def test_failing_configs_never_win(toy):
    # A ranking proposing only the failing config finds nothing, however fast it was timed.
    table = topk_table(toy, {"w1": [2], "w2": [4]}, ks=(1, 4))
    assert table.loc[0, "L4"] == np.inf and table.loc[0, "score4"] == 0.0
    assert table.loc[1, "score4"] == 1.0


def test_no_failures_matches_tenset_exactly():
    l_star, l_k = np.array([1.0, 2.0, 5.0]), np.array([1.5, 2.0, 9.0])
    assert tenset_score(l_star, l_k) == pytest.approx(8.0 / 12.5)
    assert tenset_score(l_star, np.full(3, np.inf)) == 0.0


def test_wasted_slots_and_short_rankings(toy):
    # -1 is a proposed config the workload lacks: it uses a slot and never wins.
    table = topk_table(toy, {"w1": [-1, 1], "w2": [3]}, ks=(1, 2, 8))
    assert table["L1"].tolist() == [np.inf, 4.0]
    assert table["L2"].tolist() == [1.0, 4.0]
    assert table["L8"].tolist() == [1.0, 4.0]  # a short list stays short


def test_rankings_from_scores_break_ties_by_config_key():
    df = pd.DataFrame({"workload": "w", "config": ["z", "b", "a", "m"],
                       "status": "ok", "time_ms": 1.0})
    rankings = rankings_from_scores(df, np.array([1.0, 5.0, 5.0, np.nan]))
    assert rankings["w"].tolist() == [2, 1, 0, 3]  # a before b on a tie, NaN last
    assert rank_positions(np.zeros(3), ["c", "a", "b"]).tolist() == [1, 2, 0]


def test_bad_rankings_raise(toy):
    with pytest.raises(ValueError, match="another workload"):
        topk_table(toy, {"w1": [3], "w2": [4]})
    with pytest.raises(ValueError, match="repeats"):
        topk_table(toy, {"w1": [0, 0], "w2": [4]})
    with pytest.raises(ValueError, match="no ranking"):
        topk_table(toy, {"w1": [0]})
    with pytest.raises(ValueError, match="positive"):
        topk_table(toy, {"w1": [0], "w2": [4]}, ks=(0,))


def test_workload_without_ok_row_has_no_truth(toy):
    dead = pd.DataFrame({"kernel": "gemm", "workload": "w3", "config": ["x"],
                         "status": ["timeout"], "time_ms": [np.nan]})
    df = pd.concat([toy, dead], ignore_index=True)
    out = summarize(df, {"w1": [1], "w2": [4], "w3": [6]}, ks=(1, 8))
    assert out["n_workloads"] == 2 and out["n_no_truth"] == 1
    assert out["top1"] == 1.0


def test_kendall_tau_per_workload(toy):
    speeds = 1.0 / toy["time_ms"].to_numpy()
    tau = kendall_tau(toy, speeds)  # the failing row is left out
    assert tau["n_ok"].tolist() == [2, 3]
    assert tau["tau"].tolist() == pytest.approx([1.0, 1.0])
    assert kendall_tau(toy, -speeds)["tau"].tolist() == pytest.approx([-1.0, -1.0])
    assert np.isnan(kendall_tau(toy, np.zeros(6))["tau"]).all()
