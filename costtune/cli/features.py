"""`costtune features`: static and compiled features for every row of a dataset, or (``--ir``)
the IR features (TTIR/TTGIR op counts from a compile that stops before PTX)."""

from __future__ import annotations

from pathlib import Path

import typer

from costtune.cli.console import bar, fail
from costtune.cli.inputs import check_kernel, check_writable, is_shipped, load_rows

ARCHS = (80, 86, 89, 90, 100, 120)


def register(app: typer.Typer) -> None:
    app.command()(features)


def features(dataset: Path = typer.Option(Path("datasets/h200"), help="store root"),
             out: Path | None = typer.Option(None, help="parquet file (default "
                                             "<dataset>/features.parquet, or "
                                             "features_<kernel>.parquet with --kernel, "
                                             "features_<kernel>_ir.parquet with --ir; "
                                             "required for the shipped dataset)"),
             kernel: str | None = typer.Option(None, help="only this kernel family's rows"),
             compiled: bool = typer.Option(True, help="AOT-compile for --arch too"),
             ir: bool = typer.Option(False, "--ir", help="instead: the IR features only "
                                     "(keys, ir_status, ir_error, ir_s, ir_key and the "
                                     "TTIR/TTGIR op counts), from the ttir and ttgir stages "
                                     "of the compile (no PTX/ptxas); needs --kernel"),
             arch: int = typer.Option(90, help="CUDA compute capability to compile for"),
             workers: int | None = typer.Option(None, help="compile processes "
                                                "(default: all cores)")) -> None:
    """Compute the feature table (joinable on workload, config) for a dataset."""
    import time

    if kernel is not None:
        check_kernel(kernel, option="--kernel")
    if arch not in ARCHS:
        fail(f"--arch {arch} is not one of {', '.join(map(str, ARCHS))}")
    if workers is not None and workers < 1:
        fail(f"--workers must be >= 1, got {workers}")
    if ir and kernel is None:
        fail("--ir writes one table per kernel family: pass --kernel")
    if out is None:
        folder = dataset if dataset.is_dir() else dataset.parent
        if any(folder.glob("part-*.parquet")):  # a kernel folder of a store: beside it
            folder = folder.parent
        name = f"features_{kernel}.parquet" if kernel else "features.parquet"
        out = folder / (f"features_{kernel}_ir.parquet" if ir else name)
        if is_shipped(out):
            fail(f"the default output {out} is inside the shipped dataset; pass --out PATH "
                 "(that path may be the shipped one, if you mean to replace it)")
    check_writable(out, option="--out")
    rows = load_rows(dataset, kernel=kernel)
    from costtune.features import compute_features, compute_ir_features

    t0 = time.perf_counter()
    n_keys = len(rows.drop_duplicates(["workload", "config"]))
    with bar(f"features of {rows['workload'].nunique()} workloads", n_keys) as advance:
        seen = [0]

        def progress(done: int, total: int) -> None:
            advance(done - seen[0])
            seen[0] = done

        if ir:
            table = compute_ir_features(rows, out=out, arch=arch, workers=workers,
                                        progress=progress)
        else:
            table = compute_features(rows, out=out, compiled=compiled, arch=arch,
                                     workers=workers, progress=progress)
    dt = time.perf_counter() - t0
    typer.echo(f"{len(table)} rows x {table.shape[1]} columns -> {out} in {dt:.1f} s "
               f"({dt / max(len(table), 1) * 1e3:.1f} ms per row)")
