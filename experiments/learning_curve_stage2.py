"""Learning the user's kernel with compiled features: does a harvest teach stage 2 faster?

The replay of ``experiments/learning_curve.py`` (held-out implementations, N = 0, 1, 2, 4, 8
exhaustively harvested train-suite shapes, scored on the held-out test suite), with the
compiled-feature model learned beside the static one, each updated as ``learn=True`` updates
it (stage 1 refitted on its training table plus the harvest, weight ``REFIT_WEIGHT``; stage 2,
whose shipped model has no table, by continued training):

- ``stage 1``: the static model (the family's shipped stage-1 kind) updated on the harvest,
  ranking every config: the learning curve's own rows;
- ``stage 2``: a booster of the kind the family's shipped stage 2 is (its feature set and
  scope in ``costtune/models/stage2_h200.json``: static+compiled or static+ir+compiled, for
  all families or the family alone), trained on every other implementation, updated on the
  harvest with the held-out kernel's own compiled and IR features, ranking every config;
- ``two-stage w=x``: what the hook does with both learned models: the best ``SHORTLIST`` by
  the learned stage 1, ordered by their blend at stage-1 weight x
  (``experiments.loio.two_stage_order``); x is chosen on the held-out kernel's unharvested
  train-suite shapes (``choose``) and shipped as ``costtune.tune.stage2.LEARNED_WEIGHT``.

Writes experiments/results/learning_curve_stage2.{md,csv}.

``--stage2`` lists how a harvest updates stage 2: ``continue`` (continued training, what a
base without a training table gets) and ``refit:<w>`` (refitted on the base's training rows
and the harvest, each harvested workload weighing w, as ``learn=True`` refits stage 1); the
update and the weight are chosen together (``choose``).

``--held-out`` replays only those implementations and ``--tables`` reports from the tables
earlier runs wrote (``--out``): the replay split over processes reports as one run.

    python -m experiments.learning_curve_stage2 [--seeds 3] [--shapes 0 1 2 4 8]
        [--stage2 continue refit:10] [--held-out gemm softmax ...] [--out DIR]
    python -m experiments.learning_curve_stage2 --tables DIR1/learning_curve_stage2.csv ...
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from costtune.evaluate import default_model  # noqa: E402
from costtune.evaluate.metrics import (  # noqa: E402
    rankings_from_scores,
    topk_scores,
    topk_table,
    workload_positions,
)
from costtune.features.static import static_features  # noqa: E402
from costtune.model.training import TrainingTable  # noqa: E402
from costtune.tune.ranking import stage2_kind  # noqa: E402
from experiments import harness  # noqa: E402
from experiments import learning_curve as lc  # noqa: E402
from experiments.learning_curve import method_of  # noqa: E402
from experiments.loio import SHORTLIST, two_stage_order, with_tables  # noqa: E402

QUESTION = "learning_curve_stage2"
KS = (1, 4, 8)
WEIGHTS = (0.0, 0.25, 0.5, 0.75)
STAGE2 = ("continue",)


def scores_of(test: pd.DataFrame, rankings: dict) -> dict:
    return {**topk_scores(topk_table(test, rankings, ks=KS), ks=KS, worst=(8,)),
            "n_workloads": len(rankings)}


def rank_two(test: pd.DataFrame, s1: np.ndarray, s2: np.ndarray, keys: np.ndarray, *,
             weight: float) -> dict:
    return {w: p[two_stage_order(s1[p], s2[p], keys[p], weight=weight, shortlist=SHORTLIST)]
            for w, p in workload_positions(test).items()}


def curve(case: dict, others: pd.DataFrame, *, seeds: int, shapes: list[int],
          stage2: tuple[str, ...] = STAGE2) -> list[dict]:
    """Scores at every N on the held-out test suite and, to choose the weight on, on the
    held-out kernel's train-suite shapes not harvested (``suite`` "pool"); stage 2 updated
    by each of ``stage2``'s methods."""
    family = case["family"]
    if case["train"].empty or case["pool"].empty or case["test"].empty:
        return []
    base1 = default_model(family=family, **lc.shipped_params(family)).fit(case["train"])
    table1 = TrainingTable.from_rows(base1, case["train"])
    features, scope = stage2_kind(family)
    base2 = default_model(family="all" if scope == "all" else family,
                          features=features).fit(others)
    table2 = (TrainingTable.from_rows(base2, others)
              if any(m.startswith("refit:") for m in stage2) else None)
    parts = {"test": case["test"].reset_index(drop=True),
             "pool": case["pool"].reset_index(drop=True)}
    feats = {k: static_features(v) for k, v in parts.items()}
    workloads = sorted(case["pool"]["workload"].unique())
    out = []
    for seed in range(seeds):
        order = list(np.random.default_rng(seed).permutation(workloads))
        for n in shapes:
            if n > len(order):
                continue
            taken = case["pool"][case["pool"]["workload"].isin(order[:n])]
            m1 = lc.update(base1, taken, "refit", {}, table=table1) if n else base1
            m2 = {m: _updated(base2, taken, m, table2) if n else base2 for m in stage2}
            for suite, rows in parts.items():
                if suite == "pool":
                    keep = ~rows["workload"].isin(order[:n]).to_numpy()
                    rows, f = rows[keep].reset_index(drop=True), feats[suite][keep]
                else:
                    f = feats[suite]
                out += _scored(rows, f, m1, m2, base={"family": family, "seed": seed,
                                                      "held_out": case["held_out"],
                                                      "n_shapes": n, "suite": suite})
    return out


