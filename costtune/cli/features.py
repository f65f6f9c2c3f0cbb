"""`costtune features`: static and compiled features for every row of a dataset."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def features(dataset: Path = typer.Option(Path("datasets/h200"), help="store root"),
                 out: Path | None = typer.Option(None, help="parquet file (default "
                                                 "<dataset>/features.parquet, or "
                                                 "features_<kernel>.parquet with --kernel)"),
                 kernel: str | None = typer.Option(None, help="only this kernel family's rows"),
                 compiled: bool = typer.Option(True, help="AOT-compile for --arch too"),
                 arch: int = typer.Option(90, help="CUDA compute capability to compile for"),
                 workers: int | None = typer.Option(None, help="compile processes "
                                                    "(default: all cores)")) -> None:
        """Compute the feature table (joinable on workload, config) for a dataset."""
        import time

        from costtune.features import compute_features

        if not dataset.exists():
            typer.echo(f"dataset {dataset} does not exist", err=True)
            raise typer.Exit(2)
        t0 = time.perf_counter()
        source = dataset
        if kernel is not None:
            from costtune.kernels import get_family
            from costtune.store.dataset import load_dataset

            try:
                get_family(kernel)
            except ValueError as exc:
                typer.echo(f"--kernel: {exc}", err=True)
                raise typer.Exit(2) from None
            source = load_dataset(dataset, kernel=kernel)
            if source.empty:
                typer.echo(f"dataset {dataset} has no {kernel} rows", err=True)
                raise typer.Exit(2)
            out = out or dataset / f"features_{kernel}.parquet"
        table = compute_features(source, out=out, compiled=compiled, arch=arch,
                                 workers=workers)
        dt = time.perf_counter() - t0
        where = out or dataset / "features.parquet"
        typer.echo(f"{len(table)} rows x {table.shape[1]} columns -> {where} in {dt:.1f} s "
                   f"({dt / max(len(table), 1) * 1e3:.1f} ms per row)")
