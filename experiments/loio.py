"""Research question: how well does the cost model rank an implementation it never trained on?

Leave one implementation out (``costtune.evaluate.evaluate(protocol="loio")``): for every
implementation of a family with several (datasets/h200: GEMM 4, softmax 3, attention 2),
models trained on the train suite of every OTHER implementation rank the held-out one's
test-suite shapes (TenSet top-k score). Rows: one booster for all families (rank:pairwise,
300 trees, depth 6, the shipped settings) on each feature set -- static (before any compile),
static+ir (the kernel's TTIR/TTGIR op counts), static+compiled (registers, spills, shared
memory, PTX/SASS instruction mix), static+ir+compiled -- and the baseline, today's
single-implementation model: static features trained on the families' original kernels only
(for a held-out original kernel that baseline has seen it: marked in-distribution).

Each feature set is tried as one booster for all families (``/all``) and as one booster per
family (``/family``). What ships is chosen on training data only: the same protocol scored on
the held-out implementations' TRAIN-suite shapes, criterion the mean of top1, top4, top8 and
worst8, per family; the hook's two stages are what it can compute: stage 1 ranks on static
features before anything compiles (``static/all`` or ``static/family``), stage 2 re-ranks a
shortlist with compiled features (``static+compiled/...``); IR rows are research rows (the hook
has no IR path). With ``--ship`` the stage-2 winners are refitted on the train suite of every
implementation and saved under costtune/models (``experiments.model_selection.ship``); stage 1
stays experiments.model_selection's, trained on the original kernels: static features cannot
tell implementations apart, and mixing them cost the original softmax's in-distribution top1.
Writes experiments/results/loio.{md,csv} and loio_selection.csv.

    python -m experiments.loio [--dataset datasets/h200] [--sets static,static+ir,...] [--ship]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from costtune.evaluate import evaluate
from costtune.evaluate.metrics import rankings_from_scores, summarize
from costtune.features import load_feature_tables, load_ir_tables
from costtune.model import CostModel, attach_features
from experiments import harness

KS = (1, 4, 8)
GOALS = (("top1", 0.95), ("top8", 0.99), ("worst8", 0.97))
CRITERION = ["top1", "top4", "top8", "worst8"]
SETS = ("static", "static+ir", "static+compiled", "static+ir+compiled")
BASE = {"objective": "rank:pairwise", "family": "all", "n_estimators": 300, "max_depth": 6,
        "learning_rate": 0.1}
BASELINE = "single-implementation (static, original kernels only)"


def with_tables(data: pd.DataFrame, dataset: Path) -> pd.DataFrame:
    """The dataset with its compiled and IR feature columns attached (left join)."""
    kernels = sorted(data["kernel"].unique())
    compiled, missing = load_feature_tables(dataset, kernels)
    ir, missing_ir = load_ir_tables(dataset, kernels)
    if missing or missing_ir:
        raise SystemExit(f"loio: feature tables missing for {missing + missing_ir} under "
                         f"{dataset} (costtune features [--ir])")
    data = attach_features(data, features="static+ir+compiled", compiled=compiled, ir=ir)
    return data


# model_selection's candidate names for the shippable rows: (stage, candidate).
SHIPPABLE = {"static/all": (1, "all-300"), "static/family": (1, "family-300"),
             "static+compiled/all": (2, "all-300-compiled"),
             "static+compiled/family": (2, "family-300-compiled")}


def run(data: pd.DataFrame, sets: list[str], *, suite: str, threads: int) -> pd.DataFrame:
    models = {f"{s}/{scope}": CostModel(**{**BASE, "family": fam}, features=s, n_jobs=threads)
              for s in sets for scope, fam in (("all", "all"), ("family", None))}
    result = evaluate(data, protocol="loio", models=models, ks=KS, baselines=False,
                      score_suite=suite)
    rows = [{"implementation": impl, "name": name, **metrics}
            for impl, board in result["scores"].items() for name, metrics in board.items()]
    return pd.DataFrame(rows)


def baseline(data: pd.DataFrame, *, threads: int) -> pd.DataFrame:
    """Today's model: static features, trained on the original kernels' train suite."""
    original = data["implementation"] == data["kernel"]
    train = data[original & (data["suite"] == "train")]
    model = CostModel(**BASE, features="static", n_jobs=threads).fit(train)
    rows = []
    for impl in sorted(data["implementation"].unique()):
        test = data[(data["implementation"] == impl) & (data["suite"] == "test")]
        test = test.reset_index(drop=True)
        scores = model.predict(test)
        metrics = summarize(test, rankings_from_scores(test, scores), ks=KS, worst=(8,),
                            scores=scores)
        seen = bool((test["implementation"] == test["kernel"]).all())
        rows.append({"implementation": impl, "name": BASELINE + (" [in-distribution]"
                                                                  if seen else ""), **metrics})
    return pd.DataFrame(rows)


def family_of(impl: str) -> str:
    from costtune.kernels import family_of as fam

    return fam(impl)


def choose(select: pd.DataFrame) -> pd.DataFrame:
    """Per hook stage and family, the shippable row with the best train-suite criterion (ties
    within 0.002 go to one booster for all families), in model_selection's choice format."""
    rows = []
    ship = select[select["name"].isin(SHIPPABLE)].copy()
    ship["family"] = ship["implementation"].map(family_of)
    ship["stage"] = ship["name"].map(lambda n: SHIPPABLE[n][0])
    crit = ship.groupby(["stage", "family", "name"])["criterion"].mean().reset_index()
    for (stage, family), g in crit.groupby(["stage", "family"]):
        best = g["criterion"].max()
        shared = next(n for n in g["name"] if n.endswith("/all"))
        pick = shared if g.loc[g["name"] == shared, "criterion"].iloc[0] >= best - 0.002 \
            else g.loc[g["criterion"].idxmax(), "name"]
        rows.append({"stage": stage, "kernel": family, "cross_family": SHIPPABLE[shared][1],
                     "chosen": SHIPPABLE[pick][1], "row": pick,
                     "score": float(g.loc[g["name"] == pick, "criterion"].iloc[0])})
    return pd.DataFrame(rows)


