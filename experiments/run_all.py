"""Regenerate every CPU-computable result from datasets/ with one command.

Runs each CPU experiment in its own process, one after another (they time things and share 2
cores with nothing else of ours), and writes experiments/results/run_all.md: status and
runtime per script. GPU-only experiments are listed, not run. Exit status 1 if any failed.

    python experiments/run_all.py [--only NAME ...] [--skip NAME ...] [--list]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
# (script, what it answers, results it writes), in run order.
CPU = [
    ("dataset_summary.py", "dataset coverage, noise, collection cost", "dataset_summary"),
    ("kernels_vs_torch.py", "best config of each space vs the torch op", "kernels_h200"),
    ("model_selection.py", "which cost model ships (CV on the train suite only)",
     "model_selection"),
    ("leaderboard.py", "(1) cost model vs baselines on the test suite", "leaderboard"),
    ("diverse_topk.py", "score order vs tile-diverse top-k orders (CV on the train suite)",
     "diverse_topk"),
    ("static_vs_compiled.py", "(2) static vs static+compiled features", "static_vs_compiled"),
    ("sample_efficiency.py", "(3) top-k score vs number of training shapes",
     "sample_efficiency"),
    ("transfer.py", "(4) unseen shapes (kfold) and unseen family (lofo)", "transfer"),
    ("pareto.py", "(5) estimated cold autotune time vs quality", "pareto"),
    ("search_strategies.py", "(6) search strategies on replayed data", "search_strategies"),
    ("bench_hook_overhead.py", "pruning-hook CPU overhead", "hook_overhead"),
    ("bench_first_prune.py", "a fresh process's first pruning call, with and without preload",
     "first_prune"),
]
GPU_ONLY = [
    ("prune_vs_exhaustive.py", "GPU-measured cold autotune: pruned vs exhaustive"),
    ("dask_scaling.py", "Dask collection scaling over GPUs"),
    ("compile_scaling.py", "compile throughput vs pool processes on a GPU host"),
    ("gpu_resource_check.py", "compiled features vs the GPU's own resource report"),
]
SKIPPED = 3  # a script's exit status for "inputs missing, nothing measured"


def run_one(script: str) -> tuple[str, float, str]:
    """Run a script from the repository root; returns (status, seconds, last output line)."""
    path = HERE / script
    if not path.exists():
        return "absent", 0.0, "script not in this checkout"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(path.relative_to(ROOT))], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log = RESULTS / "logs" / f"{path.stem}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(proc.stdout + ("\n--- stderr ---\n" + proc.stderr if proc.stderr else ""))
    status = {0: "ok", SKIPPED: "skipped"}.get(proc.returncode, f"FAILED (rc {proc.returncode})")
    lines = [ln for ln in (proc.stderr if proc.returncode else proc.stdout).splitlines()
             if ln.strip()]
    return status, seconds, (lines[-1][:160] if lines else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", default=None, help="script names (stem) to run")
    ap.add_argument("--skip", nargs="+", default=[], help="script names (stem) to leave out")
    ap.add_argument("--list", action="store_true", help="list the experiments and exit")
    args = ap.parse_args()
    if args.list:
        for script, what, _ in CPU:
            print(f"cpu  {script:26s} {what}{'' if (HERE / script).exists() else ' (absent)'}")
        for script, what in GPU_ONLY:
            print(f"gpu  {script:26s} {what} (not run here)")
        return
    chosen = [c for c in CPU if (args.only is None or Path(c[0]).stem in args.only)
              and Path(c[0]).stem not in args.skip]
    rows, total = [], time.perf_counter()
    for script, what, result in chosen:
        print(f"== {script} ...", flush=True)
        status, seconds, last = run_one(script)
        print(f"   {status} in {seconds:.0f} s  {last}", flush=True)
        rows.append((script, what, result, status, seconds, last))
    total = time.perf_counter() - total
    md = ["# run_all: every CPU-computable result", "",
          f"- Command: `python {' '.join(sys.argv)}` (from the repository root).",
          f"- Ran {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC} on {platform.node()} "
          f"({os.cpu_count()} CPUs visible, load average before the last script "
          f"{os.getloadavg()[0]:.1f}), Python {platform.python_version()}; total "
          f"{total:.0f} s. Runtimes depend on the machine's load (shared cores).",
          "- Per-script output: `experiments/results/logs/<script>.log`.", "",
          "| script | question | status | runtime | results |", "|---|---|---|---:|---|"]
    for script, what, result, status, seconds, _ in rows:
        md.append(f"| [{script}](../{script}) | {what} | {status} | {seconds:.0f} s | "
                  f"`results/{result}.*` |")
    md += ["", "GPU-only (not run here; need an H200 and write their own results):", ""]
    md += [f"- [{script}](../{script}): {what}" for script, what in GPU_ONLY]
    notes = [f"- {script}: {last}" for script, _, _, status, _, last in rows if status != "ok"]
    if notes:
        md += ["", "Not ok:", "", *notes]
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.only is None and not args.skip:
        (RESULTS / "run_all.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    if any(status.startswith("FAILED") for *_, status, _, _ in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
