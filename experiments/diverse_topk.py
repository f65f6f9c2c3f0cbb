"""Does benchmarking the best config of each tile shape first make the pruned top-k safer?

The hook benchmarks the k configs the model scores highest. When the model misjudges one tile
shape (say it under-rates 128x256 GEMM tiles), its top k can hold only variants (warps, stages,
BLOCK_K) of the two or three tile shapes it likes best. A "tile-diverse" order instead takes,
in score order, the best-scored config of each tile shape first, then the rest by score; a
"hybrid" order keeps the first h configs by score and then goes tile-diverse. Top-1 is the same
for every order. Each order is judged by the TenSet top-k score and the worst workload's
score from the H200 dataset's times, out of fold on the train suite (shape-grouped 5-fold, the
shipped model's settings refitted per fold: what selects a default) and, for the record, on
the test suite with the shipped model. Writes experiments/results/diverse_topk.{md,csv}.

    python -m experiments.diverse_topk [--folds 5]
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.model_selection import GroupKFold

from costtune.evaluate import topk_scores, topk_table
from costtune.evaluate.metrics import rankings_from_scores
from costtune.evaluate.protocols import shape_groups
from costtune.kernels import FAMILIES
from costtune.model import CostModel
from experiments import harness

ORDERS = ("score", "tiles", "score2+tiles", "score4+tiles")
# The parameters that set a config's tile shape, per family (the rest: warps, stages, K step,
# split-K, are variants of a tile).
TILE_PARAMS = {"gemm": ("BLOCK_M", "BLOCK_N"), "attention": ("BLOCK_M", "BLOCK_N"),
               "softmax": ("BLOCK_N", "ROWS_PER_PROG")}


def tile_key(family: str, config: str | Mapping[str, Any]) -> tuple:
    """The tile shape of ``config`` (a canonical key string or a parameter mapping)."""
    if isinstance(config, str):
        from costtune.features import parse_config_key

        config = parse_config_key(config).as_dict()
    return tuple(config.get(p) for p in TILE_PARAMS.get(family, ()))


def order_positions(tiles: Sequence[Any], order: str = "score") -> np.ndarray:
    """Positions 0..n-1 of configs already sorted best-score-first, re-ordered by ``order``;
    ``tiles[i]`` is config i's tile shape (any hashable)."""
    n = len(tiles)
    if order == "score":
        return np.arange(n)
    head = 0
    if order != "tiles":
        if not (order.startswith("score") and order.endswith("+tiles")
                and order[5:-6].isdigit()):
            raise ValueError(f"order must be 'score', 'tiles' or 'score<h>+tiles', got {order!r}")
        head = min(int(order[5:-6]), n)
    taken = list(range(head))
    seen = {tiles[i] for i in taken}
    rest = []
    for i in range(head, n):
        if tiles[i] in seen:
            rest.append(i)
        else:
            seen.add(tiles[i])
            taken.append(i)
    return np.array(taken + rest, dtype=int)


KS = (1, 2, 4, 8)


def oof_scores(rows: pd.DataFrame, model: CostModel, folds: int) -> np.ndarray:
    out = np.full(len(rows), np.nan)
    groups = shape_groups(rows)
    for tr, te in GroupKFold(n_splits=folds).split(np.zeros(len(rows)), groups=groups):
        fitted = clone(model).fit(rows.iloc[tr])
        out[te] = fitted.predict(rows.iloc[te])
    return out


def judge(rows: pd.DataFrame, scores: np.ndarray, family: str) -> list[dict]:
    base = rankings_from_scores(rows, scores)
    keys = rows["config"].astype(str).to_numpy()
    tiles = [tile_key(family, k) for k in keys]
    out = []
    for name in ORDERS:
        rankings = {w: pos[order_positions([tiles[i] for i in pos], name)]
                    for w, pos in base.items()}
        table = topk_table(rows, rankings, ks=KS)
        out.append({"order": name, **topk_scores(table, ks=KS, worst=KS)})
    return out


def verdict(df: pd.DataFrame) -> str:
    """Per family, the orders that beat score order out of fold on no criterion less (top2,
    top4, top8, worst8) and on at least one more: only those would replace the default."""
    cv = df[df["split"] == "train CV"].set_index(["family", "order"])
    crit = ["top2", "top4", "top8", "worst8"]
    parts, better = [], []
    for family in cv.index.get_level_values("family").unique():
        base = cv.loc[(family, "score"), crit]
        for order in ORDERS[1:]:
            diff = cv.loc[(family, order), crit] - base
            if (diff >= -1e-9).all() and (diff > 1e-9).any():
                better.append(f"{family}: {order}")
        parts.append(family)
    if not better:
        return ("no tile-diverse order is at least as good as score order on every criterion "
                f"out of fold ({', '.join(parts)}); score order stays the hook's default.")
    return "at least as good on every criterion out of fold: " + "; ".join(better) + "."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--model", default="h200")
    args = ap.parse_args()
    records = []
    n_rows = 0
    for family in FAMILIES:
        data = harness.load_dataset(harness.DATASET, kernel=family)
        n_rows += len(data)
        model = CostModel.load_for(args.model, family)[0]
        train = data[data["suite"] == "train"].reset_index(drop=True)
        test = data[data["suite"] == "test"].reset_index(drop=True)
        print(f"{family}: {train['workload'].nunique()} train / {test['workload'].nunique()} "
              f"test workloads", flush=True)
        for split, rows, scores in (
                ("train CV", train, oof_scores(train, model, args.folds)),
                ("test", test, model.predict(test))):
            for rec in judge(rows, scores, family):
                records.append({"family": family, "split": split, **rec})
    df = pd.DataFrame(records)
    cols = ["family", "split", "order", *[f"top{k}" for k in KS], *[f"worst{k}" for k in KS]]
    lines = ["# Tile-diverse top-k order", "",
             harness.provenance(dataset=harness.DATASET, n_rows=n_rows), "",
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"Model: shipped `{args.model}` as the hook loads it per family; for train CV its "
             f"settings are refitted per fold on that family's rows ({args.folds} "
             "shape-grouped folds).", "",
             harness.md_table(df[cols], floatfmt=".3f"), "",
             "Verdict (train CV decides): " + verdict(df), ""]
    harness.write_report("diverse_topk", lines, df)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
