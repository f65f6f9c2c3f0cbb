"""`costtune explain SCRIPT [ARGS]`: run a script and print, before each autotuned kernel's
first launch, how costtune sees it (``costtune.explain``): family, sizes, parameter mapping,
the ranking it would benchmark and every doubt."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command(context_settings={"allow_extra_args": True,
                                   "ignore_unknown_options": True})
    def explain(ctx: typer.Context,
                script: Path = typer.Argument(..., help="Python script to run; its own "
                                              "arguments follow it"),
                model: str = typer.Option(None, help="cost model, a shipped name or a saved "
                                          "model's path [default: h200]"),
                top_k: int = typer.Option(None, min=0, help="configs to benchmark [default: 8]"),
                family: str = typer.Option(None, help="gemm | softmax | attention "
                                           "[default: told from each kernel]")) -> None:
        """Run SCRIPT and explain each autotuned launch as costtune's hook sees it: the kernel's
        own costtune hook, or, with an option or for a plain triton.autotune kernel, the hook
        with these options (the run itself keeps the kernel's own tuning)."""
        if not script.is_file():
            typer.echo(f"error: no script {script}", err=True)
            raise typer.Exit(2)
        if model is not None:
            from costtune.cli.eval import check_model

            check_model(model)
        from costtune.tune.explain import explaining
        from costtune.tune.pruner import prune_configs_by

        prune = None
        if (model, top_k, family) != (None, None, None):
            prune = prune_configs_by(model or "h200", 8 if top_k is None else top_k,
                                     family=family, preload=False)
        argv, path = sys.argv, list(sys.path)
        sys.argv = [str(script), *ctx.args]
        sys.path.insert(0, str(script.resolve().parent))  # as `python SCRIPT` does
        try:
            with explaining(prune=prune) as made:
                runpy.run_path(str(script), run_name="__main__")
        finally:
            sys.argv, sys.path[:] = argv, path
        typer.echo(f"costtune explain: {len(made)} launch(es) explained")

