"""Report step (CPU): results/dask_scaling.{md,csv} from every experiment's raw files.

    python -m experiments.dask_scaling.report [--raw experiments/results/raw/dask_scaling]
        [--out experiments/results]

Each experiment folder under --raw (see experiments/dask_scaling/__init__.py) becomes one
section: the runs' collection seconds and speed-up from runs.jsonl, and agreement, noise and
the wall-time split recomputed from the rows_<run>.parquet files. Experiments of the first
sessions kept no rows: their agreement figures are the ones their report recorded
(experiment.json "recorded", report_as_written.md), marked as such. The .md opens with one
summary table; the .csv holds every experiment's per-workload agreement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from experiments import harness
from experiments.dask_scaling.analysis import agreement, own_noise, wall_split
from experiments.dask_scaling.plan import QUESTION, RAW
from experiments.dask_scaling.text import section_lines

CITED_RETIME_P90 = 0.017  # DATASHEET.md, "Noise": second pass vs first, p90
GOAL = 1.8
CSV_META = ("gpu", "costtune_commit", "date")


def load_runs(folder: Path) -> list[dict[str, Any]]:
    path = folder / "runs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rows_of(folder: Path, run: dict[str, Any]) -> pd.DataFrame | None:
    name = run.get("rows")
    return pd.read_parquet(folder / name) if name and (folder / name).exists() else None


def analyse(folder: Path) -> dict[str, Any] | None:
    """Everything one experiment's section and summary row need; None without two runs."""
    exp = json.loads((folder / "experiment.json").read_text())
    runs = load_runs(folder)
    if len(runs) < 2:
        return None
    rows = {r["label"]: rows_of(folder, r) for r in runs}
    first, many = runs[0]["label"], runs[1]["label"]
    fx: dict[str, Any] = {"exp": exp, "runs": runs, "folder": folder, "probe": None,
                          "recorded": rows[first] is None or rows[many] is None}
    if (folder / "cpu_probe.csv").exists():
        fx["probe"] = pd.read_csv(folder / "cpu_probe.csv")
    if fx["recorded"]:  # an early experiment: only its report's figures were kept
        rec, csv = exp["recorded"], folder / "report_as_written.csv"
        per = pd.read_csv(csv) if csv.exists() else None  # the log-only ones kept no CSV
        if per is not None:
            per = per[[c for c in per if c not in ("dry_run", "n_gpus", *CSV_META)]]
        fx.update(per=per, best=rec["best"], stats=rec["stats"], between=rec.get("between"),
                  other_order=rec.get("other_order"),
                  split={k: {**dict.fromkeys(SPLIT_KEYS, float("nan")), **v}
                         for k, v in rec["split"].items()}, noise=(pd.DataFrame(), {}))
        return fx
    fx["per"], fx["stats"] = agreement(rows[first], rows[many])
    fx["split"] = {r["label"]: wall_split(rows[r["label"]]) for r in runs[:2]}
    fx["between"] = (agreement(rows[first], rows["1gpu_b"])[1]
                     if rows.get("1gpu_b") is not None else None)
    fx["other_order"] = (agreement(rows[first], rows["1gpu_shuffled"])[1]
                         if rows.get("1gpu_shuffled") is not None else None)
    fx["noise"] = own_noise({k: v for k, v in rows.items() if v is not None})
    return fx


SPLIT_KEYS = ("task", "setup", "compile", "measure", "retime", "env", "clock", "other")


def speedup(fx: dict[str, Any]) -> tuple[float, float, float]:
    """(1-GPU collection s, N-GPU collection s, speed-up); collection = summary seconds less
    the cluster start."""
    s1, sn = fx["runs"][0]["summary"], fx["runs"][1]["summary"]
    t1, tn = s1["seconds"] - s1["startup_s"], sn["seconds"] - sn["startup_s"]
    return t1, tn, t1 / tn if tn else float("nan")