def goal_lines(table: pd.DataFrame, chosen: dict[str, str]) -> list[str]:
    out = []
    mine = table[table.apply(lambda r: r["name"] == chosen.get(family_of(r["implementation"])),
                             axis=1)]
    for family, g in mine.groupby(mine["implementation"].map(family_of)):
        parts = []
        for metric, bar in GOALS:
            worst = g.loc[g[metric].idxmin()]
            ok = worst[metric] >= bar
            parts.append(f"{metric} min {worst[metric]:.3f} ({worst['implementation']}) "
                         f"{'≥' if ok else '<'} {bar} ({'met' if ok else '**not met**'})")
        impls = ", ".join(sorted(g["implementation"]))
        out.append(f"- **{family}**, `{chosen[family]}` ({impls}): " + "; ".join(parts))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ship", action="store_true", help="refit the winners, save them")
    args = ap.parse_args()
    sets = [s for s in args.sets.split(",") if s]
    data = with_tables(harness.load_dataset(args.dataset), args.dataset)
    select = run(data, sets, suite="train", threads=args.threads)
    select["criterion"] = select[CRITERION].mean(axis=1)
    by_set = select.groupby("name")["criterion"].mean().sort_values(ascending=False)
    choice = choose(select)
    final = choice[choice["stage"] == choice["stage"].max()]
    chosen = dict(zip(final["kernel"], final["row"], strict=True))
    test = pd.concat([run(data, sets, suite="test", threads=args.threads),
                      baseline(data, threads=args.threads)], ignore_index=True)
    test["family"] = test["implementation"].map(family_of)
    cols = ["family", "implementation", "name", "top1", "top4", "top8", "worst8",
            "kendall_tau", "n_workloads"]
    table = test[cols].sort_values(["family", "implementation", "name"])
    n = data.groupby("implementation")["workload"].nunique()
    md = ["# Leave one implementation out: ranking kernels the model never trained on", "",
          harness.provenance(dataset=args.dataset, n_rows=len(data)), "",
          "Protocol: for each held-out implementation, boosters trained on the train suite of "
          "every other implementation (all families) rank the held-out one's test-suite "
          "workloads; TenSet top-k score Σ L* / Σ L(k), worst8 the lowest per-workload "
          "L*/L(8). Workloads per implementation (both suites): "
          + ", ".join(f"{k} {v}" for k, v in n.items()) + ".", "",
          "## Selection on training data only (held-out implementation's train-suite shapes)",
          "", harness.md_table(by_set.rename("mean of top1/top4/top8/worst8").reset_index(),
                               floatfmt=".4f"), "",
          "Chosen per hook stage and family (criterion per family; ties within 0.002 go to "
          "one booster for all families):", "",
          harness.md_table(choice.drop(columns=["cross_family"]), floatfmt=".4f"), "",
          "## Held-out test suites", "", harness.md_table(table, floatfmt=".3f"), "",
          "## Goals (issue 18) for what ships last (stage 2, per family): every held-out "
          "implementation of each family", "", *goal_lines(test, chosen), ""]
    if args.ship:
        from costtune.features import load_feature_tables
        from experiments.model_selection import ship

        train = data[data["suite"] == "train"].reset_index(drop=True)
        compiled, _ = load_feature_tables(args.dataset, sorted(train["kernel"].unique()))
        md += ["## Shipped: stage 2, refitted on the train suite of every implementation",
               "", "(Stage 1 ships from experiments/model_selection.py, trained on the "
               "original kernels: model_selection.md.)", "",
               *ship(choice[choice["stage"] == 2], train, compiled, args.threads), ""]
    harness.write_report("loio", md, table, csv_kw={"float_format": "%.5g"})
    select.to_csv(harness.RESULTS / "loio_selection.csv", index=False, float_format="%.5g")
    print("\n".join(md))


if __name__ == "__main__":
    main()
