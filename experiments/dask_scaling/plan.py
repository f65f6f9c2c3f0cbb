"""Plan step (CPU): the workloads and the sequence of runs one experiment measures.

    python -m experiments.dask_scaling.plan [specs ...] --gpus 2 [--extra-runs 1 1s]
        [--compile-workers 8] [--cpu-per-gpu fixed|shared] [--triton-cache cold|warm]

Prints the workloads, each run (GPUs, Triton cache it loads kernels from, queue order) and the
compile processes per GPU worker; nothing needs a GPU. The run step takes the same flags.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from costtune.collect import suite_workloads
from experiments import harness

QUESTION = "dask_scaling"
RAW = harness.raw_dir(QUESTION)
DEFAULT_SPECS = ["gemm:test", "softmax:test"]


def add_args(ap: argparse.ArgumentParser) -> None:
    """The flags plan and run share."""
    ap.add_argument("specs", nargs="*", default=None, help="kernel:suite pairs")
    ap.add_argument("--gpus", type=int, default=2, help="GPUs of the multi-GPU run")
    ap.add_argument("--max-configs", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-workloads", type=int, default=None, help="first N per spec")
    ap.add_argument("--cpu-per-gpu", choices=("fixed", "shared"), default="fixed",
                    help="fixed: each GPU worker compiles on cores/--gpus processes in both "
                    "runs; shared: collect_dask's default split of this host's cores")
    ap.add_argument("--compile-workers", type=int, default=None,
                    help="with --cpu-per-gpu fixed: compile processes per GPU worker (default "
                    "usable cores / --gpus)")
    ap.add_argument("--triton-cache", choices=("cold", "warm"), default="cold",
                    help="cold: a fresh Triton cache per run; warm: one cache filled before "
                    "both runs (GPU-bound collection: what scales with GPUs alone)")
    ap.add_argument("--noise-run", action="store_true",
                    help="then a second 1-GPU run (the same as --extra-runs 1)")
    ap.add_argument("--extra-runs", nargs="*", default=[],
                    help="GPU counts of further runs after the first two, each loading its "
                    "kernels from the first 1-GPU run's Triton cache (e.g. 1 2: a warm 1-GPU "
                    "and a warm 2-GPU run); a count ending in s measures the workloads in a "
                    "seeded shuffled order (1s: the noise between two 1-GPU runs whose "
                    "workers measured different sequences); with three or more runs the "
                    "report solves each run's own noise")
    ap.add_argument("--cpu-probe", action="store_true",
                    help="first measure the host's per-process CPU rate with 1, one GPU "
                    "worker's, all GPU workers' and all cores' worth of busy processes")
    ap.add_argument("--dry-run", action="store_true", help="replay + sleep on CPU (plumbing)")
    ap.add_argument("--dry-sleep", type=float, default=1.0, help="seconds per replayed task")


def settle(args: argparse.Namespace) -> argparse.Namespace:
    """Defaults that depend on other flags (the dry run is small and replays softmax)."""
    if args.dry_run:
        args.specs = args.specs or ["softmax:test"]
        args.max_configs, args.max_workloads = 8, args.max_workloads or 8
    else:
        args.specs = args.specs or list(DEFAULT_SPECS)
    if args.noise_run and "1" not in args.extra_runs:
        args.extra_runs = ["1", *args.extra_runs]
    return args


def workloads(args: argparse.Namespace) -> list:
    out = []
    for spec in args.specs:
        kernel, _, suite = spec.partition(":")
        if not suite:
            raise SystemExit(f"dask_scaling: spec {spec!r} is not kernel:suite")
        out += suite_workloads(kernel, suite)[:args.max_workloads]
    return out


def runs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The runs in order: 1 GPU, --gpus GPUs, then each extra run (``cache_of``: the run whose
    Triton cache it loads its kernels from; ``shuffle_seed``: its queue is shuffled)."""
    out = [{"label": "1gpu", "n_gpus": 1, "tag": "", "cache_of": None, "order": "spread",
            "shuffle_seed": None},
           {"label": f"{args.gpus}gpu", "n_gpus": args.gpus, "tag": "", "cache_of": None,
            "order": "spread", "shuffle_seed": None}]
    seen: dict[str, int] = {}  # extra runs so far per spec
    for spec in args.extra_runs:
        n, shuffled = int(spec.rstrip("s")), spec.endswith("s")
        same = seen[spec] = seen.get(spec, 0) + 1
        tag = (f"_shuffled{same if same > 1 else ''}" if shuffled
               else "_" + "bcdefgh"[same - 1])
        out.append({"label": f"{n}gpu{tag}", "n_gpus": n, "tag": tag, "cache_of": "1gpu",
                    "order": "given" if shuffled else "spread",
                    "shuffle_seed": args.seed + len(out) - 1 if shuffled else None})
    return out


def fixed_compile_workers(args: argparse.Namespace) -> int:
    """Compile processes per GPU worker in both runs: --compile-workers, else this host's
    usable cores / --gpus."""
    return args.compile_workers or max(1, len(os.sched_getaffinity(0)) // args.gpus)


def probe_levels(args: argparse.Namespace) -> list[int]:
    """Busy-process counts of the CPU probe: 1, one GPU worker with its compile pool, all GPU
    workers', all cores."""
    per_gpu = fixed_compile_workers(args) + 1
    return sorted({1, per_gpu, args.gpus * per_gpu, len(os.sched_getaffinity(0))})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_args(ap)
    args = settle(ap.parse_args(argv))
    todo = workloads(args)
    kinds = sorted({w.kernel for w in todo})
    print(f"plan: {len(todo)} workloads ({', '.join(args.specs)}; {', '.join(kinds)}), "
          f"max_configs {args.max_configs}, reps {args.reps}, seed {args.seed}")
    cw = (f"{fixed_compile_workers(args)} compile processes per GPU worker in every run"
          if args.cpu_per_gpu == "fixed" else "this host's cores split among the GPU workers")
    print(f"  {cw}; Triton cache {args.triton_cache}"
          + (" (filled once before the runs)" if args.triton_cache == "warm" else ""))
    if args.cpu_probe:
        print(f"  CPU probe first: {probe_levels(args)} busy processes, then 1 again")
    for r in runs(args):
        cache = (f"kernels from run {r['cache_of']}'s cache" if r["cache_of"]
                 else "its own fresh cache" if args.triton_cache == "cold" else "shared cache")
        queue = (f"shuffled (seed {r['shuffle_seed']})" if r["shuffle_seed"] is not None
                 else "biggest first")
        print(f"  run {r['label']:14s} {r['n_gpus']} GPU(s), {cache}, queue {queue}")
    if args.dry_run:
        print("  dry run: replayed rows + sleep on CPU workers (plumbing only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
