"""`costtune` command line: kernels | collect | features | train | eval | tune | study."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Cheap Triton autotuning with a learned cost model.")
console = Console()


@app.command()
def kernels(check: bool = typer.Option(False, "--check", help="run every kernel on CPU "
                                       "(TRITON_INTERPRET=1) against its reference"),
            seed: int = 0) -> None:
    """List the kernel families; with --check, verify each on small CPU shapes."""
    if check:
        # Before triton is imported: the check runs under the interpreter on CPU tensors.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from costtune.kernels import FAMILIES, get_family

    table = Table("kernel", "problem keys", "dtypes", "train", "test", "space (1st test shape)",
                  *(["check"] if check else []))
    failed = 0
    for name in FAMILIES:
        fam = get_family(name)
        row = [name, ",".join(fam.PROBLEM_KEYS), ",".join(fam.DTYPES),
               str(len(fam.TRAIN_SHAPES)), str(len(fam.TEST_SHAPES)),
               str(len(fam.config_space(fam.TEST_SHAPES[0])))]
        if check:
            from costtune.kernels.check import check_family

            errs = check_family(name, seed=seed)
            failed += bool(errs)
            row.append("[green]ok[/]" if not errs else "[red]" + "; ".join(errs) + "[/]")
        table.add_row(*row)
    console.print(table)
    if failed:
        raise typer.Exit(1)


def _progress_printer():
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("fail {task.fields[failed]}"), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=console, transient=False)
    tasks: dict[str, int] = {}

    def update(workload, m, n):
        if m is None:
            if n >= 0:
                tasks[workload.id] = progress.add_task(workload.id, total=n, failed=0)
            else:  # a whole workload returned by a worker
                progress.add_task(workload.id, total=-n, completed=-n, failed="?")
            return
        tid = tasks[workload.id]
        failed = progress.tasks[tid].fields["failed"] + (m.status.value != "ok")
        progress.update(tid, advance=1, failed=failed)

    return progress, update


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
    from costtune.store import Store

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
    progress, update = _progress_printer()
    meta = {"command": " ".join(["costtune", *sys.argv[1:]])}
    with progress:
        if scheduler is not None:  # the GPUs are the cluster's workers, not this machine's
            from costtune.distributed import collect_dask

            summary = collect_dask(workloads, Store(out), scheduler=scheduler, suite=suite,
                                   max_configs=max_configs, seed=seed, reps=reps,
                                   time_budget_s=time_budget, meta=meta, progress=update)
        else:
            gpu_ids = ([int(g) for g in gpus.split(",")] if gpus
                       else list(range(torch.cuda.device_count())))
            summary = run_collect(workloads, Store(out), suite=suite, max_configs=max_configs,
                                  seed=seed, reps=reps, gpus=gpu_ids, time_budget_s=time_budget,
                                  meta=meta, progress=update)
    rate = summary["configs"] / summary["seconds"] if summary["seconds"] else 0.0
    console.print(f"{kernel}/{suite}: {summary['workloads']} workloads measured "
                  f"({summary['skipped_workloads']} already stored), "
                  f"{summary['configs']} configs, "
                  f"{summary['ok']} ok, {summary['failed']} failed, {summary['seconds']:.0f} s, "
                  f"{rate:.1f} configs/s" + (" [yellow](stopped at time budget)[/]"
                                             if summary["stopped_early"] else ""))
    console.print(json.dumps(summary))


from costtune.commands import register_all  # noqa: E402

register_all(app)


def main() -> None:  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
