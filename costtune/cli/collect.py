"""`costtune collect`: measure every config of a suite's workloads on the GPU(s); resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from costtune.cli.console import console, progress_printer


def register(app: typer.Typer) -> None:
    @app.command()
    def collect(kernel: str = typer.Argument(..., help="gemm | softmax | attention"),
                suite: str = typer.Option("train", help="train | test | a JSON file of problems"),
                out: Path = typer.Option(Path("datasets/h200"), help="store root"),
                dtype: list[str] | None = typer.Option(None, help="dtype(s); default fp16 on all "
                                                          "shapes plus bf16 on a subset"),
                max_configs: int | None = typer.Option(None, help="sample N configs per shape"),
                seed: int = 0, reps: int = typer.Option(10, help="timed reps per config"),
                gpus: str | None = typer.Option(None, help="comma-separated GPU indices "
                                                   "(default: all visible)"),
                time_budget: float | None = typer.Option(None, help="start no new workload "
                                                            "after this many seconds"),
                scheduler: str | None = typer.Option(None, help="Dask scheduler address "
                                                     "(tcp://host:8786): one task per workload on "
                                                     "workers started with --resources GPU=1")
                ) -> None:
        """Measure every config of every workload of a suite on the GPU(s); resumes."""
        from costtune.collect import collect as run_collect
        from costtune.collect import suite_workloads
        from costtune.store.dataset import Store

        if scheduler is None:
            import torch

            if not torch.cuda.is_available():
                console.print("[red]collect needs a CUDA GPU; none is visible[/]")
                raise typer.Exit(2)
        elif gpus:
            console.print("[red]--gpus picks local GPUs; with --scheduler each worker owns one[/]")
            raise typer.Exit(2)
        try:
            workloads = suite_workloads(kernel, suite, dtype or None)
        except ValueError as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(2) from exc
        progress, update = progress_printer()
        meta = {"command": " ".join(["costtune", *sys.argv[1:]])}
        with progress:
            if scheduler is not None:  # the GPUs are the cluster's workers, not this machine's
                from costtune.collect.dask import collect_dask

                summary = collect_dask(workloads, Store(out), scheduler=scheduler, suite=suite,
                                       max_configs=max_configs, seed=seed, reps=reps,
                                       time_budget_s=time_budget, meta=meta, progress=update)
            else:
                gpu_ids = ([int(g) for g in gpus.split(",")] if gpus
                           else list(range(torch.cuda.device_count())))
                summary = run_collect(workloads, Store(out), suite=suite,
                                      max_configs=max_configs, seed=seed, reps=reps,
                                      gpus=gpu_ids, time_budget_s=time_budget, meta=meta,
                                      progress=update)
        rate = summary["configs"] / summary["seconds"] if summary["seconds"] else 0.0
        console.print(f"{kernel}/{suite}: {summary['workloads']} workloads measured "
                      f"({summary['skipped_workloads']} already stored), "
                      f"{summary['configs']} configs, "
                      f"{summary['ok']} ok, {summary['failed']} failed, "
                      f"{summary['seconds']:.0f} s, "
                      f"{rate:.1f} configs/s" + (" [yellow](stopped at time budget)[/]"
                                                 if summary["stopped_early"] else ""))
        console.print(json.dumps(summary))
