"""Does training on every implementation cost the original kernels? (issue 18)

The families' original kernels' test suites, ranked by boosters trained on the train suite of
(a) the original kernels only and (b) every implementation, for each hook stage's feature set
(static; static+compiled) and scope (one booster for all families; one per family). TenSet
top1 / top8 and worst8. Writes experiments/results/in_distribution.{md,csv}.

    python -m experiments.in_distribution [--dataset datasets/h200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from costtune.evaluate.metrics import rankings_from_scores, summarize
from costtune.model import CostModel
from experiments import harness, loio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    data = loio.with_tables(harness.load_dataset(args.dataset), args.dataset)
    original = data["implementation"] == data["kernel"]
    test = data[original & (data["suite"] == "test")].reset_index(drop=True)
    rows = []
    for trained_on, mask in (("original kernels", original), ("all implementations", True)):
        train = data[(data["suite"] == "train") & mask]
        for features in ("static", "static+compiled"):
            for scope in ("all", "family"):
                for family in sorted(test["kernel"].unique()):
                    part = test[test["kernel"] == family].reset_index(drop=True)
                    fit_rows = train if scope == "all" else train[train["kernel"] == family]
                    model = CostModel(**{**loio.BASE, "family": "all" if scope == "all"
                                         else family}, features=features,
                                      n_jobs=args.threads).fit(fit_rows)
                    s = model.predict(part)
                    m = summarize(part, rankings_from_scores(part, s), ks=(1, 8), worst=(8,))
                    rows.append({"trained_on": trained_on, "features": features,
                                 "scope": scope, "family": family, "top1": m["top1"],
                                 "top8": m["top8"], "worst8": m["worst8"],
                                 "n_workloads": m["n_workloads"]})
    table = pd.DataFrame(rows)
    md = ["# In distribution: the original kernels' test suites, trained with or without the "
          "other implementations", "", harness.provenance(dataset=args.dataset,
                                                          n_rows=len(data)), "",
          "Boosters: rank:pairwise, 300 trees, depth 6 (experiments/loio.py's settings), "
          "trained on the train suite; scored on the original kernels' test suites.", "",
          harness.md_table(table, floatfmt=".3f"), ""]
    harness.write_report("in_distribution", md, table, csv_kw={"float_format": "%.5g"})
    print("\n".join(md))


if __name__ == "__main__":
    main()
