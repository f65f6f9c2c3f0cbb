"""`costtune eval`: the leaderboard — model vs baselines, top-k score per kernel."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_(dataset: Path = typer.Option(Path("datasets/h200"), help="store root"),
              model: str = typer.Option("h200", help="shipped model name or a model path; "
                                        "'train' fits the default on the train suite now"),
              as_json: bool = typer.Option(False, "--json", help="print the scores as JSON"),
              plot: Path = typer.Option(Path("experiments/results/leaderboard_topk.png"),
                                        help="where to write the top-k vs k plot")) -> None:
        """Score the cost model and every baseline on the test suite (TenSet top-k)."""
        import costtune
        from costtune.evaluate import format_leaderboard, leaderboard, plot_topk

        if not dataset.exists():
            typer.echo(f"dataset {dataset} does not exist (run from the repository root or "
                       f"pass --dataset)", err=True)
            raise typer.Exit(2)
        board = leaderboard(costtune.load_dataset(dataset),
                            model=None if model == "train" else model)
        plot.parent.mkdir(parents=True, exist_ok=True)
        plot_topk(board, plot)
        if as_json:
            typer.echo(json.dumps(board, indent=1))
        else:
            typer.echo(format_leaderboard(board))
            typer.echo(f"plot: {plot}")
