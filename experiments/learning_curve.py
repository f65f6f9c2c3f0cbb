"""Learning the user's kernel as it is tuned, by replay on held-out implementations.

Protocol, per family and per held-out implementation H (the dataset's ``implementation``
column; rows without it are the family's original kernel, named like the family):

1. base model: the shipped defaults (``costtune.evaluate.default_model``) with the feature
   set the family's shipped stage-1 model uses (softmax: static+src), trained on the
   train-suite rows of the family's *other* implementations;
2. harvest: H's train-suite workloads in a seeded order; after N = 0, 1, 2, 4, 8 of them, the
   base model is updated on their rows (``costtune.model.learned.fit_update``) by each
   ``--methods`` entry: ``refit:<w>`` refits the base on its training rows and the harvest,
   each harvested workload weighing w (what ``costtune.autotune(learn=True)`` does with a
   shipped base, w = ``REFIT_WEIGHT``; ``refit:<w>h``: w of the base table's heaviest
   workloads, e.g. the original kernel's), ``continue`` adds trees to the base booster,
   ``residual`` fits a separate booster over the base's scores; ``refit:auto:<w>`` weighs
   the harvest w where the base already ranks it well, else ``REFIT_WEIGHT``
   (``auto_weight``); each learns from the workloads with an order
   (``learned.teaching``), as learn=True does;
   the harvests replayed (``--harvests``): ``exhaustive`` (every config of each harvested
   workload, what an untuned or exhaustive call records), ``top8`` (the 8 configs the model of
   the moment ranks best, what ``costtune.autotune(top_k=8, learn=True)`` records, shape after
   shape) and ``adaptive`` (what ``budget="adaptive"`` benchmarks under the model of the
   moment, ``experiments.learning_harvest.adaptive_rows``);
3. score: H's test-suite workloads (shapes never harvested) at top_k = 1, 4, 8 (TenSet score,
   ``costtune.evaluate.metrics``) and with the adaptive budget (``costtune.Adaptive``,
   calibrated margin, cap 16): its score and the mean configs it benchmarked.

Selection (``sel_*`` columns): the same scores on the held-out kernel's *unharvested
train-suite* shapes, so that the refit weight is chosen on training data only.

Writes experiments/results/learning_curve.{md,csv}.

    python -m experiments.learning_curve [--seeds 3] [--shapes 0 1 2 4 8]
        [--methods continue refit:1 refit:2 refit:5 refit:10h residual] [--families gemm]
        [--updates auto 20:0.05:4 50:0.1:6]   # trees added per update
        [--ceiling]   # also models refitted on all of the held-out kernel's train shapes
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # started as a file: make the `experiments` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from costtune.evaluate import default_model  # noqa: E402
from costtune.evaluate.metrics import (  # noqa: E402
    rankings_from_scores,
    topk_scores,
    topk_table,
)
from costtune.features.static import static_features  # noqa: E402
from costtune.kernels import IMPLEMENTATIONS  # noqa: E402
from costtune.model import learned  # noqa: E402
from costtune.model.learned import fit_update  # noqa: E402
from costtune.model.training import TrainingTable  # noqa: E402
from costtune.tune.adaptive import Adaptive, margin_for, replay_table  # noqa: E402
from costtune.tune.trained import trained_from_rows  # noqa: E402
from experiments import harness  # noqa: E402
from experiments.learning_curve_report import CAP, GOAL, SHIPPED, report  # noqa: E402
from experiments.learning_harvest import (  # noqa: E402
    KS,
    adaptive_rows,
    learned_values,
    model_scores,
    top_rows,
    tuned_scores,
)

QUESTION = "learning_curve"
DEFAULT_UPDATE = "auto"
__all__ = ["CAP", "GOAL", "SHIPPED", "cases", "ceiling", "curve", "report"]


def method_of(name: str) -> tuple[str, dict]:
    """"continue" / "residual" / "refit:<weight>" / "refit:<weight>h" (weight times the
    base table's heaviest workload) / "refit:auto:<weight>" (weight where the base's top-1
    on the harvest is >= TRUSTED, else REFIT_WEIGHT: ``auto_weight``) -> (fit_update
    method, its options; ``trusted``: the weight is chosen per update)."""
    if name.startswith("refit:auto:"):
        return "refit", {"trusted": float(name.rsplit(":", 1)[1])}
    if name.startswith("refit:"):
        text = name.split(":", 1)[1]
        heaviest = text.endswith("h")
        return "refit", {"weight": float(text.removesuffix("h")), "per_heaviest": heaviest}
    return name, {}


def with_implementation(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with ``implementation`` (missing -> the family's name), ``kernel`` the family, and
    workload ids made unique per implementation."""
    impl = (df["implementation"].fillna(df["kernel"]) if "implementation" in df
            else df["kernel"]).astype(str)
    family = {i: f for f, names in IMPLEMENTATIONS.items() for i in names}
    df = df.assign(implementation=impl, kernel=impl.map(family).fillna(df["kernel"]))
    return df.assign(workload=df["implementation"] + ":" + df["workload"].astype(str))


