"""`costtune eval`: the leaderboard — model vs baselines, top-k score per kernel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from costtune.cli.console import bar, describe, fail, note
from costtune.cli.inputs import check_writable, load_rows


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_)


def eval_(dataset: Path = typer.Option(Path("datasets/h200"), help="store root"),
          model: str = typer.Option("h200", help="shipped or user model name, or a model path; "
                                    "'train' fits the default on the train suite now"),
          as_json: bool = typer.Option(False, "--json", help="print the scores as JSON"),
          plot: Path | None = typer.Option(None, "--plot", help="also write the top-k vs k "
                                           "plot (PNG) to this path")) -> None:
    """Score the cost model and every baseline on the test suite (TenSet top-k)."""
    if plot is not None:
        check_writable(plot, option="--plot")
        if plot.suffix.lower() not in (".png", ".pdf", ".svg"):
            fail(f"--plot {plot}: write a .png, .pdf or .svg file")
    board = print_leaderboard(dataset, model=model, as_json=as_json)
    if plot is not None:
        from costtune.evaluate import plot_topk

        plot_topk(board, plot)
        if not as_json:
            typer.echo(f"plot: {plot}")


def check_dataset(dataset: Path) -> None:
    """Exit with a one-line message when the store root ``dataset`` is absent."""
    if not dataset.exists():
        fail(f"--dataset {dataset} does not exist (datasets/h200 is found from the repository "
             "root; pass --dataset DIR)")


def scored_rows(dataset: Path, model: str) -> Any:
    """The rows of ``dataset`` the leaderboard scores ``model`` on, after checking both: a
    one-line error on each bad input, before any work."""
    if model != "train":
        check_model(model)
    data = load_rows(dataset)
    if "suite" not in data.columns:
        fail(f"--dataset {dataset} has no 'suite' column: eval scores the test suite of a "
             "collected dataset (train and test rows)")
    return data


def print_leaderboard(dataset: Path, *, model: str = "h200", as_json: bool = False,
                      data: Any = None) -> dict[str, Any]:
    """Score ``model`` and every baseline on the test suite of ``dataset`` and print the
    leaderboard (a table, or JSON); returns it. Shared by `costtune eval` and `costtune demo`.
    ``model="train"`` fits the default model on the train suite first; every bad input is a
    one-line error. ``data``: ``scored_rows(dataset, model)`` where the caller has them."""
    if data is None:
        data = scored_rows(dataset, model)
    if model != "train":
        data = _served(data, model)
    from costtune.evaluate import format_leaderboard, leaderboard

    try:
        with bar("fitting the baselines and scoring the test suite", None):
            board = leaderboard(data, model=None if model == "train" else model)
    except ValueError as exc:
        fail(f"--dataset {dataset}: {describe(exc)}")
    typer.echo(json.dumps(board, indent=1) if as_json else format_leaderboard(board))
    return board


def check_model(model: str) -> None:
    from costtune.model.files import resolve

    try:
        resolve(model)
    except FileNotFoundError as exc:
        fail(f"--model {model}: {describe(exc)}")


def _served(data: Any, model: str) -> Any:
    """The rows of the kernel families ``model`` serves (a shipped name per family, like the
    pruning hook); a note names the families left out."""
    from costtune.model.registry import load_model

    kernels = sorted(data["kernel"].astype(str).unique())
    served, problems = [], []
    for kernel in kernels:
        try:
            fitted = load_model(model, kernel)
        except (OSError, ValueError) as exc:
            problems.append(f"{kernel}: {describe(exc)}")
            continue
        if kernel in getattr(fitted, "families_", [kernel]):
            served.append(kernel)
    if not served:
        detail = f" ({problems[0]})" if problems else ""
        fail(f"--model {model} serves none of the dataset's kernels {kernels}{detail}")
    if len(served) < len(kernels):
        left = sorted(set(kernels) - set(served))
        note(f"model {model} was trained for {', '.join(served)}; scoring only that, leaving "
             f"out {', '.join(left)}" + (f" ({problems[0]})" if problems else ""))
    return data[data["kernel"].isin(served)]
