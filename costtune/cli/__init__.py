"""`costtune` command line: kernels | collect | features | train | eval | study | explain.

One module per command under ``costtune.cli``; each defines ``register(app)``.
"""

from __future__ import annotations

import importlib
import os

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Cheap Triton autotuning with a learned cost model.")

# Command modules, in the order `costtune --help` lists them.
COMMANDS: list[str] = ["demo", "kernels", "collect", "features", "train", "eval", "study",
                       "explain"]

for _name in COMMANDS:
    importlib.import_module(f"costtune.cli.{_name}").register(app)


def main() -> None:  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
