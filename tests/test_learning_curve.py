"""The learning-curve experiment's ceiling rows (experiments/learning_curve.py --ceiling):
models refitted on all of a held-out kernel's train shapes, reported apart from the curve."""

from __future__ import annotations

import pandas as pd
import pytest

import costtune
from experiments import harness
from experiments import learning_curve as lc


@pytest.fixture(scope="module")
def case():
    """Held-out softmax_onepass, cut small: 6 other-implementation train workloads, 3 of its
    own train workloads (the harvest pool), 2 of its test workloads."""
    df = lc.with_implementation(costtune.load_dataset(harness.DATASET, kernel="softmax"))
    found, protocol = lc.cases(df)
    assert protocol == "held-out implementation"
    c = next(c for c in found if c["held_out"] == "softmax_onepass")

    def first(rows: pd.DataFrame, n: int) -> pd.DataFrame:
        return rows[rows["workload"].isin(sorted(rows["workload"].unique())[:n])]

    return {**c, "train": first(c["train"], 6), "pool": first(c["pool"], 3),
            "test": first(c["test"], 2)}


def test_ceiling_refits_on_the_whole_pool_and_is_reported_apart(case):
    records = lc.ceiling(case, trees=5)
    assert [r["method"] for r in records] == ["refit: own rows", "refit: every implementation"]
    for r in records:
        assert r["n_shapes"] == 3 and r["n_harvest_rows"] == len(case["pool"])
        assert r["held_out"] == "softmax_onepass" and r["update"] == "refit"
        assert 0 < r["top1"] <= r["top4"] <= r["top8"] <= 1.0
    curve = {"family": "softmax", "held_out": "softmax_onepass", "harvest": "exhaustive",
             "method": "continue", "update": "auto", "seed": 0, "n_shapes": 2, "top1": 0.5,
             "top4": 0.9, "top8": 1.0, "worst8": 0.8}
    lines = lc.report(pd.DataFrame([curve, *records]), "held-out implementation",
                      n_rows=1, seeds=1, seconds=1.0,
                      bases={"softmax": {"features": "static+src", "original_weight": 2.0}})
    text = "\n".join(lines)
    assert "(softmax: static+src, original weight 2)" in text  # the bases as they were fitted
    goal = [line for line in lines if line.startswith("- softmax / softmax_onepass")]
    assert len(goal) == 1 and "top1 0.500" in goal[0]  # the refit rows are no curve point
    mean = text.split("## Mean over seeds")[1].split("## Ceiling")[0]
    assert "refit" not in mean
    bound = text.split("## Ceiling")[1]
    assert "refit: own rows" in bound and "refit: every implementation" in bound


def test_no_ceiling_without_a_pool(case):
    assert lc.ceiling({**case, "pool": case["pool"].iloc[:0]}, trees=5) == []


def test_stage2_curve_learns_both_models_from_one_harvest(case):
    """experiments.learning_curve_stage2: at every N the static model, the compiled-feature
    model (trained on every other implementation, here the cut case's) and the hook's two
    stages over them are scored on the same test rows; the report reads N = 2."""
    from experiments import learning_curve_stage2 as lc2
    from experiments.loio import with_tables

    raw = costtune.load_dataset(harness.DATASET, kernel="softmax")
    df = lc.with_implementation(with_tables(raw, harness.DATASET))  # as its main() does
    cut = {k: (df[df["workload"].isin(case[k]["workload"])]
               if k in ("train", "pool", "test") else v) for k, v in case.items()}
    assert cut["pool"]["n_regs"].notna().all()  # the held-out kernel's own compiled features
    records = lc2.curve(cut, cut["train"], seeds=1, shapes=[0, 2],
                        stage2=("continue", "refit:10"))
    stage2 = ["stage 2", *(f"two-stage w={w:g}" for w in lc2.WEIGHTS)]
    methods = [("stage 1", "-"), *((m, u) for u in ("continue", "refit:10") for m in stage2)]
    assert [(r["n_shapes"], r["suite"], r["method"], r["stage2_update"]) for r in records] == [
        (n, suite, m, u) for n in (0, 2) for suite in ("test", "pool") for m, u in methods]
    # Before any harvest both updates are the base itself.
    at0 = {(r["method"], r["stage2_update"]): r["top1"] for r in records
           if r["n_shapes"] == 0 and r["suite"] == "test"}
    assert at0[("stage 2", "continue")] == at0[("stage 2", "refit:10")]
    for r in records:
        assert 0 < r["top1"] <= r["top4"] <= r["top8"] <= 1.0
    # At N=2 the pool scored is what was not harvested: 1 of its 3 shapes.
    assert {r["n_shapes"]: r for r in records if r["suite"] == "pool"}[2]["n_workloads"] == 1
    table = pd.DataFrame(records)
    update, w = lc2.choose(table)
    assert w in lc2.WEIGHTS and update in ("continue", "refit:10")
    lines = lc2.report(table, n_rows=1, seeds=1, seconds=1.0)
    goal = [line for line in lines if line.startswith("- softmax_onepass: stage 1 ")]
    assert len(goal) == 1 and f"two-stage w={w:g} [{update}]" in goal[0]


