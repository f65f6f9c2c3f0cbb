"""`costtune eval`: the leaderboard — model vs baselines, top-k score per kernel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def check_dataset(dataset: Path) -> None:
    """Exit 2 with a one-line message when the store root ``dataset`` is absent."""
    if not dataset.exists():
        typer.echo(f"dataset {dataset} does not exist (run from the repository root or "
                   f"pass --dataset)", err=True)
        raise typer.Exit(2)


def print_leaderboard(dataset: Path, *, model: str = "h200", as_json: bool = False
                      ) -> dict[str, Any]:
    """Score ``model`` and every baseline on the test suite of ``dataset`` and print the
    leaderboard (a table, or JSON); returns it. Shared by `costtune eval` and `costtune demo`.
    ``model="train"`` fits the default model on the train suite first."""
    import costtune
    from costtune.evaluate import format_leaderboard, leaderboard

    check_dataset(dataset)
    board = leaderboard(costtune.load_dataset(dataset),
                        model=None if model == "train" else model)
    typer.echo(json.dumps(board, indent=1) if as_json else format_leaderboard(board))
    return board


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_(dataset: Path = typer.Option(Path("datasets/h200"), help="store root"),
              model: str = typer.Option("h200", help="shipped model name or a model path; "
                                        "'train' fits the default on the train suite now"),
              as_json: bool = typer.Option(False, "--json", help="print the scores as JSON"),
              plot: Path = typer.Option(Path("experiments/results/leaderboard_topk.png"),
                                        help="where to write the top-k vs k plot")) -> None:
        """Score the cost model and every baseline on the test suite (TenSet top-k)."""
        from costtune.evaluate import plot_topk

        board = print_leaderboard(dataset, model=model, as_json=as_json)
        plot.parent.mkdir(parents=True, exist_ok=True)
        plot_topk(board, plot)
        if not as_json:
            typer.echo(f"plot: {plot}")
