"""Device driver (GPU): every planned cold run in a fresh process with fresh caches (Triton's
cache, costtune's feature cache and user folder in a new temp dir), appended to
``<out>/runs.jsonl`` as it finishes; then each shape's chosen configs re-timed side by side in
one process, appended to ``<out>/retimes.jsonl``.

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 -m experiments.cold_tune.run --out $OUT/cold_tune \\
        [--resume-from experiments/results/raw/cold_tune] [--deadline-s 540] [--cases ...]
    PYTHONPATH=. python3 -m experiments.cold_tune.run --dry-run      # the plan, no GPU

Resumable across device calls: ``--resume-from`` folders' records are copied into ``--out``
first and their runs skipped. A ``+cache`` method runs twice in one shared temp dir (the
first process fills Triton's ``cache_results`` store; the second's first call is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from experiments import harness
from experiments.cold_tune.cases import CACHED, CASES, METHODS, estimate_s, parse_method

MODULE = "experiments.cold_tune.child"


def plan(cases: list[str], *, shapes: int | list[int], done: set[tuple], cached: bool,
         methods: list[str] = METHODS) -> list[tuple[str, int, str, float]]:
    """(case, shape, method, estimated s) in priority order: every shape of a case (the
    first ``shapes``, or those listed), each with the reference first; the cache-hit pair
    after a case's first shape."""
    runs = []
    for name in cases:
        case = CASES[name]
        picks = (list(range(min(shapes, len(case.shapes)))) if isinstance(shapes, int)
                 else [i for i in shapes if i < len(case.shapes)])
        for i in picks:
            for method in methods + ([CACHED] if cached and i == picks[0] else []):
                if (name, i, method) not in done:
                    est = estimate_s(case, method) * (2 if method == CACHED else 1)
                    runs.append((name, i, method, est))
    return runs


def child_env(tmp: str) -> dict[str, str]:
    return harness.fresh_env(tmp, COSTTUNE_HOME=f"{tmp}/home")  # no learned models either


def child(args: list[str], *, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    return harness.run_child([sys.executable, "-m", MODULE, *args], env=env,
                             timeout_s=timeout_s)


def run_cold(name: str, shape: int, method: str, *, timeout_s: float) -> dict[str, Any]:
    args = ["--case", name, "--shape", str(shape), "--method", method]
    with tempfile.TemporaryDirectory(prefix="ct-cold-") as tmp:
        env = child_env(tmp)
        if method == CACHED:  # the first process fills the cache; the second is recorded
            first = child(args, env=env, timeout_s=timeout_s)
            if first["status"] != "ok":
                return {**first, "stage": "filling the cache"}
            res = child(args, env=env, timeout_s=timeout_s)
            return {**res, "filled_by": {k: first.get(k) for k in (
                "first_call_s", "n_benchmarked", "chosen", "process_s")}}
        return child(args, env=env, timeout_s=timeout_s)


def load(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def provenance() -> dict[str, Any]:
    import torch
    import triton

    import costtune
    from costtune.env import git_state

    return {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "torch": torch.__version__, "triton": triton.__version__,
            "costtune": costtune.__version__,
            "commit": (os.environ.get("COSTTUNE_COMMIT") or git_state()[0] or "?")[:7],
            # One id per device call (the call script sets it); same_call compares it.
            "call": os.environ.get("COSTTUNE_CALL") or None,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "python3 -m experiments.cold_tune.run " + " ".join(sys.argv[1:]),
            "cpus": os.cpu_count()}


def retimes(out: Path, records: list[dict[str, Any]], *, deadline: float, rounds: int,
            reps: int, env: dict[str, Any]) -> None:
    """One process per shape: every config chosen there (exhaustive's included)."""
    done = {(r["case"], r["shape_index"], tuple(r["chosen"])) for r in load(
        out / "retimes.jsonl") if r.get("status") == "ok"}
    shapes: dict[tuple, set[str]] = {}
    for r in records:
        if r.get("status") == "ok":
            shapes.setdefault((r["case"], r["shape_index"]), set()).add(r["chosen"])
    for (name, i), chosen in shapes.items():
        key = (name, i, tuple(sorted(chosen)))
        left = deadline - time.perf_counter()
        if key in done or left < 30:
            continue
        with tempfile.TemporaryDirectory(prefix="ct-retime-") as tmp:
            res = child(["--case", name, "--shape", str(i), "--retime",
                         json.dumps(sorted(chosen)), "--rounds", str(rounds),
                         "--reps", str(reps)], env=child_env(tmp), timeout_s=left)
        rec = {"case": name, "shape_index": i, "chosen": sorted(chosen), **res, "env": env}
        with (out / "retimes.jsonl").open("a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
        print(f"retime {name} {i}: {res['status']} {res.get('error', '')[-300:]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "cold")
    ap.add_argument("--resume-from", type=Path, action="append", default=[])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--shapes", type=int, default=3, help="shapes per case (the first N)")
    ap.add_argument("--only-shapes", default="", help="instead: a comma list of shape indices")
    ap.add_argument("--no-cache-pair", action="store_true")
    ap.add_argument("--rerun", action="store_true",
                    help="run the planned methods again (the report takes the latest record)")
    ap.add_argument("--methods", default=",".join(METHODS), help="in priority order")
    ap.add_argument("--deadline-s", type=float, default=540.0)
    ap.add_argument("--retime-s", type=float, default=60.0, help="kept for the re-timings")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        ap.error(f"unknown cases {unknown}; known: {sorted(CASES)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for folder in args.resume_from:  # earlier calls' records, kept once each
        for name in ("runs.jsonl", "retimes.jsonl"):
            have = {json.dumps(r, sort_keys=True) for r in load(args.out / name)}
            new = [r for r in load(folder / name) if json.dumps(r, sort_keys=True) not in have]
            with (args.out / name).open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in new)
    records = load(args.out / "runs.jsonl")
    done = {(r["case"], r["shape_index"], r["method"]) for r in records
            if r.get("status") == "ok" and not args.rerun}
    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        parse_method(m)  # a one-line error for a bad name
    shapes = ([int(i) for i in args.only_shapes.split(",") if i] if args.only_shapes
              else args.shapes)
    todo = plan(cases, shapes=shapes, done=done, cached=not args.no_cache_pair,
                methods=methods)
    print(f"plan: {len(todo)} runs, ~{sum(e for *_, e in todo):.0f} s; "
          f"deadline {args.deadline_s:.0f} s")
    for name, i, method, est in todo:
        print(f"  {name:22s} {i} {method:26s} ~{est:5.0f} s")
    if args.dry_run:
        return 0
    env = provenance()
    deadline = start + args.deadline_s
    for name, i, method, est in todo:
        left = deadline - args.retime_s - time.perf_counter()
        if est > left:
            print(f"skip {name} {i} {method}: ~{est:.0f} s, {left:.0f} s left", flush=True)
            continue
        res = run_cold(name, i, method, timeout_s=max(30.0, left))
        rec = {"case": name, "shape_index": i, "method": method, **res, "env": env}
        with (args.out / "runs.jsonl").open("a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
        records.append(rec)
        print(f"{name} {i} {method}: {res['status']} " + (
            f"first call {res['first_call_s']:.2f} s, benchmarked {res['n_benchmarked']}, "
            f"process {res['process_s']:.1f} s" if res["status"] == "ok"
            else res.get("error", "")[-400:]), flush=True)
    retimes(args.out, records, deadline=deadline, rounds=args.rounds, reps=args.reps, env=env)
    print(f"wall {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