def test_the_learned_stage2_weight_is_the_reports_choice():
    """costtune.tune.stage2.LEARNED_WEIGHT and how learn=True updates the shipped stage-2
    model are what experiments/learning_curve_stage2.py chose from the committed results
    (rerun it and update them together): a refit at REFIT_WEIGHT where it ships its training
    table, continued training where it does not."""
    from costtune.model.learned import REFIT_WEIGHT
    from costtune.model.training import TrainingTable
    from costtune.tune.stage2 import LEARNED_WEIGHT
    from experiments import learning_curve_stage2 as lc2

    table = pd.read_csv(harness.RESULTS / "learning_curve_stage2.csv")
    update, weight = lc2.choose(table)
    assert weight == LEARNED_WEIGHT
    shipped = TrainingTable.load("h200_compiled") is not None
    assert update == (f"refit:{REFIT_WEIGHT:g}" if shipped else "continue")


def test_the_refit_weight_is_chosen_on_the_selection_scores_only():
    """weight_choice reads sel_* (unharvested train-suite shapes), never the test scores, and
    averages families first: a family with more held-out kernels does not outvote another."""
    from experiments.learning_curve_report import weight_choice

    def rec(family, held, method, sel, test):
        return {"family": family, "held_out": held, "harvest": "exhaustive", "method": method,
                "update": "-", "seed": 0, "n_shapes": 2, "top1": test,
                **{f"sel_{m}": sel for m in ("top1", "top4", "top8", "worst8")}}

    table = pd.DataFrame([rec("gemm", "a", "refit:1", 0.90, 1.0),
                          rec("gemm", "a", "refit:5", 0.95, 0.1),
                          rec("gemm", "b", "refit:1", 0.90, 1.0),
                          rec("gemm", "b", "refit:5", 0.95, 0.1),
                          rec("softmax", "c", "refit:1", 0.99, 1.0),
                          rec("softmax", "c", "refit:5", 0.80, 0.1),
                          rec("gemm", "a", "continue", 1.0, 1.0)])
    text = "\n".join(weight_choice(table))
    assert "Best: **refit:1**" in text  # (0.90 + 0.99) / 2 > (0.95 + 0.80) / 2
    assert "continue" not in text.split("|", 1)[1]
    assert weight_choice(table[table["method"] != "refit:5"]) == []  # one weight: no choice


def test_families_must_have_a_held_out_implementation(capsys):
    with pytest.raises(SystemExit):
        lc.main(["--families", "gemm", "conv"])
    assert "--families: no held-out implementation of ['conv']" in capsys.readouterr().err


def test_auto_refit_weighs_each_harvest_by_how_the_base_ranks_it(monkeypatch):
    """refit:auto:<w>: w where the base's top-1 on the harvest is >= TRUSTED, else
    REFIT_WEIGHT; the curve replays it on both harvests (what top_k=8 tuning records too)."""
    from costtune.model import learned

    assert lc.method_of("refit:auto:1") == ("refit", {"trusted": 1.0})
    for top1, weight in ((learned.TRUSTED, 1.0),
                         (learned.TRUSTED - 0.01, learned.REFIT_WEIGHT)):
        monkeypatch.setattr(learned, "base_top1", lambda base, rows, v=top1: v)
        assert lc.auto_weight(None, None, 1.0) == weight
    with pytest.raises(SystemExit):
        lc.main(["--methods", "refit:auto:0"])


def test_curve_replays_auto_refits_on_the_top8_harvest(case, monkeypatch):
    weighed = []
    auto = lc.auto_weight
    monkeypatch.setattr(lc, "auto_weight", lambda *a: weighed.append(a[2]) or auto(*a))
    records = lc.curve(case, seeds=1, shapes=[0, 1], methods=["refit:auto:1"], trees=5,
                       updates=[("-", None, None)])
    runs = {(r["harvest"], r["method"], r["n_shapes"]) for r in records}
    assert runs == {(h, "refit:auto:1", n) for h in ("exhaustive", "top8") for n in (0, 1)}
    # the weight chosen at every update: exhaustive's before N = 1, top8's after each shape
    assert weighed == [1.0, 1.0, 1.0]


def test_the_adaptive_harvest_records_what_the_adaptive_budget_benchmarks(case, monkeypatch):
    """--harvests adaptive: each harvested shape records the adaptive loop's benchmarks under
    the model of the moment (at least min_configs, at most the cap), learned shape after
    shape like the top8 harvest."""
    from experiments.learning_curve_report import CAP
    from experiments.learning_harvest import adaptive_rows

    recorded, models = [], []

    def spy(model, rows, budget, margin):
        models.append(model)
        recorded.append(adaptive_rows(model, rows, budget, margin))
        assert budget.max_configs == CAP
        return recorded[-1]

    monkeypatch.setattr(lc, "adaptive_rows", spy)
    records = lc.curve(case, seeds=1, shapes=[0, 1, 2], methods=[lc.SHIPPED], trees=5,
                       updates=[("-", None, None)], harvests=["adaptive"])
    rows = {r["n_shapes"]: r["n_harvest_rows"] for r in records}
    assert {r["harvest"] for r in records} == {"adaptive"} and rows[0] == 0
    assert rows[1] == len(recorded[0]) and rows[2] == len(recorded[0]) + len(recorded[1])
    assert models[1] is not models[0]  # the second shape ranked by the model learned first
    model = lc.default_model(family="softmax", n_estimators=5).fit(case["train"])
    pool = case["pool"][case["pool"]["workload"] == case["pool"]["workload"].iloc[0]]
    taken = adaptive_rows(model, pool, lc.Adaptive(max_configs=3), margin=0.0)
    assert 2 <= len(taken) <= 3 and set(taken["config"]) <= set(pool["config"])
