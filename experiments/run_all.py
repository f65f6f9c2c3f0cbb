"""Regenerate every CPU-computable result with one command.

Runs each CPU experiment, and the report step of each GPU experiment (which rebuilds its .md/.csv
from the raw files under results/raw/), in its own process, one after another (they time things
and share the cores with nothing else of ours), and writes experiments/results/run_all.{md,csv}:
status and runtime per step. The GPU experiments' run steps are listed, not run. Exit status 1
if any step failed.

    python experiments/run_all.py [--only NAME ...] [--skip NAME ...] [--list]

(``python -m experiments.run_all`` works the same; NAME is a step's name in ``--list``.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # started as a file: make the `experiments` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from experiments import harness  # noqa: E402

# (name, module and arguments, what it answers, results it writes), in run order; the
# prune_vs_exhaustive report comes before pareto, which reads its CSV.
CPU = [
    ("dataset_summary", ["dataset_summary"], "dataset coverage, noise, collection cost",
     "dataset_summary"),
    ("kernels_vs_torch", ["kernels_vs_torch"], "best config of each space vs the torch op",
     "kernels_h200"),
    ("model_selection", ["model_selection"], "which cost model ships (CV on the train suite)",
     "model_selection"),
    ("leaderboard", ["leaderboard"], "(1) cost model vs baselines on the test suite",
     "leaderboard"),
    ("diverse_topk", ["diverse_topk"], "score order vs tile-diverse top-k orders (train CV)",
     "diverse_topk"),
    ("static_vs_compiled", ["static_vs_compiled"], "(2) static vs static+compiled features",
     "static_vs_compiled"),
    ("sample_efficiency", ["sample_efficiency"], "(3) top-k score vs number of training shapes",
     "sample_efficiency"),
    ("transfer", ["transfer"], "(4) unseen shapes (kfold) and unseen family (lofo)",
     "transfer"),
    ("loio", ["loio"], "(7) held-out implementations: feature sets, stage-2 choice",
     "loio"),
    ("in_distribution", ["in_distribution"],
     "originals' test suites, trained with or without the other implementations",
     "in_distribution"),
    ("impl_descriptor", ["impl_descriptor", "--select"],
     "stage 1 on every implementation: source features, the original's weight (train CV)",
     "impl_descriptor"),
    ("learning_curve", ["learning_curve", "--methods", "continue", "refit:1", "refit:2",
                        "refit:5", "refit:10", "refit:20"],
     "learning a held-out implementation from N harvested shapes; the refit weight; adaptive",
     "learning_curve"),
    ("learning_curve_stage2", ["learning_curve_stage2"],
     "the same with the compiled-feature model learned too (two_stage=True, learn=True)",
     "learning_curve_stage2"),
    ("prune_vs_exhaustive", ["prune_vs_exhaustive.report"],
     "GPU-measured cold autotune, pruned vs exhaustive (report from raw runs)",
     "prune_vs_exhaustive"),
    ("pareto", ["pareto"], "(5) estimated cold autotune time vs quality", "pareto"),
    ("search_strategies", ["search_strategies"], "(6) search strategies on replayed data",
     "search_strategies"),
    ("cold_tune", ["cold_tune.report"],
     "GPU-measured cold first call by phase on user kernels (report from raw runs)",
     "cold_tune"),
    ("hook_user_spaces", ["hook_user_spaces"],
     "the hook's ranking methods on user kernels timed whole (report from raw runs)",
     "hook_user_spaces"),
    ("learn_user_kernels", ["learn_user_kernels", "--seeds", "1", "--modes", "shipped", "learn"],
     "learn=True through costtune.autotune on user kernels' measured lists (replay)",
     "learn_user_kernels"),
    ("dask_scaling", ["dask_scaling.report"],
     "Dask collection scaling over GPUs (report from raw runs)", "dask_scaling"),
    ("compile_scaling", ["compile_scaling", "report"],
     "compile throughput vs pool processes on a GPU host (report from raw runs)",
     "compile_scaling"),
    ("gpu_resource_check", ["gpu_resource_check", "report"],
     "registers/spills/shared memory the GPU reports (report from the fixture)",
     "gpu_resource_check"),
    ("bench_hook_overhead", ["bench_hook_overhead"], "pruning-hook CPU overhead",
     "hook_overhead"),
    ("bench_first_prune", ["bench_first_prune"],
     "a fresh process's first pruning call, with and without preload", "first_prune"),
]
GPU_ONLY = [
    ("python -m experiments.prune_vs_exhaustive.run", "pruned vs exhaustive cold autotune"),
    ("python -m experiments.dask_scaling.run", "Dask collection on 1 and N GPUs"),
    ("python -m experiments.compile_scaling run", "compile throughput vs pool processes"),
    ("python -m experiments.gpu_resource_check run", "what the GPU reports for compiled kernels"),
    ("python experiments/device/collect_all.py run", "the H200 dataset's collection"),
    ("python experiments/device/hook_user_spaces_h200.py --out DIR",
     "user kernels timed whole, and what each ranking method keeps"),
    ("python experiments/device/hook_user_spaces_h200.py --out DIR --learn-shapes",
     "user kernels timed whole at more shapes (learn_user_kernels' data)"),
    ("bash experiments/device/call_learn_refit_h200.sh",
     "learn=True refitting across two processes on user kernels (a check)"),
]
SKIPPED = 3  # a script's exit status for "inputs missing, nothing measured"


def run_one(name: str, module: list[str]) -> tuple[str, float, str]:
    """Run ``python -m experiments.<module> [args]`` from the repository root; returns
    (status, seconds, last output line) and keeps its output in results/logs/run_all/."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(harness.ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", f"experiments.{module[0]}", *module[1:]],
                          cwd=harness.ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log = harness.LOGS / "run_all" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(proc.stdout + ("\n--- stderr ---\n" + proc.stderr if proc.stderr else ""))
    status = {0: "ok", SKIPPED: "skipped"}.get(proc.returncode, f"FAILED (rc {proc.returncode})")
    lines = [ln for ln in (proc.stderr if proc.returncode else proc.stdout).splitlines()
             if ln.strip()]
    return status, seconds, (lines[-1][:160] if lines else "")


