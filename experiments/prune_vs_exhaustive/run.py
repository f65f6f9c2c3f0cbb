"""Run step (GPU): measure the planned runs, one fresh process each; raw results only.

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 -m experiments.prune_vs_exhaustive.run \\
        --out $OUT/prune [--resume] [--deadline-s 560] [--no-retime] [plan flags]
    PYTHONPATH=. python3 -m experiments.prune_vs_exhaustive.run --retime-only --out DIR

Appends every finished run to ``<out>/runs.jsonl`` (a call cut short keeps each finished run;
``--resume`` skips the runs already there), then re-times each shape's chosen configs side by
side in one process, appending to ``<out>/retimes.jsonl``. It never starts over an existing
``runs.jsonl`` unless told (``--resume`` or ``--fresh``). Build the report with
``python -m experiments.prune_vs_exhaustive.report --raw <out>``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments import harness
from experiments.prune_vs_exhaustive.plan import (
    EST_RETIME_S,
    RAW,
    Run,
    add_plan_args,
    load_log,
    make_plan,
    print_plan,
    run_id,
    select,
)

MODULE = "experiments.prune_vs_exhaustive.run"


def child_env(**extra: str) -> dict[str, str]:
    """Environment of a child run: this checkout importable, compiling for the GPU (never the
    interpreter), plus ``extra``."""
    env = {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(harness.ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TRITON_INTERPRET", None)
    return env


def child(args: list[str], *, env: dict[str, str], timeout_s: float
          ) -> tuple[dict[str, Any] | None, str]:
    """Run this module with ``args`` in a fresh process; (its RESULT record or None, why)."""
    res = subprocess.run([sys.executable, "-m", MODULE, *args], env=env, cwd=harness.ROOT,
                         capture_output=True, text=True, timeout=timeout_s)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    if res.returncode != 0 or not lines:
        return None, (res.stderr or res.stdout)[-800:]
    return json.loads(lines[-1][len("RESULT "):]), ""


def run_in_subprocess(run: Run, args: argparse.Namespace, *, timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ct-prune-") as tmp:
        env = child_env(TRITON_CACHE_DIR=f"{tmp}/triton", COSTTUNE_CACHE=f"{tmp}/features")
        cmd = ["--run-one", json.dumps(asdict(run)), "--model", args.model,
               "--reps", str(args.reps)]
        if args.stage2_model:
            cmd += ["--stage2-model", args.stage2_model]
        start = time.perf_counter()
        try:
            res, why = child(cmd, env=env, timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "process_s": time.perf_counter() - start}
        out = {"process_s": time.perf_counter() - start}
        if res is None:
            return {**out, "status": "failed", "error": why}
        return {**out, "status": "ok", **res}


def retime_specs(results: list[tuple[Run, dict]]) -> list[dict[str, Any]]:
    """One spec per shape that has an exhaustive run: every distinct config chosen there."""
    by_shape: dict[tuple, dict[str, Any]] = {}
    for run, res in results:
        if res.get("status") != "ok":
            continue
        spec = by_shape.setdefault(run_id(run)[:2] + (run.dtype,), {
            "family": run.family, "problem": run.problem, "dtype": run.dtype,
            "configs": set(), "exhaustive": False})
        spec["configs"].add(res["chosen"])
        spec["exhaustive"] |= run.method == "exhaustive"
    return [{**spec, "configs": sorted(spec["configs"])} for spec in by_shape.values()
            if spec["exhaustive"] and len(spec["configs"]) > 1]


def retime_key(spec: dict[str, Any]) -> str:
    return json.dumps([spec["family"], spec["problem"], spec["dtype"], spec["configs"]],
                      sort_keys=True)


def load_retimes(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_retimes(results: list[tuple[Run, dict]], args: argparse.Namespace, *,
                deadline: float) -> None:
    """Re-time each shape's chosen configs side by side (one process per shape), appending to
    retimes.jsonl; shapes whose chosen set was already re-timed are kept."""
    path = args.out / "retimes.jsonl"
    done = {retime_key(rec["spec"]) for rec in load_retimes(path)}
    for spec in retime_specs(results):
        name = f"retime {spec['family']} {spec['problem']}"
        if retime_key(spec) in done:
            continue
        if time.perf_counter() + EST_RETIME_S > deadline:
            print(f"{name}: skipped, deadline")
            continue
        cmd = ["--retime-one", json.dumps(spec), "--reps", str(args.reps),
               "--rounds", str(args.rounds)]
        try:
            out, why = child(cmd, env=child_env(),
                             timeout_s=max(30.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            print(f"{name}: timeout")
            continue
        if out is None:
            print(f"{name}: failed {why[-400:]}")
            continue
        with path.open("a") as f:
            f.write(json.dumps({"spec": spec, "result": out}, default=str) + "\n")
        print(f"{name}: " + ", ".join(f"{k} {v * 1e3:.2f} us"
                                      for k, v in out["kernel_ms"].items()), flush=True)


def parse(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_plan_args(ap)
    ap.add_argument("--out", type=Path, default=RAW, help="folder of runs.jsonl/retimes.jsonl")
    ap.add_argument("--deadline-s", type=float, default=560.0,
                    help="no run may end later than this")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in the log")
    ap.add_argument("--fresh", action="store_true", help="start a new runs.jsonl")
    ap.add_argument("--reps", type=int, default=20, help="graph replays for final timings")
    ap.add_argument("--rounds", type=int, default=5,
                    help="interleaved passes of the same-process re-timing")
    ap.add_argument("--no-retime", action="store_true",
                    help="skip re-timing each shape's chosen configs side by side")
    ap.add_argument("--retime-only", action="store_true",
                    help="only re-time the chosen configs of the runs in the log")
    ap.add_argument("--run-one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--retime-one", default=None, help=argparse.SUPPRESS)
    return ap, ap.parse_args(argv)


def child_main(args: argparse.Namespace) -> int:
    """The child process: one run or one re-timing, printed as a RESULT line."""
    from experiments.prune_vs_exhaustive import tuning

    if args.retime_one:
        out = tuning.retime_one(json.loads(args.retime_one), reps=args.reps, rounds=args.rounds)
    else:
        out = tuning.run_one(Run(**json.loads(args.run_one)), model=args.model,
                             stage2_model=args.stage2_model, reps=args.reps)
    print("RESULT " + json.dumps(out, default=str), flush=True)
    return 0


def measure(chosen: list[Run], args: argparse.Namespace, log: Path) -> list[tuple[Run, dict]]:
    """Each planned run in a fresh process, appended to ``log`` as it finishes."""
    results, start = [], time.perf_counter()
    for run in chosen:
        left = args.deadline_s - (time.perf_counter() - start)
        if run.est_s > left:
            print(f"skip {run.family} {run.problem} {run.label}: deadline reached")
            continue
        res = run_in_subprocess(run, args, timeout_s=min(max(90.0, 4 * run.est_s), left))
        results.append((run, res))
        print(f"{run.family} {run.problem} {run.label}: {res['status']}, tune "
              f"{res.get('tune_s', math.nan):.1f} s (est {run.est_s:.0f}), "
              f"{res.get('n_benchmarked')} benchmarked, kernel {res.get('kernel_ms')} ms "
              f"{res.get('error', '')}", flush=True)
        with log.open("a") as f:  # a call cut short keeps every finished run
            f.write(json.dumps({"run": asdict(run), "result": res}, default=str) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    ap, args = parse(argv)
    if args.run_one or args.retime_one:
        return child_main(args)
    import torch

    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU (the plan step shows what it would run)")
    log = args.out / "runs.jsonl"
    start = time.perf_counter()
    if args.retime_only:
        done = [(r, res) for r, res in load_log(log) if res.get("status") == "ok"]
        run_retimes(done, args, deadline=start + args.deadline_s)
        return 0
    if log.exists() and not (args.resume or args.fresh):
        ap.error(f"{log} exists: --resume to add to it, --fresh to start over")
    if args.fresh:
        log.unlink(missing_ok=True)
    runs, dropped, note = make_plan(ap, args, require_model=True)
    done = [(r, res) for r, res in load_log(log) if res.get("status") == "ok"]
    done_ids = {run_id(r) for r, _ in done}
    if done:
        print(f"resuming: {len(done_ids)} runs already in {log}")
    chosen, over = select([r for r in runs if run_id(r) not in done_ids], args.budget_s)
    print_plan(chosen, dropped + over, budget_s=args.budget_s, note=note)
    args.out.mkdir(parents=True, exist_ok=True)
    results = done + measure(chosen, args, log)
    if not args.no_retime:
        run_retimes(results, args, deadline=start + args.deadline_s)
    print(f"raw results in {log}; report: python -m experiments.prune_vs_exhaustive.report "
          f"--raw {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
