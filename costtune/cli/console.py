"""The CLI's consoles, progress displays and one-line errors, shared by its commands.

Results go to stdout (``console``); progress, notes and errors to stderr (``err_console``), so
``--json`` output stays parseable.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any, NoReturn

import typer
from rich.console import Console
from typer.core import TyperGroup

console = Console()
err_console = Console(stderr=True)

def _clicks() -> list[Any]:
    """Click, and the copy of it that recent Typers vendor (``typer._click``)."""
    out = []
    for name in ("typer._click", "click"):
        with contextlib.suppress(ImportError):
            out.append(importlib.import_module(name))
    return out


def _classes(name: str) -> tuple[type, ...]:
    found = {getattr(m.exceptions, name, None) for m in _clicks()} | {getattr(typer, name, None)}
    return tuple(c for c in found if isinstance(c, type))


_CLICK_ERRORS = _classes("ClickException")
_ABORTS = _classes("Abort")
# Click >= 8.2 raises this for a bare `costtune` (older Clicks print the help themselves).
_NO_ARGS = _classes("NoArgsIsHelpError")


class CliError(Exception):
    """Bad arguments or input: printed as one ``error:`` line, exit code 2."""


def fail(message: str) -> NoReturn:
    raise CliError(message)


def note(message: str) -> None:
    typer.echo(f"note: {one_line(message)}", err=True)


def one_line(text: Any) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return " ".join(lines[:1]) if lines else ""


def describe(exc: BaseException) -> str:
    """An exception as one line: its message, with its type when the message needs it."""
    text = one_line(exc)
    if isinstance(exc, (CliError, ValueError, OSError, KeyError)) and text:
        return text.strip("'\"") if isinstance(exc, KeyError) else text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class OneLineErrors(TyperGroup):
    """The app's group: every error, Click's usage errors included, ends as one stderr line."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        previous = warnings.formatwarning
        warnings.formatwarning = _one_line_warning
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
            code = code if isinstance(code, int) else 0
            if code == 130:  # Typer turns Ctrl-C into a silent Exit(130)
                typer.echo("error: interrupted (Ctrl-C)", err=True)
        except _NO_ARGS as exc:  # plain `costtune`: the help
            exc.show()
            code = exc.exit_code
        except _CLICK_ERRORS as exc:
            typer.echo(f"error: {one_line(exc.format_message())}"
                       f"{_usage_hint(exc)}", err=True)
            code = exc.exit_code
        except _ABORTS:
            typer.echo("error: aborted", err=True)
            code = 130
        except CliError as exc:
            typer.echo(f"error: {one_line(exc)}", err=True)
            code = 2
        except Exception as exc:
            if os.environ.get("COSTTUNE_DEBUG"):
                raise
            typer.echo(f"error: {describe(exc)}", err=True)
            code = 1
        finally:
            warnings.formatwarning = previous
        if standalone_mode:
            sys.exit(code)
        return code


def _usage_hint(exc: Any) -> str:
    ctx = getattr(exc, "ctx", None)
    return f" (see '{ctx.command_path} --help')" if ctx is not None else ""


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {one_line(message)}\n"


def progress_printer():
    """(progress display, update callback) for collectors: one bar per workload."""
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
                        TimeRemainingColumn(), console=err_console, transient=False)
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


def bar(description: str, total: int | None):
    """A one-task progress display (a bar when ``total`` is known, else a spinner with the time
    spent): ``with bar("fit", None) as advance: ...``."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    progress = Progress(*columns, TimeElapsedColumn(), console=err_console, transient=False)
    return _running(progress, description, total)


@contextlib.contextmanager
def _running(progress, description: str, total: int | None) -> Iterator[Any]:
    with progress:
        task = progress.add_task(description, total=total)

        def advance(n: int = 1, *, text: str | None = None) -> None:
            progress.update(task, advance=n, **({"description": text} if text else {}))

        yield advance
        if total is None:
            progress.update(task, total=1, completed=1)
