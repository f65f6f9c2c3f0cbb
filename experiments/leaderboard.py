"""Research question 1: how good is the cost model against the baselines on unseen shapes?

Scores the shipped model (``costtune/models/h200``, trained on the train suite only) and every
baseline on the test suite with ``costtune.evaluate.leaderboard`` (TenSet top-k score), checks the
issue's goals per kernel and lists the workloads where the model does worst. Writes
experiments/results/leaderboard.{md,csv,png} and leaderboard_workloads.csv.

    python -m experiments.leaderboard [--dataset datasets/h200] [--model h200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from costtune.evaluate import leaderboard, plot_topk, topk_table
from costtune.model import CostModel, attach_features
from experiments import harness

KS = (1, 2, 4, 8, 16)
# The goals for the shipped model, per kernel family.
GOALS = (("top8", 0.99), ("top4", 0.97), ("top1", 0.93), ("worst8", 0.95))
TIE = 5e-4  # scores are printed to 3 decimals: closer than this is a tie, not a loss


def is_baseline(name: str) -> bool:
    """Baselines are the fixed lists, roofline and random; ``xgb:*`` are model ablations."""
    return name != "costtune" and not name.startswith("xgb:")


def board_frame(board: dict) -> pd.DataFrame:
    rows = [{"kernel": kernel, "name": name, **metrics}
            for kernel, names in board.items() for name, metrics in names.items()]
    return pd.DataFrame(rows)


def goal_lines(board: dict) -> list[str]:
    out = []
    for kernel in sorted(board):
        ours = board[kernel]["costtune"]
        checks = [f"{metric} {ours[metric]:.3f} {'≥' if ours[metric] >= bar else '<'} {bar} "
                  f"({'met' if ours[metric] >= bar else '**not met**'})"
                  for metric, bar in GOALS]
        below, ties = [], []
        for name, metrics in board[kernel].items():
            if not is_baseline(name):
                continue
            for k in KS:
                gap = ours[f"top{k}"] - metrics[f"top{k}"]
                if gap < -TIE:
                    below.append(f"{name} at k={k} ({ours[f'top{k}']:.3f} vs "
                                 f"{metrics[f'top{k}']:.3f})")
                elif gap <= TIE:
                    ties.append(f"{name}@{k}")
        above = ("met" if not below else "**not met**: below " + "; ".join(below))
        if ties:
            above += f" (ties within {TIE}: {', '.join(ties)})"
        out.append(f"- **{kernel}**: " + "; ".join(checks) + f"; above every baseline at "
                   f"every k: {above}.")
    return out


def per_workload(models: dict[str, CostModel], test: pd.DataFrame) -> pd.DataFrame:
    """Per test workload: the shipped model's L(k) and score at each k."""
    test = attach_features(test.reset_index(drop=True))
    rankings = {w: idx[models[test["kernel"].iloc[idx[0]]].rank(test.iloc[idx])]
                for w, idx in test.groupby("workload", sort=False).indices.items()}
    return topk_table(test, rankings, ks=KS)


def describe(model: CostModel) -> str:
    scope = "all families" if model.family == "all" else f"{model.family} only"
    return (f"{model.objective}, {model.features} features, {model.n_estimators} trees, "
            f"trained on {scope} ({model.n_train_workloads_} train-suite workloads)")


def worst_lines(table: pd.DataFrame, *, n: int = 3) -> list[str]:
    out = []
    for kernel, group in table.groupby("kernel"):
        for k in (1, 8):
            worst = group.nsmallest(n, f"score{k}")
            items = ", ".join(f"`{r.workload}` {getattr(r, f'score{k}'):.3f}"
                              for r in worst.itertuples())
            out.append(f"- {kernel}, k={k}: {items}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--model", default="h200", help="shipped model name or saved model path")
    args = ap.parse_args()
    df = harness.load_dataset(args.dataset)
    # In-distribution board: the families' original kernels (the shipped model trained on their
    # train suites among others); other implementations are scored in loio.md.
    df = df[df["implementation"] == df["kernel"]].reset_index(drop=True)
    models = {k: CostModel.load_for(args.model, k)[0] for k in sorted(df["kernel"].unique())}
    board = leaderboard(df, model=args.model, ks=KS)
    frame = board_frame(board)
    table = per_workload(models, df[df["suite"] == "test"])
    harness.RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(harness.RESULTS / "leaderboard_workloads.csv", index=False)
    plot_topk(board, harness.RESULTS / "leaderboard.png")
    n_test = df[df["suite"] == "test"].groupby("kernel")["workload"].nunique()
    md = ["# Leaderboard: cost model vs baselines on the test suite", "",
          "Rows: the families' original implementations (gemm, softmax, attention); how the "
          "model ranks implementations it never trained on is in loio.md.", "",
          harness.provenance(dataset=args.dataset, n_rows=len(df)),
          "- Measured: TenSet top-k score Σ L* / Σ L(k) over the test-suite workloads "
          f"({', '.join(f'{k} {v}' for k, v in n_test.items())}), L from the dataset's GPU "
          "times; worst8 is the lowest per-workload L*/L(8). Not measured here: autotune wall "
          "time (see pareto.md, prune_vs_exhaustive.md) — this is ranking quality only.",
          "", f"Names: `costtune` is the shipped model `{args.model}` as the pruning hook loads "
          "it (`CostModel.load_for(name, family)`: the family's own booster when one ships, "
          "else the cross-family one; which ships was chosen by cross-validation on the train "
          "suite, experiments/results/model_selection.md). Per family: "
          + "; ".join(f"{k}: {describe(m)}" for k, m in models.items())
          + ". `xgb:static` is a per-family model (rank:pairwise, 300 trees) trained in this "
          "run; the rest are baselines: Triton tutorial lists "
          "(GEMM), best static list fitted on the train suite (`:skip` skips configs absent "
          "from a workload's space instead of wasting the slot), analytical roofline, and the "
          "exact expectation of random picks.", ""]
    for kernel in sorted(board):
        part = frame[frame["kernel"] == kernel].drop(columns="kernel")
        md += [f"## {kernel}", "", harness.md_table(part, floatfmt=".3f"), ""]
    md += ["## Goals (issue), shipped model", "", *goal_lines(board), "",
           "Timing noise: differences between configs below ~2% are within noise for most "
           "rows (DATASHEET, second pass vs first: median 0.4%, p90 1.7%).", "",
           "## Where the shipped model does worst (per-workload L*/L(k))", "",
           *worst_lines(table), "", "![top-k vs k](leaderboard.png)", ""]
    harness.write_report("leaderboard", md, frame)
    print("\n".join(md))


if __name__ == "__main__":
    main()
