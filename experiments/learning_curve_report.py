"""The report of experiments/learning_curve.py: the goal at N = 2, the refit weight chosen
on training data (``sel_*`` scores), the mean curve over seeds and the ceiling rows."""

from __future__ import annotations

import pandas as pd

from costtune.model.learned import REFIT_WEIGHT
from experiments import harness

CAP = 16
GOAL = {"top1": 0.97, "top4": 0.99}
# What learn=True does with a shipped base (it ships its training table): a refit with the
# harvested workloads weighted REFIT_WEIGHT each.
SHIPPED = f"refit:{REFIT_WEIGHT:g}"


def weight_choice(table: pd.DataFrame, harvest: str = "exhaustive") -> list[str]:
    """The refit weights by their selection score: the mean of sel_top1, sel_top4, sel_top8
    and sel_worst8 (unharvested train-suite shapes) over held-out kernels, seeds and N >= 1,
    of one ``harvest``; per family and overall (the choice)."""
    sel = [f"sel_{m}" for m in ("top1", "top4", "top8", "worst8")]
    if not set(sel) <= set(table):
        return []
    refits = table["method"].str.fullmatch(r"refit:(auto:)?[0-9.]+h?")
    rows = table[refits & (table["harvest"] == harvest)
                 & (table["n_shapes"] >= 1)].dropna(subset=sel)
    if rows["method"].nunique() < 2:
        return []
    rows = rows.assign(sel=rows[sel].mean(axis=1))
    by = rows.pivot_table(index="method", columns="family", values="sel", aggfunc="mean")
    by["all families"] = rows.groupby(["family", "method"])["sel"].mean().unstack(0).mean(axis=1)
    best = by["all families"].idxmax()
    return [f"## Refit weight, chosen on training data ({harvest} harvest)", "",
            "Mean of sel_top1/4/8 and sel_worst8 (each held-out kernel's unharvested "
            f"train-suite shapes, {harvest} harvest, N >= 1, all seeds); `all families` is "
            f"the mean of the family means. Best: **{best}** (ships: {SHIPPED}).", "",
            harness.md_table(by.reset_index(), floatfmt=".4f"), ""]


def report(table: pd.DataFrame, protocol: str, *, n_rows: int, seeds: int,
           seconds: float, bases: dict[str, dict]) -> list[str]:
    """The report's lines; ``bases``: per family the base's feature set and original-kernel
    weight (``learning_curve.shipped_params``)."""
    cols = ["top1", "top4", "top8", "worst8", "adaptive_score", "adaptive_configs",
            "tuned_top1", "tuned_configs1", "tuned_top4", "tuned_configs4", "tuned_top8",
            "tuned_configs8"]
    refit = table["update"] == "refit"
    bound, table = table[refit], table[~refit]
    cols = [c for c in cols if c in table]
    mean = (table.groupby(["family", "held_out", "harvest", "method", "update",
                           "n_shapes"])[cols]
            .mean().reset_index())
    at2 = mean[(mean["n_shapes"] == 2) & mean["method"].isin(["continue", SHIPPED])]
    goal = [f"- {r.family} / {r.held_out} ({r.harvest}, {r.method}"
            f"{'' if r.update == '-' else ', update ' + r.update}): top1 {r.top1:.3f} "
            f"(goal {GOAL['top1']}: {'met' if r.top1 >= GOAL['top1'] else 'NOT met'}), "
            f"top4 {r.top4:.3f} (goal {GOAL['top4']}: "
            f"{'met' if r.top4 >= GOAL['top4'] else 'NOT met'})"
            for r in at2.itertuples()]
    kinds = "; ".join(f"{f}: {p['features']}, original weight {p['original_weight']:g}"
                      for f, p in sorted(bases.items()))
    lines = [f"# Learning curve: {protocol}", "",
             harness.provenance(dataset=harness.DATASET, n_rows=n_rows), "",
             f"- Protocol: **{protocol}**. Base model: shipped defaults, with the feature "
             "set of the family's shipped stage-1 model and its weight of the original "
             f"kernel's workloads ({kinds}), trained on the other "
             "implementations' train-suite rows; N harvested train-suite workloads of the "
             f"held-out one (seeded orders, {seeds} seeds, means shown) update it "
             "(`costtune.model.learned.fit_update`): `refit:<w>` refits it on its training "
             "rows and the harvest, each harvested workload weighing w (what "
             f"`learn=True` does with a shipped base: {SHIPPED}); `continue` adds trees "
             "(update `auto`: light or full by the base's top-1 on the harvest). Scored on "
             "the held-out one's test-suite workloads; `sel_*`: the same on its unharvested "
             "train-suite workloads (how the weight is chosen). TenSet score, "
             "`costtune.evaluate.metrics`.",
             f"- Adaptive: `costtune.Adaptive(max_configs={CAP})` with the family's calibrated "
             "margin (`costtune/models/adaptive_h200.json`), replayed on the recorded times; "
             "`adaptive_configs` is the mean configs it benchmarked per workload.",
             "- harvest `exhaustive`: every config of a harvested workload; `top8`: what "
             "top_k=8 tuning records, the hook's kept list under the model of the moment (its "
             "8 best-ranked configs with learned values, and any untrained one ranked above "
             "them).",
             "- `tuned_top{k}`: top-k as the pruning hook keeps it: the k best-ranked configs "
             "with values the model learned from (the base's rows and the harvested ones), "
             "plus every config with an untrained value (e.g. more accumulator elements per "
             "thread than any training tile) ranked above the last of them "
             "(`costtune.tune.trained.keep_untrained`, at most 4k); `tuned_configs{k}` is "
             "the mean configs that measures per workload. The goals are read on `top{k}`.",
             f"- Runtime {seconds:.0f} s on this machine.", "",
             "## Goal at N = 2", "", *goal, "",
             *weight_choice(table), *weight_choice(table, "top8"),
             *weight_choice(table, "adaptive"),
             "## Mean over seeds", "", harness.md_table(mean, floatfmt=".4f"), ""]
    if not bound.empty:
        lines += ["## Ceiling: refitted on all of the held-out kernel's train shapes", "",
                  "`--ceiling`: models refitted from scratch on every train-suite shape of the "
                  "held-out implementation (`own rows`), or on those and the other "
                  "implementations' (`every implementation`), scored on its test suite: what "
                  "a harvest of that size could reach with this model class.", "",
                  harness.md_table(bound[["family", "held_out", "method", "n_shapes", "top1",
                                          "top4", "top8", "worst8"]], floatfmt=".4f"), ""]
    return lines
