"""Summary of the measured dataset: coverage, timing noise, collection cost.

Writes experiments/results/dataset_summary.{md,csv}; the figures quoted in
datasets/h200/DATASHEET.md come from here.

    python -m experiments.dataset_summary [--dataset datasets/h200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

import costtune
from experiments import harness

# The sizes each family tiles over (where a non-multiple of 16 means masking).
TILED = {"gemm": ["M", "N", "K"], "softmax": ["cols"], "attention": ["S"]}


def coverage(df: pd.DataFrame) -> pd.DataFrame:
    return (df.groupby(["kernel", "suite", "dtype"])
              .agg(workloads=("workload", "nunique"), rows=("config", "size"),
                   ok=("status", lambda s: int((s == "ok").sum())))
              .reset_index())


def noise(df: pd.DataFrame) -> pd.DataFrame:
    """Spread between the first timing and a second pass (random ~5% of OK rows), and the
    p20-p80 spread of the 10 reps inside one timing."""
    ok = df[df["status"] == "ok"]
    re = ok[ok["retime_ms"].notna()]
    rel = (re["retime_ms"] / re["time_ms"] - 1).abs()
    within = (ok["time_p80_ms"] - ok["time_p20_ms"]) / ok["time_ms"]
    rows = []
    for name, s in (("second pass |retime/time - 1|", rel), ("p80-p20 within a timing", within)):
        q = s.quantile([0.5, 0.9, 0.99])
        rows.append({"measure": name, "n": len(s), "median": q[0.5], "p90": q[0.9],
                     "p99": q[0.99], "max": s.max()})
    return pd.DataFrame(rows)


def cost(df: pd.DataFrame) -> pd.DataFrame:
    per_w = df.groupby(["kernel", "workload"]).agg(
        configs=("config", "size"), wall_s=("workload_wall_s", "first"),
        compile_wall_s=("workload_compile_wall_s", "first"))
    per_w["configs_per_s"] = per_w["configs"] / per_w["wall_s"]
    return per_w.groupby("kernel").agg(
        workloads=("configs", "size"), configs=("configs", "sum"),
        gpu_worker_s=("wall_s", "sum"), compile_wall_s=("compile_wall_s", "sum"),
        median_workload_s=("wall_s", "median"), max_workload_s=("wall_s", "max"),
        median_configs_per_s=("configs_per_s", "median")).reset_index()


def shapes(df: pd.DataFrame) -> str:
    out = []
    for kernel, g in df.groupby("kernel"):
        keys = list(costtune.get_family(kernel).PROBLEM_KEYS)
        w = g.drop_duplicates("workload")
        desc = ", ".join(f"{k} {int(w[k].min())}–{int(w[k].max())}" for k in keys)
        tiled = TILED[kernel]
        odd = int((w[tiled] % 16 != 0).any(axis=1).sum())
        out.append(f"- {kernel}: {w['workload'].nunique()} workloads; {desc}; "
                   f"{odd} with a tiled size ({', '.join(tiled)}) not a multiple of 16")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    args = ap.parse_args()
    df = harness.load_dataset(args.dataset)
    cov, noi, cst = coverage(df), noise(df), cost(df)
    md = ["# Dataset summary", "", harness.provenance(dataset=args.dataset, n_rows=len(df)),
          "", "## Coverage", "", harness.md_table(cov), "", "## Shapes", "", shapes(df), "",
          "## Timing noise (relative)", "", harness.md_table(noi, floatfmt=".4f"), "",
          "## Collection cost", "",
          "GPU-worker seconds per kernel (two H200s ran in parallel, so wall time was about "
          "half); compile wall is the parallel precompile inside each workload.", "",
          harness.md_table(cst, floatfmt=".1f"), ""]
    harness.write_report("dataset_summary", md, cov)
    print("\n".join(md))


if __name__ == "__main__":
    main()
