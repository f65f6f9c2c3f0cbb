"""`costtune kernels`: list the kernel families; with --check, run each on CPU."""

from __future__ import annotations

import os

import typer
from rich.table import Table

from costtune.cli.console import console


def register(app: typer.Typer) -> None:
    @app.command()
    def kernels(check: bool = typer.Option(False, "--check", help="run every kernel on CPU "
                                           "(TRITON_INTERPRET=1) against its reference"),
                seed: int = 0) -> None:
        """List the kernel implementations by family; with --check, verify each on small CPU
        shapes."""
        if check:
            # Before triton is imported: the check runs under the interpreter on CPU tensors.
            os.environ.setdefault("TRITON_INTERPRET", "1")
        from costtune.kernels import IMPLEMENTATIONS, get_implementation

        table = Table("implementation", "family", "problem keys", "dtypes", "train", "test",
                      "space (1st test shape)", *(["check"] if check else []))
        failed = 0
        for family, name in ((f, n) for f, names in IMPLEMENTATIONS.items() for n in names):
            fam = get_implementation(name)
            row = [name, family, ",".join(fam.PROBLEM_KEYS), ",".join(fam.DTYPES),
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
