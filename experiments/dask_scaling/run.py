"""Run step (GPU): collect the planned runs with collect_dask; raw results only.

    PYTHONPATH=. python3 -m experiments.dask_scaling.run --gpus 2 --out $OUT/dask \\
        [--compile-workers 8] [--triton-cache cold|warm] [--extra-runs 1 1s] [--cpu-probe] \\
        [--name NAME] [--work DIR]
    python -m experiments.dask_scaling.run --dry-run      # CPU plumbing check, temp folder

Writes ``<out>/<name>/``: experiment.json at the start, then after each run its rows
(rows_<run>.parquet) and a line in runs.jsonl. Started again with the same ``--name`` (and
``--work``, where the Triton caches live), it skips the runs already in runs.jsonl; a run cut
short is measured again from a fresh store. Report: ``python -m experiments.dask_scaling.report
--raw <out>``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

import costtune
from costtune.env import cpu_topology, host_cpu_times, host_cpu_use
from experiments import harness
from experiments.dask_scaling import plan
from experiments.dask_scaling.probe import cpu_probe

# The flags an experiment is defined by: a resumed call must repeat them.
DEFINING = ("specs", "gpus", "max_configs", "reps", "seed", "max_workloads", "cpu_per_gpu",
            "compile_workers", "triton_cache", "extra_runs", "cpu_probe", "dry_run")


def collect(workloads: list, run: dict[str, Any], args: argparse.Namespace, work: Path
            ) -> tuple[pd.DataFrame, dict, dict]:
    """One collection of ``run`` (plan.runs): its rows (with the GPU and the task's wall
    split per workload), collect_dask's summary and the first part's metadata."""
    n_gpus, order = run["n_gpus"], run["order"]
    store_dir = work / f"store_{run['label']}"
    shutil.rmtree(store_dir, ignore_errors=True)  # a run cut short starts over
    store = costtune.Store(store_dir)
    kw = {"gpus": list(range(n_gpus)), "max_configs": args.max_configs, "seed": args.seed,
          "reps": args.reps, "order": order,
          "meta": {"experiment": "dask_scaling", "n_gpus": n_gpus,
                   "cpu_per_gpu": args.cpu_per_gpu, "order": order}}
    if args.cpu_per_gpu == "fixed" and not args.dry_run:
        # Every GPU worker compiles with the same cores in both runs, as on a cluster where
        # each GPU brings its own; "shared" lets collect_dask split this host's cores.
        kw["compile_workers"] = plan.fixed_compile_workers(args)
    if args.dry_run:
        kw.update(runner="replay", replay_dataset=harness.DATASET,
                  replay_delay_s=args.dry_sleep)
    elif args.triton_cache == "warm":  # both runs load every kernel from one filled cache
        kw.update(worker_env={"TRITON_CACHE_DIR": str(work / "triton_shared")})
    else:  # a cold cache per run: both runs pay the same compiles
        cache = work / f"triton_{run['cache_of'] or run['label']}"
        if run["cache_of"] is None:
            shutil.rmtree(cache, ignore_errors=True)
        kw.update(worker_env={"TRITON_CACHE_DIR": str(cache)})
    before = host_cpu_times()
    summary = costtune.collect_dask(workloads, store, **kw)
    summary["host_cpu"] = host_cpu_use(before, host_cpu_times())
    metas = [store.part_meta(p) for p in store.parts()]
    device = {m["workload"]: m.get("cuda_visible_devices") for m in metas}
    rows = store.load()
    per_task = {k: {m["workload"]: m.get(k) for m in metas}
                for k in ("task_wall_s", "task_env_s", "task_clock_wait_s")}
    rows = rows.assign(gpu_index=rows["workload"].map(device),
                       **{k: rows["workload"].map(v) for k, v in per_task.items()})
    return rows, summary, metas[0] if metas else {}


def fill_cache(workloads: list, args: argparse.Namespace, work: Path) -> float:
    """--triton-cache warm: compile every workload's configs once into the cache both runs
    share (all of this host's cores); returns the seconds it took."""
    from costtune.build.pool import shutdown_pool
    from costtune.build.workload import precompile
    from costtune.collect import workload_configs

    start = time.perf_counter()
    os.environ["TRITON_CACHE_DIR"] = str(work / "triton_shared")  # the pool inherits it
    cores = len(os.sched_getaffinity(0))
    for w in workloads:
        inputs = costtune.get_family(w.kernel).make_inputs(w.sizes, w.dtype)  # shapes only
        precompile(w, workload_configs(w, max_configs=args.max_configs, seed=args.seed),
                   inputs, workers=cores)
    shutdown_pool(wait=True)
    return time.perf_counter() - start


def start_experiment(folder: Path, args: argparse.Namespace, n_workloads: int) -> dict:
    """experiment.json: written on the first call, checked against the flags on a resume."""
    path = folder / "experiment.json"
    flags = {k: getattr(args, k) for k in DEFINING}
    if path.exists():
        exp = json.loads(path.read_text())
        if exp["args"] != flags:
            diff = sorted(k for k in flags if exp["args"].get(k) != flags[k])
            raise SystemExit(f"dask_scaling: {folder} was started with other flags ({diff})")
        return exp
    folder.mkdir(parents=True, exist_ok=True)
    exp = {"name": folder.name, "command": harness.command(),
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "args": flags,
           "workloads": n_workloads, "cpu_topology": cpu_topology(), "warm_s": None}
    path.write_text(json.dumps(exp, indent=1) + "\n")
    return exp


def done_runs(folder: Path) -> set[str]:
    path = folder / "runs.jsonl"
    if not path.exists():
        return set()
    return {json.loads(line)["label"] for line in path.read_text().splitlines() if line.strip()}


def prepare(folder: Path, exp: dict, args: argparse.Namespace, todo: list, work: Path) -> None:
    """The CPU probe and the warm cache, once per experiment (kept across resumed calls)."""
    if args.cpu_probe and not (folder / "cpu_probe.csv").exists():
        probe = cpu_probe(plan.probe_levels(args))
        probe.to_csv(folder / "cpu_probe.csv", index=False)
        print(probe.to_string(index=False), flush=True)
    if args.triton_cache == "warm" and not args.dry_run and exp["warm_s"] is None:
        exp["warm_s"] = fill_cache(todo, args, work)
        (folder / "experiment.json").write_text(json.dumps(exp, indent=1) + "\n")
        print(f"filled the shared Triton cache in {exp['warm_s']:.1f} s", flush=True)


def measure(folder: Path, args: argparse.Namespace, todo: list, work: Path) -> None:
    """Every planned run not yet in runs.jsonl: rows to parquet, then its runs.jsonl line."""
    done = done_runs(folder)
    for run in plan.runs(args):
        if run["label"] in done:
            print(f"{run['label']}: already measured, kept", flush=True)
            continue
        queue = list(todo)
        if run["shuffle_seed"] is not None:
            random.Random(run["shuffle_seed"]).shuffle(queue)
        t = time.perf_counter()
        rows, summary, meta = collect(queue, run, args, work)
        rows_file = f"rows_{run['label']}.parquet"
        rows.to_parquet(folder / rows_file, index=False)
        with (folder / "runs.jsonl").open("a") as f:
            f.write(json.dumps({**run, "summary": summary, "meta": meta, "rows": rows_file},
                               default=str) + "\n")
        print(f"{run['label']}: {time.perf_counter() - t:.1f} s, {summary}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    plan.add_args(ap)
    ap.add_argument("--out", type=Path, default=None,
                    help=f"parent folder of experiments (default {harness.relative(plan.RAW)}; "
                    "a temp folder for --dry-run)")
    ap.add_argument("--name", default=None, help="experiment folder (default: date_commit)")
    ap.add_argument("--work", type=Path, default=None,
                    help="stores and Triton caches (default /tmp/dask_scaling_work/<name>)")
    args = plan.settle(ap.parse_args(argv))
    if not args.dry_run:
        import torch

        if torch.cuda.device_count() < args.gpus:
            ap.error(f"needs {args.gpus} CUDA GPUs, sees {torch.cuda.device_count()} "
                     "(--dry-run checks the plumbing on CPU)")
    out = args.out or (Path(tempfile.mkdtemp(prefix="dask_scaling_dryrun_")) if args.dry_run
                       else plan.RAW)
    commit = (harness.environment().get("costtune_commit") or "nocommit")[:7]
    name = args.name or f"{datetime.now(timezone.utc):%Y-%m-%dT%H%M}_{commit}" + (
        "_dryrun" if args.dry_run else "")
    folder = out / name
    work = args.work or Path(tempfile.gettempdir()) / "dask_scaling_work" / name
    todo = plan.workloads(args)
    exp = start_experiment(folder, args, len(todo))
    prepare(folder, exp, args, todo, work)
    measure(folder, args, todo, work)
    print(f"raw results in {folder}; report: python -m experiments.dask_scaling.report "
          f"--raw {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