def cases(df: pd.DataFrame) -> tuple[list[dict], str]:
    """The held-out cases and the protocol's name: one per (family, implementation) where the
    family has two or more."""
    out = []
    for family, group in df.groupby("kernel"):
        impls = sorted(group["implementation"].unique())
        if len(impls) < 2:
            continue
        for held in impls:
            out.append({"family": family, "held_out": held,
                        "train": group[(group["implementation"] != held)
                                       & (group["suite"] == "train")],
                        "pool": group[(group["implementation"] == held)
                                      & (group["suite"] == "train")],
                        "test": group[(group["implementation"] == held)
                                      & (group["suite"] == "test")]})
    return out, "held-out implementation"


def score_model(model, test: pd.DataFrame, feats: pd.DataFrame, margin: float, *,
                trained: dict | None = None) -> dict:
    """Fixed top-k scores and the adaptive budget's score and configs, on the test rows;
    with ``trained`` (the values the model learned from) also the top-k as the hook keeps it
    (``tuned_top{k}``, ``tuned_configs{k}``)."""
    s, rankings, out = ranked(model, test, feats)
    if trained is not None:
        out.update(tuned_scores(test, feats, rankings, trained))
    adaptive = replay_table(test.assign(kernel=test["kernel"].astype(str)), s,
                            budget=Adaptive(max_configs=CAP), margins=[margin]).iloc[0]
    out.update(adaptive_score=float(adaptive["score"]),
               adaptive_configs=float(adaptive["mean_configs"]), adaptive_margin=margin)
    return out


def ranked(model, test: pd.DataFrame, feats: pd.DataFrame) -> tuple[np.ndarray, dict, dict]:
    """``model``'s scores of ``test``, the rankings they give and their top-k scores."""
    s = model_scores(model, test, feats)
    rankings = rankings_from_scores(test, s)
    return s, rankings, topk_scores(topk_table(test, rankings, ks=KS), ks=KS, worst=(8,))


def shipped_params(family: str) -> dict:
    """What the base model takes from the shipped stage-1 model of ``family``: its feature set
    (e.g. softmax: static+src) and the weight of the original kernel's workloads (GEMM: 16)."""
    from costtune.model.xgb import CostModel

    model, _ = CostModel.load_for("h200", family)
    return {"features": model.features, "original_weight": model.original_weight}


def parse_update(text: str) -> tuple[str, int | None, dict | None]:
    """"auto" (what ``costtune.model.learned`` does) or "rounds:eta:depth" -> (label,
    rounds, XGBoost parameters of the added trees)."""
    if text == "auto":
        return text, None, None
    try:
        rounds, eta, depth = text.split(":")
        return text, int(rounds), {"eta": float(eta), "max_depth": int(depth)}
    except ValueError:
        raise SystemExit(f"--updates: {text!r} is not rounds:eta:depth, e.g. 20:0.05:4"
                         ) from None


HARVESTS = ("exhaustive", "top8", "adaptive")


def harvested(harvest: str, model, rows: pd.DataFrame, trained: dict,
              margin: float) -> pd.DataFrame:
    """The rows of one workload a tuning records: all (``exhaustive``), the hook's kept list
    at top_k=8 (``top8``) or what ``budget="adaptive"`` benchmarks (``adaptive``)."""
    if harvest == "exhaustive":
        return rows
    if harvest == "adaptive":
        return adaptive_rows(model, rows, Adaptive(max_configs=CAP), margin)
    return top_rows(model, rows, 8, trained)


