"""`costtune collect`: measure every config of a suite's workloads on the GPU(s); resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from costtune.cli.console import console, fail, progress_printer
from costtune.cli.inputs import check_kernel
from costtune.env import gpu_problem


def register(app: typer.Typer) -> None:
    app.command()(collect)


def collect(kernel: str = typer.Argument(..., help="gemm | softmax | attention"),
            out: Path = typer.Option(..., help="store root to append to (required: e.g. a "
                                     "new folder; a store on a shared filesystem may take "
                                     "several collectors, which skip each other's workloads)"),
            suite: str = typer.Option("train", help="train | test | a JSON file of problems"),
            dtype: list[str] | None = typer.Option(None, help="dtype(s); default fp16 on all "
                                                   "shapes plus bf16 on a subset"),
            max_configs: int | None = typer.Option(None, help="sample N configs per shape"),
            seed: int = 0, reps: int = typer.Option(10, help="timed reps per config"),
            gpus: str | None = typer.Option(None, help="comma-separated GPU indices "
                                            "(default: all visible)"),
            time_budget: float | None = typer.Option(None, help="start no new workload "
                                                     "after this many seconds"),
            scheduler: str | None = typer.Option(None, help="Dask scheduler address "
                                                 "(tcp://host:8786): one task per workload "
                                                 "on workers started with --resources GPU=1")
            ) -> None:
    """Measure every config of every workload of a suite on the GPU(s); resumes per GPU model."""
    from costtune.collect import collect as run_collect
    from costtune.collect import suite_workloads
    from costtune.store.dataset import Store

    check_kernel(kernel, implementations=True)
    try:
        workloads = suite_workloads(kernel, suite, dtype or None)
    except ValueError as exc:
        fail(str(exc))
    if max_configs is not None and max_configs < 1:
        fail(f"--max-configs must be >= 1, got {max_configs}")
    if reps < 1 or (time_budget is not None and time_budget < 0):
        fail(f"--reps must be >= 1 and --time-budget >= 0, got {reps}, {time_budget}")
    if out.exists() and not out.is_dir():
        fail(f"--out {out} is a file; give a store folder")
    gpu_ids = _gpu_ids(gpus)
    if scheduler is not None and gpu_ids is not None:
        fail("--gpus picks local GPUs; with --scheduler each worker owns one")
    store = Store(out)
    if scheduler is None:
        problem = gpu_problem()
        if problem is not None:
            fail(f"collect measures on a CUDA GPU and {problem}; measure on a Dask cluster's "
                 "GPUs with --scheduler tcp://HOST:8786")
        import torch

        count = torch.cuda.device_count()
        bad = [g for g in gpu_ids or [] if g >= count]
        if bad:
            fail(f"--gpus {bad} not visible: this machine shows {count} GPU(s)")
        gpu_ids = gpu_ids or list(range(count))
    progress, update = progress_printer()
    meta = {"command": " ".join(["costtune", *sys.argv[1:]])}
    with progress:
        if scheduler is not None:  # the GPUs are the cluster's workers, not this machine's
            from costtune.collect.dask import collect_dask

            summary = collect_dask(workloads, store, scheduler=scheduler, suite=suite,
                                   max_configs=max_configs, seed=seed, reps=reps,
                                   time_budget_s=time_budget, meta=meta, progress=update)
        else:
            summary = run_collect(workloads, store, suite=suite, max_configs=max_configs,
                                  seed=seed, reps=reps, gpus=gpu_ids, time_budget_s=time_budget,
                                  meta=meta, progress=update)
    rate = summary["configs"] / summary["seconds"] if summary["seconds"] else 0.0
    busy = summary.get("busy_workloads") or []
    console.print(f"{kernel}/{suite}: {summary['workloads']} workloads measured "
                  f"({summary['skipped_workloads']} already stored"
                  + (f", {len(busy)} skipped: another collector holds them" if busy else "")
                  + f"), {summary['configs']} configs, {summary['ok']} ok, "
                  f"{summary['failed']} failed, {summary['seconds']:.0f} s, {rate:.1f} configs/s"
                  + (" [yellow](stopped at time budget)[/]" if summary["stopped_early"] else ""))
    typer.echo(json.dumps(summary))  # one line, never wrapped: scripts parse it
    for word in ("warning", "error"):
        for line in summary.get(f"{word}s", []):
            typer.echo(f"{word}: {line}", err=True)
    failed = summary.get("failed_workloads") or []
    if failed:
        fail(f"{len(failed)} of {len(workloads)} workloads failed and were not stored (see the "
             "errors above); rerun to resume them")


def _gpu_ids(gpus: str | None) -> list[int] | None:
    if gpus is None:
        return None
    try:
        ids = [int(g) for g in gpus.split(",") if g.strip()]
    except ValueError:
        fail(f"--gpus must be comma-separated GPU indices, got {gpus!r}")
    if not ids or min(ids) < 0:
        fail(f"--gpus must be comma-separated GPU indices >= 0, got {gpus!r}")
    return ids
