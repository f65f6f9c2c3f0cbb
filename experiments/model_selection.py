"""Which cost model ships: one booster for every family or one per family, and how many trees.

Chosen by shape-grouped 5-fold cross-validation on the **train suite only** (the test suite
that `costtune eval` scores is never looked at), for each stage of the pruning hook:

- stage 1, static features (ranks before anything compiles): family="all" vs per family, at
  300 and 150 trees (fewer trees cost the hook less);
- stage 2, static + compiled features (re-ranks a shortlist): family="all" vs per family,
  300 trees.

Per family, the candidate with the highest selection score -- the mean of out-of-fold top1,
top2, top4, top8 and worst8 -- wins; a candidate within ``TIE`` of the best counts as tied and
the tie goes to the cheaper one (fewer trees, then one booster for all families). With
``--ship`` the winners are refitted on the whole train suite and saved where the hook and
`costtune eval` look: ``costtune/models/h200`` (cross-family, stage 1),
``h200_<family>`` (a family whose winner is per family), and likewise ``h200_compiled``
for stage 2. Files of candidates that lost are removed, so the shipped set is exactly the
table's choice. Writes experiments/results/model_selection.{md,csv}.

    python -m experiments.model_selection [--ship]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from costtune.evaluate import evaluate
from costtune.model import CostModel
from costtune.model.training import save_with_table
from costtune.tune.trained import ALL_IMPLEMENTATIONS
from experiments import harness

ROOT = harness.ROOT
MODELS_DIR = ROOT / "costtune" / "models"
NAME = "h200"
KS = (1, 2, 4, 8)
CRITERION = ["top1", "top2", "top4", "top8", "worst8"]
TIE = 0.002  # below the dataset's re-timing noise (median 0.4%)
BASE = {"objective": "rank:pairwise", "max_depth": 6, "learning_rate": 0.1, "n_jobs": 1}
# name -> (stage, params); stage 1 = static features, stage 2 = static+compiled.
CANDIDATES = {
    "all-300": (1, {"family": "all", "features": "static", "n_estimators": 300}),
    "family-300": (1, {"family": None, "features": "static", "n_estimators": 300}),
    "all-150": (1, {"family": "all", "features": "static", "n_estimators": 150}),
    "family-150": (1, {"family": None, "features": "static", "n_estimators": 150}),
    "all-300-compiled": (2, {"family": "all", "features": "static+compiled",
                             "n_estimators": 300}),
    "family-300-compiled": (2, {"family": None, "features": "static+compiled",
                                "n_estimators": 300}),
    # The IR counts come from the same compile (the hook's tables carry them): loio's rows.
    "all-300-ir-compiled": (2, {"family": "all", "features": "static+ir+compiled",
                                "n_estimators": 300}),
    "family-300-ir-compiled": (2, {"family": None, "features": "static+ir+compiled",
                                   "n_estimators": 300}),
}


def cross_validate(train: pd.DataFrame, compiled: pd.DataFrame | None, threads: int
                   ) -> pd.DataFrame:
    records = []
    for name, (stage, params) in CANDIDATES.items():
        if stage == 2 and compiled is None:
            continue
        model = CostModel(**{**BASE, **params, "n_jobs": threads})
        start = time.perf_counter()
        result = evaluate(train, protocol="kfold", models={name: model}, baselines=False,
                          compiled=compiled if stage == 2 else None, ks=KS, n_splits=5)
        seconds = time.perf_counter() - start
        for kernel, scores in result["scores"].items():
            m = scores[name]
            records.append({"stage": stage, "candidate": name, "kernel": kernel,
                            "n_estimators": params["n_estimators"],
                            "per_family": params["family"] is None,
                            **{c: m[c] for c in CRITERION}, "kendall_tau": m["kendall_tau"],
                            "cv_seconds": seconds})
        print(f"{name}: {seconds:.0f} s", flush=True)
    table = pd.DataFrame(records)
    table["score"] = table[CRITERION].mean(axis=1)
    return table


def _cheapest_best(scores: pd.DataFrame) -> pd.Series:
    """The cheapest row within TIE of the best score (fewer trees, then cross-family)."""
    near = scores[scores["score"] >= scores["score"].max() - TIE]
    return near.sort_values(["n_estimators", "per_family", "candidate"]).iloc[0]


def choose(table: pd.DataFrame) -> pd.DataFrame:
    """Per stage, first the cross-family booster (best mean score over families: it serves
    every family that keeps it and kernels of no known family), then per family that booster
    or a per-family one."""
    rows = []
    for stage, g in table.groupby("stage"):
        cross = g[~g["per_family"]].groupby("candidate", as_index=False).agg(
            score=("score", "mean"), n_estimators=("n_estimators", "first"),
            per_family=("per_family", "first"))
        shared = _cheapest_best(cross)["candidate"]
        for kernel, k in g.groupby("kernel"):
            options = k[k["per_family"] | (k["candidate"] == shared)]
            pick = _cheapest_best(options)
            rows.append({"stage": stage, "kernel": kernel, "cross_family": shared,
                         "chosen": pick["candidate"], "score": pick["score"],
                         "best": k.loc[k["score"].idxmax(), "candidate"],
                         "best_score": k["score"].max()})
    return pd.DataFrame(rows)


# Stage-1 models another experiment ships: experiments/impl_descriptor.py's per-family
# models trained on every implementation (they win there, not here).
SHIPPED_ELSEWHERE = tuple(f"{NAME}_{f}" for f in ALL_IMPLEMENTATIONS)


def ship(choice: pd.DataFrame, train: pd.DataFrame, compiled: pd.DataFrame | None,
         threads: int) -> list[str]:
    """Refit each stage's winners on the whole train suite; save under costtune/models."""
    lines = []
    for stage, g in choice.groupby("stage"):
        base = NAME if stage == 1 else f"{NAME}_compiled"
        for old in list(MODELS_DIR.glob(f"{base}.*")) + list(MODELS_DIR.glob(f"{base}_*.*")):
            if stage == 1 and old.name.startswith(f"{NAME}_compiled"):
                continue
            if old.name.split(".")[0] in SHIPPED_ELSEWHERE:
                continue
            old.unlink()
        extra = {"compiled": compiled} if stage == 2 else {}
        fits = [(base, g["cross_family"].iloc[0], None)]
        # A family whose choice is not the cross-family model gets its own file: a per-family
        # booster, or one for all families on other features (trained on every family).
        fits += [(f"{base}_{r.kernel}", r.chosen,
                  r.kernel if CANDIDATES[r.chosen][1]["family"] is None else None)
                 for r in g.itertuples()
                 if r.chosen != r.cross_family and f"{base}_{r.kernel}" not in SHIPPED_ELSEWHERE]
        for file, cand, kernel in fits:
            params = {**BASE, **CANDIDATES[cand][1]}
            rows = train if kernel is None else train[train["kernel"] == kernel]
            if kernel is not None:
                params["family"] = kernel
            start = time.perf_counter()
            model = CostModel(**{**params, "n_jobs": threads}).fit(rows, **extra)
            model.set_params(n_jobs=1)  # the hook scores with one thread
            path = (save_with_table(model, MODELS_DIR / file, rows) if stage == 1
                    else model.save(MODELS_DIR / file))
            lines.append(f"- `{path.relative_to(ROOT)}`: {cand} "
                         f"({kernel or 'all families'}), {rows['workload'].nunique()} "
                         f"workloads, fitted in {time.perf_counter() - start:.0f} s")
    return lines