def _updated(base, taken: pd.DataFrame, method: str, table):
    name, opts = method_of(method)  # learned as learn=True learns (lc.update)
    return lc.update(base, taken, name, opts, **({"table": table} if name == "refit" else {}))


def _scored(rows: pd.DataFrame, feats: pd.DataFrame, m1, m2: dict, *, base: dict
            ) -> list[dict]:
    """Each method's scores of ``rows``: stage 1, and per stage-2 update (``m2``: method ->
    model) stage 2 alone and the two stages at every weight."""
    if rows.empty:
        return []
    keys = rows["config"].astype(str).to_numpy()
    s1 = lc.model_scores(m1, rows, feats.reset_index(drop=True))
    methods = [("stage 1", "-", rankings_from_scores(rows, s1))]
    for update, model in m2.items():
        s2 = np.asarray(model.predict(rows), dtype=float)
        methods += [("stage 2", update, rankings_from_scores(rows, s2))]
        methods += [(f"two-stage w={w:g}", update, rank_two(rows, s1, s2, keys, weight=w))
                    for w in WEIGHTS]
    return [{**base, "method": m, "stage2_update": u, **scores_of(rows, r)}
            for m, u, r in methods]


def labelled(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with ``label``: the method, and for stage-2 methods the update in brackets
    (a table written before ``--stage2`` existed: continued training)."""
    update = (table["stage2_update"] if "stage2_update" in table
              else pd.Series("continue", index=table.index)).fillna("continue")
    stage1 = table["method"] == "stage 1"
    label = table["method"].where(stage1, table["method"] + " [" + update.astype(str) + "]")
    return table.assign(stage2_update=update.where(~stage1, "-"), label=label)


def choose(table: pd.DataFrame) -> tuple[str, float]:
    """The stage-2 update and the stage-1 weight for a learned stage 2: the best mean of
    top1/top4/top8/worst8 on the unharvested train-suite shapes ("pool"), over held-out
    implementations and N >= 1 (ties to the smaller weight, then to continued training)."""
    table = labelled(table)
    pool = table[(table["suite"] == "pool") & (table["n_shapes"] > 0)
                 & table["method"].str.startswith("two-stage w=")]
    crit = pool.assign(c=pool[["top1", "top4", "top8", "worst8"]].mean(axis=1))
    by = crit.groupby(["stage2_update", "method"])["c"].mean()
    best = by.max()
    tied = [(float(m.split("=")[1]), u != "continue", u) for (u, m), v in by.items()
            if v >= best - 1e-9]
    w, _, update = min(tied)
    return update, w


def report(table: pd.DataFrame, *, n_rows: int, seeds: int, seconds: float) -> list[str]:
    update, w = choose(table)
    table = labelled(table)
    chosen = f"two-stage w={w:g} [{update}]"
    test = table[table["suite"] == "test"]
    mean = (test.groupby(["family", "held_out", "label", "n_shapes"])
            [["top1", "top4", "top8", "worst8"]].mean().reset_index())
    pool = table[(table["suite"] == "pool") & (table["n_shapes"] > 0)]
    crit = (pool.assign(criterion=pool[["top1", "top4", "top8", "worst8"]].mean(axis=1))
            .groupby("label")["criterion"].mean().reset_index())
    at2 = mean[mean["n_shapes"] == 2].pivot_table(index=["family", "held_out"],
                                                  columns="label", values=["top1", "top4"])
    at2.columns = [f"{m} {metric}" for metric, m in at2.columns]
    shown = ("stage 1", f"stage 2 [{update}]", chosen)
    goal = [f"- {h}: " + "; ".join(
        f"{m} {r[f'{m} top1']:.3f} / {r[f'{m} top4']:.3f}"
        + (" (met)" if r[f"{m} top1"] >= lc.GOAL["top1"] and r[f"{m} top4"] >= lc.GOAL["top4"]
           else "") for m in shown)
        for (_, h), r in at2.iterrows()]
    updates = sorted(set(table["stage2_update"]) - {"-"})
    return ["# Learning curve with compiled features (held-out implementations)", "",
            harness.provenance(dataset=harness.DATASET, n_rows=n_rows), "",
            "- Protocol: `experiments/learning_curve.py`'s replay (exhaustive harvest, "
            "`costtune.model.learned.fit_update` as `learn=True` updates each model: stage 1 "
            f"refitted with its training rows ({lc.SHIPPED}); stage 2 updated by each of "
            f"{', '.join(f'`{u}`' for u in updates)} (`continue`: continued training; "
            "`refit:w`: refitted on its training rows and the harvest, a harvested workload "
            f"weighing w); {seeds} seeds, means shown), with a booster of the family's "
            "shipped stage-2 kind (" + ", ".join(
                f"{f}: {'/'.join(stage2_kind(f))}" for f in sorted(set(table["family"])))
            + "; trained on every other implementation's train suite) learned beside "
            "the static stage-1 model from the same harvested rows and their compiled "
            "and IR features (the held-out kernel's own, datasets/h200's feature tables). "
            f"`two-stage w=x`: the best {SHORTLIST} by the learned stage 1, ordered by the "
            "blend of the two learned models at stage-1 weight x "
            "(`costtune.tune.ranking.blend_order`).",
            "- The stage-2 update and the weight are chosen on training data only: the "
            "held-out kernel's train-suite shapes that were not harvested (mean of "
            "top1/top4/top8/worst8 over held-out implementations and N >= 1): "
            f"**{update}, w = {w:g}**, what `costtune.tune.stage2` uses once `learn=True` "
            "has taught a kernel its stage-2 model.",
            f"- Runtime {seconds:.0f} s on this machine.", "",
            "## Update and weight selection (unharvested train-suite shapes)", "",
            harness.md_table(crit, floatfmt=".4f"), "",
            f"## After 2 harvested shapes, test suites: top1 / top4 (goal {lc.GOAL['top1']} / "
            f"{lc.GOAL['top4']})", "", *goal, "",
            "## Mean over seeds (test suites)", "", harness.md_table(mean, floatfmt=".4f"), ""]


def _weight_ok(method: str) -> bool:
    try:
        return float(method.split(":", 1)[1]) > 0
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--shapes", type=int, nargs="+", default=[0, 1, 2, 4, 8])
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--out", type=Path, default=None, help="results folder")
    ap.add_argument("--stage2", nargs="+", default=list(STAGE2),
                    help="how a harvest updates stage 2: continue, refit:<weight>")
    ap.add_argument("--held-out", nargs="+", default=None,
                    help="replay only these implementations")
    ap.add_argument("--tables", nargs="+", type=Path, default=None,
                    help="report from these saved tables (replay nothing)")
    ap.add_argument("--seconds", type=float, default=None,
                    help="with --tables: the replays' runtime to report (sum of the runs)")
    args = ap.parse_args(argv)
    for m in args.stage2:
        if m != "continue" and not (m.startswith("refit:") and _weight_ok(m)):
            ap.error(f"--stage2: {m!r} is not continue or refit:<weight > 0>")
    start = time.perf_counter()
    raw = harness.load_dataset(args.dataset)
    if args.tables:
        table = pd.concat([pd.read_csv(t) for t in args.tables], ignore_index=True)
        return _write(table, n_rows=len(raw), seeds=int(table["seed"].nunique()),
                      seconds=args.seconds or time.perf_counter() - start, out=args.out)
    df = lc.with_implementation(with_tables(raw, args.dataset))
    found, protocol = lc.cases(df)
    if protocol.startswith("FALLBACK"):
        print("no held-out implementation in the data: nothing to replay")
        return 3
    if args.held_out:
        found = [c for c in found if c["held_out"] in set(args.held_out)]
    records = []
    for case in found:
        print(f"== {case['family']}: held out {case['held_out']}", flush=True)
        others = df[(df["implementation"] != case["held_out"]) & (df["suite"] == "train")]
        records += curve(case, others, seeds=args.seeds, shapes=sorted(set(args.shapes)),
                         stage2=tuple(args.stage2))
    return _write(pd.DataFrame(records), n_rows=len(df), seeds=args.seeds,
                  seconds=time.perf_counter() - start, out=args.out)


def _write(table: pd.DataFrame, *, n_rows: int, seeds: int, seconds: float,
           out: Path | None) -> int:
    lines = report(table, n_rows=n_rows, seeds=seeds, seconds=seconds)
    md = harness.write_report(QUESTION, lines, table, out=out)
    print("\n".join(lines))
    print(f"wrote {harness.relative(md)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
