"""How does compiling scale with processes on this host? The collector's precompile of one
workload's configs with P = 8, 16, 32, ... pool processes, each with a fresh Triton cache.

A GPU worker of the Dask collection waits for its workload's compiles; whether two GPU workers,
each with its own pool, compile twice as fast as one depends on the host's cores (hyperthreads
share a core). Three steps (run needs a GPU host: the pool workers bind Triton's CUDA driver):

    python -m experiments.compile_scaling plan [--procs 8,16,32] [--configs 96]      # CPU
    PYTHONPATH=. python3 -m experiments.compile_scaling run --procs 8,16,32 [--name NAME] \\
        [--out DIR]                                                                  # GPU
    python -m experiments.compile_scaling report [--raw DIR]                         # CPU

``run`` appends one line per pool size to ``<out>/runs.jsonl`` (default
results/raw/compile_scaling/) as soon as it is measured; started again with the same
``--name`` it skips the pool sizes already there. ``report`` rebuilds
results/compile_scaling.{md,csv} from every experiment in runs.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

import costtune
from experiments import harness

QUESTION = "compile_scaling"
RAW = harness.raw_dir(QUESTION)
WORKLOAD = ("gemm", {"M": 512, "N": 4608, "K": 3584}, "float16")


def sample(configs: int, procs: list[int]) -> tuple[costtune.Workload, list, list]:
    """The workload, the ``configs`` configs timed at every pool size, and the configs that
    warm each pool up first (one per process, never timed)."""
    workload = costtune.Workload(*WORKLOAD)
    space = costtune.get_family(workload.kernel).config_space(workload.sizes)
    picked = space.sample(configs + max(procs), seed=0)
    return workload, picked[:configs], picked[configs:]


def plan(args: argparse.Namespace) -> int:
    workload, measured, warm = sample(args.configs, args.procs)
    print(f"plan: {workload.id}, {len(measured)} configs compiled at each pool size "
          f"{args.procs} (fresh Triton cache each), after {max(args.procs)} warm-up configs "
          f"(one per process); this host: {len(os.sched_getaffinity(0))} usable CPUs")
    return 0


def done(path: Path, name: str) -> set[int]:
    if not path.exists():
        return set()
    return {r["processes"] for r in map(json.loads, path.read_text().splitlines())
            if r["experiment"] == name}


def run(args: argparse.Namespace) -> int:
    import torch

    from costtune.build.pool import shutdown_pool
    from costtune.build.workload import precompile
    from costtune.env import cpu_topology

    if not torch.cuda.is_available():
        raise SystemExit("compile_scaling run: needs a CUDA GPU (pool workers compile through "
                         "Triton's CUDA driver); the plan step runs anywhere")
    workload, measured, warm = sample(args.configs, args.procs)
    env = harness.environment()
    name = args.name or (f"{datetime.now(timezone.utc):%Y-%m-%dT%H%M}_"
                         f"{(env.get('costtune_commit') or 'nocommit')[:7]}")
    path = args.out / "runs.jsonl"
    skip = done(path, name)
    inputs = costtune.get_family(workload.kernel).make_inputs(workload.sizes, workload.dtype,
                                                              device="cuda")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="compile_scaling_") as tmp:
        for p in args.procs:
            if p in skip:
                print(f"{p} processes: already in {path}, kept")
                continue
            os.environ["TRITON_CACHE_DIR"] = f"{tmp}/triton_{p}"  # spawned workers inherit it
            shutdown_pool(wait=True)
            t0 = time.perf_counter()
            precompile(workload, warm[:p], inputs, workers=p)  # start the pool, one each
            t1 = time.perf_counter()
            res = precompile(workload, measured, inputs, workers=p)
            t2 = time.perf_counter()
            ok = sum(r.status is costtune.Status.OK for r in res.values())
            rec = {"experiment": name, "workload": workload.id, "processes": p,
                   "start_warmup_s": t1 - t0, "compile_s": t2 - t1, "configs": len(measured),
                   "ok": ok, "configs_per_s": len(measured) / (t2 - t1),
                   "cpu_topology": cpu_topology(), "command": harness.command(), "env": env}
            with path.open("a") as f:
                f.write(json.dumps(rec, default=str) + "\n")
            print(f"{p} processes: start + {p} warm-up compiles {t1 - t0:.1f} s; "
                  f"{len(measured)} configs in {t2 - t1:.1f} s ({ok} ok)", flush=True)
        shutdown_pool(wait=True)
    return 0


def experiment_lines(name: str, g: pd.DataFrame) -> list[str]:
    first = g.iloc[0]
    env, topo = first["env"], first["cpu_topology"]
    table = pd.DataFrame({
        "processes": g["processes"], "start + warm-up s": g["start_warmup_s"].map("{:.1f}".format),
        "compile s": g["compile_s"].map("{:.1f}".format),
        "configs/s": g["configs_per_s"].map("{:.1f}".format),
        "speed-up vs first": (g["configs_per_s"] / first["configs_per_s"]).map("{:.2f}x".format),
        "ok": g["ok"]})
    return [
        f"## {name}", "",
        f"The collector's precompile of {first['configs']} configs of {first['workload']} "
        "(seeded sample of its space), each pool size with a fresh Triton cache, after the pool "
        "has started and compiled one other config per process.", "",
        harness.md_table(table, disable_numparse=True, colalign=("right",) * 6), "",
        f"- CPU: {topo['logical']} usable logical CPUs on {topo['physical']} physical cores "
        "(sysfs topology as the host reports it)",
        f"- host {env.get('hostname')}, GPU {env.get('gpu')}, driver {env.get('driver')}, torch "
        f"{env.get('torch')}, triton {env.get('triton')}, costtune {env.get('costtune_commit')}, "
        f"{env.get('date')}",
        f"- command: `{first['command']}`", ""]


def report(args: argparse.Namespace) -> int:
    path = args.raw / "runs.jsonl"
    if not path.exists():
        raise SystemExit(f"compile_scaling report: no {path}")
    runs = pd.read_json(path, lines=True)
    lines = ["# Compile throughput vs pool processes (GPU host)", "", harness.provenance(),
             f"- Raw records: `{harness.relative(path)}` (one per experiment and pool size).",
             ""]
    for name, g in runs.groupby("experiment", sort=True):
        lines += experiment_lines(str(name), g.reset_index(drop=True))
    table = runs.drop(columns=["env", "cpu_topology"]).assign(
        gpu=[e.get("gpu") for e in runs["env"]],
        costtune_commit=[e.get("costtune_commit") for e in runs["env"]])
    md = harness.write_report(QUESTION, lines, table, out=args.out)
    print(f"wrote {md} and .csv")
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    for step in ("plan", "run"):
        p = sub.add_parser(step)
        p.add_argument("--procs", default="8,16,32", help="pool sizes to try")
        p.add_argument("--configs", type=int, default=96, help="configs compiled per pool size")
        if step == "run":
            p.add_argument("--out", type=Path, default=RAW, help="folder of runs.jsonl")
            p.add_argument("--name", default=None, help="experiment name (default date_commit)")
    p = sub.add_parser("report")
    p.add_argument("--raw", type=Path, default=RAW, help="folder of runs.jsonl")
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    args = ap.parse_args(argv)
    if hasattr(args, "procs"):
        args.procs = [int(p) for p in args.procs.split(",") if p]
        if not args.procs:
            ap.error("--procs: give at least one pool size")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    return {"plan": plan, "run": run, "report": report}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