def shipped_lines() -> list[str]:
    lines = []
    for path in sorted(MODELS_DIR.glob(f"{NAME}*.json")):
        model = CostModel.load(path)
        lines.append(f"- `{path.relative_to(ROOT)}`: {model.features} features, "
                     f"{model.n_estimators} trees, "
                     f"{'all families' if model.family == 'all' else model.family}, "
                     f"{model.n_train_workloads_} train-suite workloads, data hash "
                     f"{model.train_hash_}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--threads", type=int, default=2, help="XGBoost threads while fitting")
    ap.add_argument("--ship", action="store_true", help="refit the winners, save them")
    args = ap.parse_args()
    data = harness.load_dataset(args.dataset)
    # Stage 1 learns from the families' original kernels only: static features cannot tell
    # two implementations of a family apart, and trained on all of them the static booster
    # ranked the original softmax worse (experiments/RESULTS.md, issue 18). Stage 2 (compiled
    # features, which do tell them apart) is chosen and shipped by experiments/loio.py.
    data = data[data["implementation"] == data["kernel"]].reset_index(drop=True)
    train = data[data["suite"] == "train"].reset_index(drop=True)
    compiled = None  # stage 2 is experiments/loio.py's (all implementations)
    table = cross_validate(train, compiled, args.threads)
    choice = choose(table)
    md = ["# Model selection: which cost model ships", "",
          harness.provenance(dataset=args.dataset, n_rows=len(data)),
          f"- Measured: shape-grouped 5-fold CV on the **train suite only** "
          f"({train['workload'].nunique()} workloads, {len(train):,} rows); the test suite is "
          "not read. Selection score = mean of out-of-fold top1, top2, top4, top8, worst8; "
          f"candidates within {TIE} of the best tie and the cheaper one wins (fewer trees, "
          "then one booster for all families). rank:pairwise, depth 6, learning rate 0.1.",
          "", "## Cross-validation", ""]
    for stage, g in table.groupby("stage"):
        md += [f"### Stage {stage} ({'static' if stage == 1 else 'static + compiled'} "
               "features)", "",
               harness.md_table(g.drop(columns=["stage"]), floatfmt=".3f"), ""]
    md += ["## Choice", "", harness.md_table(choice, floatfmt=".3f"), ""]
    if args.ship:
        md += ["## Shipped (stage 1)", "", *ship(choice, train, compiled, args.threads), ""]
    else:
        md += ["## Shipped (files now in costtune/models; `--ship` refits them)", "",
               *shipped_lines(), ""]
    harness.write_report("model_selection", md, table)
    print("\n".join(md))


if __name__ == "__main__":
    main()
