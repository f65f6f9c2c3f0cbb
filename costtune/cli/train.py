"""`costtune train`: fit a cost model on a dataset and save it (versioned)."""

from __future__ import annotations

from pathlib import Path

import typer

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "h200"


def register(app: typer.Typer) -> None:
    @app.command()
    def train(dataset: Path = typer.Option(Path("datasets/h200"), help="store root"),
              out: Path = typer.Option(SHIPPED, help="model path (writes .json + .ubj)"),
              suite: str = typer.Option("train", help="train | all: which rows to fit on"),
              objective: str = typer.Option("rank:pairwise", help="rank:pairwise | rank:ndcg "
                                            "| reg:logtime | reg:relthroughput"),
              features: str = typer.Option("static", help="static | static+compiled"),
              seed: int = 0) -> None:
        """Train the cost model (default: the shipped `h200` model, on the train suite)."""
        import costtune
        from costtune.evaluate import default_model

        if suite not in ("train", "all"):
            typer.echo(f"--suite must be 'train' or 'all', got {suite!r}", err=True)
            raise typer.Exit(2)
        data = costtune.load_dataset(dataset)
        rows = data if suite == "all" else data[data["suite"] == "train"]
        try:
            model = default_model(objective=objective, features=features, seed=seed).fit(rows)
        except ValueError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from exc
        path = model.save(out)
        typer.echo(f"trained on {rows['workload'].nunique()} workloads ({len(rows)} rows, "
                   f"suite={suite}) -> {path}")
