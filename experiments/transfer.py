"""Research question 4: does the cost model transfer to unseen shapes and unseen kernel families?

Three protocols of ``costtune.evaluate.protocols``, same model parameters as the shipped model
(rank:pairwise, static features, 300 trees):

- ``split``: train suite -> test suite (reference, as in leaderboard.md);
- ``kfold``: grouped 5-fold over shapes (a shape's fp16/bf16 workloads share a fold), every
  workload scored by a model that never saw its shape;
- ``lofo``: one booster trained on two families ranks the third (never seen) family.

Writes experiments/results/transfer.{md,csv,png}.

    python -m experiments.transfer [--dataset datasets/h200] [--trees 300]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from costtune.evaluate import evaluate
from costtune.evaluate.report import kernel_panels, save_panels, topk_panel
from costtune.model import CostModel
from experiments import harness

KS = (1, 2, 4, 8, 16)
PROTOCOLS = {"split": "train suite -> test suite", "kfold": "unseen shapes (grouped 5-fold)",
             "lofo": "unseen family (train on the other two)"}
METRICS = ["top1", "top2", "top4", "top8", "top16", "worst8", "kendall_tau", "n_workloads"]
MODEL = "xgb:static"


def run(df: pd.DataFrame, *, trees: int) -> tuple[pd.DataFrame, dict[str, float]]:
    rows, seconds = [], {}
    for protocol in PROTOCOLS:
        start = time.perf_counter()
        # family=None: one model per family (split, kfold); lofo makes it family="all".
        models = {MODEL: CostModel(n_estimators=trees)}
        result = evaluate(df, protocol=protocol, models=models, ks=KS)
        seconds[protocol] = time.perf_counter() - start
        print(f"{protocol}: {seconds[protocol]:.0f} s", flush=True)
        for kernel, board in result["scores"].items():
            for name, metrics in board.items():
                rows.append({"protocol": protocol, "kernel": kernel, "name": name,
                             **{m: metrics.get(m, float("nan")) for m in METRICS}})
    return pd.DataFrame(rows), seconds


def findings(table: pd.DataFrame) -> list[str]:
    """Per kernel: the model under lofo against what needs no training (roofline, random)."""
    out = []
    for kernel, rows in table[table["protocol"] == "lofo"].groupby("kernel"):
        get = {name: r.iloc[0] for name, r in rows.groupby("name")}
        if MODEL not in get:
            continue
        parts = [f"{name} {get[name]['top1']:.3f} / {get[name]['top8']:.3f}"
                 for name in ("roofline", "random") if name in get]
        out.append(f"- {kernel}, unseen family: {MODEL} top1/top8 {get[MODEL]['top1']:.3f} / "
                   f"{get[MODEL]['top8']:.3f} vs " + ", ".join(parts) + ".")
    return out


def plot(table: pd.DataFrame, path: Path) -> None:
    kernels = sorted(table["kernel"].unique())
    fig, axes = kernel_panels(kernels)
    colors = {"split": "black", "kfold": "tab:blue", "lofo": "tab:red"}
    for ax, kernel in zip(axes, kernels):
        rows = table[table["kernel"] == kernel]
        for protocol, color in colors.items():
            r = rows[(rows["protocol"] == protocol) & (rows["name"] == MODEL)]
            if len(r):
                ax.plot(KS, [r[f"top{k}"].iloc[0] for k in KS], marker="o", color=color,
                        linewidth=2, label=f"{MODEL}, {protocol}")
        for name, style in (("roofline", "--"), ("random", ":")):
            r = rows[(rows["protocol"] == "kfold") & (rows["name"] == name)]
            if len(r):
                ax.plot(KS, [r[f"top{k}"].iloc[0] for k in KS], color="gray", linestyle=style,
                        label=f"{name} (all workloads)")
        topk_panel(ax, kernel, "k (configs measured)")
    axes[0].set_ylabel("top-k score")
    save_panels(fig, path, *axes[0].get_legend_handles_labels(), ncol=3, bottom=0.12)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--trees", type=int, default=300, help="XGBoost rounds per model")
    args = ap.parse_args()
    df = harness.load_dataset(args.dataset)
    table, seconds = run(df, trees=args.trees)
    harness.RESULTS.mkdir(parents=True, exist_ok=True)
    plot(table, harness.RESULTS / "transfer.png")
    ours = table[table["name"] == MODEL].pivot(index="kernel", columns="protocol")
    head = pd.DataFrame({f"{m} {p}": ours[(m, p)] for m in ("top1", "top8", "worst8")
                         for p in PROTOCOLS}).reset_index()
    md = ["# Transfer: unseen shapes and unseen kernel families", "",
          harness.provenance(dataset=args.dataset, n_rows=len(df)),
          f"- Measured: TenSet top-k score of `{MODEL}` (rank:pairwise, static features, "
          f"{args.trees} trees) under three protocols of `costtune.evaluate.protocols`: "
          + "; ".join(f"`{p}` = {d}" for p, d in PROTOCOLS.items())
          + ". `split` scores the test suite only; `kfold` and `lofo` score every workload "
          "(train and test suites), each by a model that never saw its shape (kfold) or its "
          "family (lofo). Per-family models for split/kfold; lofo trains one booster on the "
          "other two families (the family one-hot it meets at test time was never set in "
          "training). The best static list cannot move configs across families and is left "
          "out of lofo. Runtimes: " + ", ".join(f"{p} {s:.0f} s" for p, s in seconds.items())
          + ". Not measured: anything on a GPU.", "",
          f"## `{MODEL}` by protocol", "", harness.md_table(head, floatfmt=".3f"), "",
          "Unseen family against the training-free rankers (scored on the same workloads):",
          "", *findings(table), ""]
    for protocol, what in PROTOCOLS.items():
        part = table[table["protocol"] == protocol].drop(columns="protocol")
        md += [f"## {protocol}: {what}", "", harness.md_table(part, floatfmt=".3f"), ""]
    md += ["![transfer](transfer.png)", ""]
    harness.write_report("transfer", md, table)
    print("\n".join(md))


if __name__ == "__main__":
    main()
