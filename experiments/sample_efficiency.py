"""Research question 3: how many measured training shapes does the cost model need?

Per kernel family, trains on random subsets of n train-suite shapes (a shape's fp16 and bf16
workloads go together) and scores on the full test suite with ``costtune.evaluate.protocols``
(protocol "split"); the best static list is refitted on the same subsets for comparison.
Writes experiments/results/sample_efficiency.{md,csv,png}.

    python -m experiments.sample_efficiency [--sizes 4 8 16 32] [--seeds 5] [--trees 100]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

import costtune
from costtune.evaluate import evaluate
from costtune.evaluate.report import kernel_panels, save_panels, topk_panel
from costtune.model import CostModel
from experiments import harness

KS = (1, 2, 4, 8, 16)
MODEL = "xgb:static"
STATIC = "best-static-16:skip"
SHOWN = (MODEL, STATIC, "random")


def train_shapes(df: pd.DataFrame) -> dict[str, list[tuple]]:
    """Per family, the distinct train-suite problem sizes (dtype left out), sorted."""
    out = {}
    for kernel, group in df[df["suite"] == "train"].groupby("kernel"):
        keys = list(costtune.get_family(kernel).PROBLEM_KEYS)
        out[str(kernel)] = sorted(set(group[keys].astype(int).itertuples(index=False,
                                                                          name=None)))
    return out


def subset(df: pd.DataFrame, chosen: dict[str, list[tuple]]) -> pd.DataFrame:
    """The test suite plus the train rows of the chosen shapes."""
    parts = [df[df["suite"] == "test"]]
    train = df[df["suite"] == "train"]
    for kernel, shapes in chosen.items():
        keys = list(costtune.get_family(kernel).PROBLEM_KEYS)
        rows = train[train["kernel"] == kernel]
        sizes = pd.MultiIndex.from_frame(rows[keys].astype(int))
        parts.append(rows[sizes.isin(pd.MultiIndex.from_tuples(shapes, names=keys))])
    return pd.concat(parts, ignore_index=True)


def run(df: pd.DataFrame, shapes: dict[str, list[tuple]], *, sizes: list[int], seeds: int,
        trees: int) -> pd.DataFrame:
    records = []
    plan = [(n, s) for n in sizes for s in range(seeds)] + [(None, 0)]
    for n, seed in plan:
        chosen, label = {}, {}
        for kernel, all_shapes in shapes.items():
            if n is None or n >= len(all_shapes):
                chosen[kernel], label[kernel] = all_shapes, "all"
            else:
                rng = np.random.default_rng([seed, n, len(kernel)])
                pick = rng.choice(len(all_shapes), size=n, replace=False)
                chosen[kernel], label[kernel] = [all_shapes[i] for i in sorted(pick)], n
        if n is not None and all(v == "all" for v in label.values()):
            continue
        data = subset(df, chosen)
        model = CostModel(n_estimators=trees, seed=seed)
        start = time.perf_counter()
        result = evaluate(data, protocol="split", models={MODEL: model}, ks=KS, seed=seed)
        print(f"n={n} seed={seed}: {time.perf_counter() - start:.1f} s", flush=True)
        for kernel, board in result["scores"].items():
            if n is not None and label[kernel] == "all":
                continue  # this family has <= n shapes: the "all" run covers it
            for name in SHOWN:
                if name in board:
                    records.append({"kernel": kernel, "n_shapes": len(chosen[kernel]),
                                    "subset": "all" if label[kernel] == "all" else "random",
                                    "seed": seed, "name": name,
                                    **{m: board[name][m] for m in
                                       [f"top{k}" for k in KS] + ["worst8"]}})
    return pd.DataFrame(records)


def summary(records: pd.DataFrame) -> pd.DataFrame:
    def spread(s: pd.Series) -> str:
        if len(s) == 1:
            return f"{s.iloc[0]:.3f}"
        return f"{s.median():.3f} [{s.min():.3f}–{s.max():.3f}]"

    rows = records[records["name"] != "random"]
    out = (rows.groupby(["kernel", "name", "n_shapes"])
               .agg(runs=("seed", "size"), top1=("top1", spread), top4=("top4", spread),
                    top8=("top8", spread), worst8=("worst8", spread))
               .reset_index())
    return out


def plot(records: pd.DataFrame, path: Path) -> None:
    kernels = sorted(records["kernel"].unique())
    fig, axes = kernel_panels(kernels)
    styles = {(MODEL, 1): ("black", "-"), (MODEL, 8): ("tab:red", "-"),
              (STATIC, 1): ("black", "--"), (STATIC, 8): ("tab:red", "--")}
    for ax, kernel in zip(axes, kernels):
        rows = records[records["kernel"] == kernel]
        for (name, k), (color, line) in styles.items():
            g = rows[rows["name"] == name].groupby("n_shapes")[f"top{k}"]
            med, lo, hi = g.median(), g.min(), g.max()
            ax.plot(med.index, med.values, marker="o", color=color, linestyle=line,
                    label=f"{name} top{k} (median)")
            ax.fill_between(med.index, lo.values, hi.values, color=color, alpha=0.12)
        for k, color in ((1, "black"), (8, "tab:red")):
            rnd = rows[rows["name"] == "random"][f"top{k}"].median()
            ax.axhline(rnd, color=color, linestyle=":", linewidth=1,
                       label=f"random top{k} (expected)")
        topk_panel(ax, kernel, "training shapes of this family")
    axes[0].set_ylabel("top-k score on the test suite")
    save_panels(fig, path, *axes[0].get_legend_handles_labels(), ncol=3, bottom=0.14)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--seeds", type=int, default=5, help="random subsets per size")
    ap.add_argument("--trees", type=int, default=100, help="XGBoost rounds per model")
    args = ap.parse_args()
    df = harness.load_dataset(args.dataset)
    shapes = train_shapes(df)
    start = time.perf_counter()
    records = run(df, shapes, sizes=args.sizes, seeds=args.seeds, trees=args.trees)
    elapsed = time.perf_counter() - start
    harness.RESULTS.mkdir(parents=True, exist_ok=True)
    plot(records, harness.RESULTS / "sample_efficiency.png")
    table = summary(records)
    counts = ", ".join(f"{k} {len(v)}" for k, v in shapes.items())
    md = ["# Sample efficiency: top-k score vs number of training shapes", "",
          harness.provenance(dataset=args.dataset, n_rows=len(df)),
          f"- Measured: TenSet top-k score on the whole test suite of per-family `{MODEL}` "
          f"models (rank:pairwise, static features, **{args.trees} trees** — the shipped "
          "models use 150-300 (model_selection.md); fewer trees keep the "
          f"{args.seeds * len(args.sizes) + 1}×3 trainings within minutes on 2 cores) and "
          f"of `{STATIC}` refitted on the same shapes. Train shapes per family: "
          f"{counts}; sizes {args.sizes} plus all; {args.seeds} seeded random subsets per "
          "size (numpy default_rng([seed, n, family])), one run with all shapes. A shape "
          "brings its fp16 and, where measured, bf16 workload. Cells: median [min–max] "
          f"over subsets. Not measured: anything on a GPU; wall time {elapsed:.0f} s.", "",
          harness.md_table(table), "",
          "Random expectation (no training) for reference: " + "; ".join(
              f"{k} top1 {g['top1'].median():.3f}, top8 {g['top8'].median():.3f}"
              for k, g in records[records["name"] == "random"].groupby("kernel")) + ".", "",
          "![sample efficiency](sample_efficiency.png)", ""]
    harness.write_report("sample_efficiency", md, records)
    print("\n".join(md))


if __name__ == "__main__":
    main()