def curve(case: dict, *, seeds: int, shapes: Sequence[int], methods: Sequence[str],
          trees: int, updates: Sequence[tuple[str, int, dict]],
          harvests: Sequence[str] = HARVESTS[:2]) -> list[dict]:
    family, test = case["family"], case["test"].reset_index(drop=True)
    if case["train"].empty or case["pool"].empty or test.empty:
        return []
    base = default_model(family=case.get("base_family", family), n_estimators=trees,
                         **shipped_params(family)).fit(case["train"])
    table = (TrainingTable.from_rows(base, case["train"])
             if any(m.startswith("refit:") for m in methods) else None)
    feats = static_features(test)
    train_ok = case["train"][case["train"]["status"] == "ok"]
    trained = trained_from_rows(train_ok, family)  # what the base learned from
    margin = margin_for(Adaptive(), family)
    pool = case["pool"].reset_index(drop=True)
    pool_feats = static_features(pool)  # sliced for the unharvested shapes below
    workloads = sorted(pool["workload"].unique())
    records = []
    for seed in range(seeds):
        order = list(np.random.default_rng(seed).permutation(workloads))
        runs = [(harvest, m, u) for harvest in harvests for m in methods
                if harvest == "exhaustive" or m in ("continue", SHIPPED)
                or m.startswith("refit:auto:")
                for u in (updates if not m.startswith("refit:") else [("-", None, None)])]
        for harvest, method, (label, rounds, params) in runs:
            fit_method, options = method_of(method)
            taken: list[pd.DataFrame] = []
            model = base
            for i in range(max(shapes) + 1):
                if i in shapes or (i == len(order) and max(shapes) > i):
                    n_rows = int(sum(len(t) for t in taken))
                    rec = score_model(model, test, feats, margin,
                                      trained=learned_values(trained, taken))
                    keep = ~pool["workload"].isin(order[:i]).to_numpy()
                    if i and keep.any():  # selection: the unharvested train shapes
                        sel = ranked(model, pool[keep].reset_index(drop=True),
                                     pool_feats[keep].reset_index(drop=True))[2]
                        rec.update({f"sel_{k}": v for k, v in sel.items()})
                    records.append({"family": family, "held_out": case["held_out"],
                                    "harvest": harvest, "method": method,
                                    "update": label, "seed": seed,
                                    "n_shapes": i, "n_harvest_rows": n_rows, **rec})
                if i == len(order):
                    break
                rows = pool[pool["workload"] == order[i]]
                hook = learned_values(trained, taken) if harvest == "top8" else trained
                taken.append(harvested(harvest, model, rows, hook, margin))
                if harvest != "exhaustive" or i + 1 in shapes or i + 1 == len(order):
                    model = update(base, pd.concat(taken, ignore_index=True), fit_method,
                                   options, rounds=rounds, params=params, table=table)
    return records


def update(base, rows: pd.DataFrame, method: str, options: dict, **kw):
    """``fit_update`` of ``base`` on the harvested ``rows`` (what learn=True learns from:
    ``learned.teaching``), the refit weight chosen per update for ``refit:auto:<w>``."""
    rows = learned.teaching(rows)
    if rows.empty:  # no order harvested yet: learn=True keeps the model it had
        return base
    if "trusted" in options:
        options = {"weight": auto_weight(base, rows, options["trusted"])}
    return fit_update(base, rows, method=method, **kw, **options)


def auto_weight(base, rows: pd.DataFrame, trusted: float) -> float:
    """``refit:auto:<trusted>``'s weight of the harvested ``rows``: ``trusted`` where the base's
    top-1 on them is >= ``learned.TRUSTED`` (it already finds their best), else
    ``REFIT_WEIGHT``."""
    top1 = learned.base_top1(base, rows)
    return float(trusted) if top1 >= learned.TRUSTED else float(learned.REFIT_WEIGHT)