def summary_row(fx: dict[str, Any]) -> dict[str, Any]:
    exp, (r1, rn) = fx["exp"], fx["runs"][:2]
    t1, tn, up = speedup(fx)
    a = exp["args"]
    cpu = (f"fixed, {rn['meta'].get('compile_workers')} per GPU" if a["cpu_per_gpu"] == "fixed"
           else f"shared ({r1['meta'].get('compile_workers')} / "
                f"{rn['meta'].get('compile_workers')})")
    pct = lambda d: f"{d['p90_abs_dev_rel']:.2%}" if d else ""  # noqa: E731
    return {"experiment": exp["name"], "commit": (rn["meta"].get("costtune_commit") or "?")[:7],
            "triton cache": a["triton_cache"], "compile processes": cpu,
            "runs": ", ".join(r["label"] for r in fx["runs"]),
            "1 GPU s": round(t1, 1), f"{rn['n_gpus']} GPUs s": round(tn, 1),
            "speed-up": f"{up:.2f}x", f"goal >= {GOAL}x": "met" if up >= GOAL else "NOT met",
            "p90 vs 1 GPU (ref op)": pct(fx["stats"]),
            "p90 1 GPU again": pct(fx["between"]),
            "p90 1 GPU shuffled": pct(fx["other_order"]),
            "own noise": ", ".join(f"{k} {v:.2%}" for k, v in fx["noise"][1].items()),
            "rows": "recorded figures" if fx["recorded"] else "recomputed from rows"}


def dataset_retime_p90() -> float | None:
    if not harness.DATASET.exists():
        return None
    df = harness.load_dataset()
    ok = df[(df["status"] == "ok") & df["retime_ms"].notna()]
    return float((ok["retime_ms"] / ok["time_ms"] - 1).abs().quantile(0.9))


def per_workload(fx: dict[str, Any]) -> pd.DataFrame | None:
    """The experiment's per-workload agreement with the columns the old per-run CSVs had."""
    meta, exp = fx["runs"][1]["meta"], fx["exp"]
    if fx["per"] is None:
        return None
    return fx["per"].assign(dry_run=exp["args"]["dry_run"], n_gpus=exp["args"]["gpus"],
                            **{k: meta.get(k) for k in CSV_META}).assign(
        experiment=exp["name"])


def build(raw: Path) -> tuple[list[str], pd.DataFrame]:
    folders = sorted(p for p in raw.iterdir() if (p / "experiment.json").exists())
    found = [fx for fx in map(analyse, folders) if fx is not None]
    if not found:
        raise SystemExit(f"dask_scaling report: no experiment with two runs under {raw}")
    noise = dataset_retime_p90()
    noise = CITED_RETIME_P90 if noise is None else noise
    lines = [f"# Dask collection: 1 vs N GPUs ({len(found)} experiments)", "",
             harness.provenance(), "",
             f"- Raw files: `{harness.relative(raw)}/<experiment>/` (experiment.json, "
             "runs.jsonl, rows_<run>.parquet, cpu_probe.csv; device logs in results/logs/"
             "dask_*.log). Collection s = the run's collect_dask seconds less the cluster "
             f"start; goal >= {GOAL}x on 2 GPUs. p90 columns: |t_run / t_first 1-GPU run - 1| "
             f"over each run's reference op, 90th percentile over configs (the dataset's own "
             f"second-pass p90 is {noise:.2%}).", "",
             harness.md_table(pd.DataFrame([summary_row(fx) for fx in found])), "",
             "Idle worker s: collection s x GPUs - sum task wall (scheduling, stragglers at the "
             "end, a worker's first-task imports are inside its task). Sum task wall: per "
             "workload, the whole task on its worker, split into: setup (inputs, reference "
             "output), compile (waiting for its configs to compile), measure (timing them), "
             "re-time (the second pass over 5% of them), env reads (versions, git, driver), "
             "clock wait (nvidia-smi SM clock reads not hidden behind work) and the rest (task "
             "start, CUDA init on a worker's first task, returning rows). A GPU worker does one "
             "part after the other, so with compiles bound by the CPU, more GPUs help only as "
             "far as the CPU scales.", ""]
    for fx in found:
        lines += section_lines(fx, speedup(fx), noise=noise, cited=CITED_RETIME_P90, goal=GOAL)
    table = pd.concat([per_workload(fx) for fx in found], ignore_index=True)
    return lines, table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", type=Path, default=RAW, help="parent folder of the experiments")
    ap.add_argument("--out", type=Path, default=harness.RESULTS)
    args = ap.parse_args(argv)
    lines, table = build(args.raw)
    md = harness.write_report(QUESTION, lines, table, out=args.out)
    print(f"wrote {md} and .csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