def report(rows: list[dict], total: float) -> list[str]:
    table = pd.DataFrame(rows)
    shown = table.assign(runtime=table["seconds"].map("{:.0f} s".format),
                         results=table["results"].map("`results/{}.*`".format))[
        ["step", "question", "status", "runtime", "results"]]
    notes = [f"- {r['step']}: {r['last']}" for r in rows if r["status"] != "ok"]
    return ["# run_all: every CPU-computable result", "", harness.provenance(),
            f"- {os.cpu_count()} CPUs visible, load average at the end "
            f"{os.getloadavg()[0]:.1f}; total {total:.0f} s. Runtimes depend on the machine's "
            "load (shared cores).",
            "- Per-step output: `experiments/results/logs/run_all/<step>.log`.", "",
            harness.md_table(shown), "",
            "GPU run steps (not run here; they write raw results for the report steps above):",
            "", *[f"- `{cmd}`: {what}" for cmd, what in GPU_ONLY],
            *(["", "Not ok:", "", *notes] if notes else []), ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", default=None, help="step names to run")
    ap.add_argument("--skip", nargs="+", default=[], help="step names to leave out")
    ap.add_argument("--list", action="store_true", help="list the steps and exit")
    args = ap.parse_args(argv)
    if args.list:
        for name, module, what, _ in CPU:
            print(f"cpu  {name:22s} python -m experiments.{' '.join(module)}: {what}")
        for cmd, what in GPU_ONLY:
            print(f"gpu  {cmd}: {what} (not run here)")
        return 0
    names = {name for name, *_ in CPU}
    unknown = sorted((set(args.only or []) | set(args.skip)) - names)
    if unknown:
        ap.error(f"unknown step names {unknown}; --list shows them")
    chosen = [c for c in CPU if (args.only is None or c[0] in args.only)
              and c[0] not in args.skip]
    rows, start = [], time.perf_counter()
    for name, module, what, result in chosen:
        print(f"== {name} ...", flush=True)
        status, seconds, last = run_one(name, module)
        print(f"   {status} in {seconds:.0f} s  {last}", flush=True)
        rows.append({"step": name, "question": what, "status": status, "seconds": seconds,
                     "results": result, "last": last})
    lines = report(rows, time.perf_counter() - start)
    if args.only is None and not args.skip:
        harness.write_report("run_all", lines, pd.DataFrame(rows))
    print("\n".join(lines))
    return 1 if any(r["status"].startswith("FAILED") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