def ceiling(case: dict, *, trees: int) -> list[dict]:
    """How far data alone goes: models refitted from scratch (shipped defaults and feature
    set) on ALL of the held-out implementation's train-suite rows - alone (``own rows``) and
    with the other implementations' (``every implementation``) - scored on its test suite.
    Not what ``learn=True`` does (the user's machine has no base training rows); the bound a
    harvest could reach with this model class."""
    family, test = case["family"], case["test"].reset_index(drop=True)
    if case["pool"].empty or test.empty:
        return []
    feats = static_features(test)
    n = int(case["pool"]["workload"].nunique())
    records = []
    for label, rows in (("own rows", case["pool"]),
                        ("every implementation", pd.concat([case["train"], case["pool"]]))):
        model = default_model(family=case.get("base_family", family), n_estimators=trees,
                              **shipped_params(family)).fit(rows)
        records.append({"family": family, "held_out": case["held_out"], "harvest": "all",
                        "method": f"refit: {label}", "update": "refit", "seed": 0,
                        "n_shapes": n, "n_harvest_rows": len(case["pool"]),
                        **ranked(model, test, feats)[2]})
    return records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--shapes", type=int, nargs="+", default=[0, 1, 2, 4, 8])
    ap.add_argument("--methods", nargs="+", default=["continue", SHIPPED],
                    help="how a harvest updates the base: continue, residual, refit:<weight> "
                         "(refit:<weight>h: weight times the table's heaviest workload; "
                         "refit:auto:<weight>: that weight where the base ranks the harvest "
                         "well, else REFIT_WEIGHT) "
                         f"(default: continue and what ships, {SHIPPED}); the top8 harvest "
                         "replays continue, what ships and refit:auto:<w> only")
    ap.add_argument("--trees", type=int, default=300, help="base model trees")
    ap.add_argument("--updates", nargs="+", default=[DEFAULT_UPDATE],
                    help="trees added per update: auto (what costtune.model.learned "
                         "does: light or full by the base's top-1 on the harvest) or "
                         "rounds:eta:depth")
    ap.add_argument("--harvests", nargs="+", default=list(HARVESTS[:2]), choices=HARVESTS,
                    help="what each harvested shape records: every config, top_k=8's kept "
                         "list, or the adaptive budget's benchmarks (the last two only for "
                         "continue, what ships and refit:auto:<w>)")
    ap.add_argument("--ceiling", action="store_true",
                    help="also refit on all of each held-out kernel's train shapes (a bound)")
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--families", nargs="+", default=None,
                    help="only these families' held-out implementations (default: all)")
    ap.add_argument("--out", type=Path, default=None, help="results folder")
    args = ap.parse_args(argv)
    for m in args.methods:
        try:
            options = method_of(m)[1]
            ok = m in ("continue", "residual") or float(
                options.get("weight", options.get("trusted"))) > 0
        except (KeyError, ValueError, TypeError):
            ok = False
        if not ok:
            ap.error(f"--methods: {m!r} is not continue, residual, refit:<weight > 0>, "
                     "refit:<weight > 0>h or refit:auto:<weight > 0>")
    start = time.perf_counter()
    df = with_implementation(harness.load_dataset(args.dataset))
    found, protocol = cases(df)
    if args.families:
        unknown = sorted(set(args.families) - {c["family"] for c in found})
        if unknown:
            ap.error(f"--families: no held-out implementation of {unknown} in "
                     f"{harness.relative(args.dataset)}")
        found = [c for c in found if c["family"] in args.families]
    if not found:
        print(f"no held-out implementation: every family has one in "
              f"{harness.relative(args.dataset)}")
        return 3
    records = []
    for case in found:
        print(f"== {case['family']}: held out {case['held_out']}", flush=True)
        records += curve(case, seeds=args.seeds, shapes=sorted(set(args.shapes)),
                         methods=args.methods, trees=args.trees,
                         updates=[parse_update(u) for u in args.updates],
                         harvests=args.harvests)
        if args.ceiling:
            records += ceiling(case, trees=args.trees)
    if not records:
        print("nothing to score: no case has train, harvest and test rows")
        return 3
    table = pd.DataFrame(records)
    lines = report(table, protocol, n_rows=len(df), seeds=args.seeds,
                   seconds=time.perf_counter() - start,
                   bases={f: shipped_params(f) for f in table["family"].unique()})
    md = harness.write_report(QUESTION, lines, table, out=args.out)
    print("\n".join(lines))
    print(f"wrote {harness.relative(md)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
