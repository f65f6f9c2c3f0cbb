"""The CLI's console and progress display, shared by its commands."""

from __future__ import annotations

from rich.console import Console

console = Console()


def progress_printer():
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
