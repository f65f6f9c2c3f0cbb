"""`costtune` command line: kernels | collect | features | train | eval | study | explain.

One module per command under ``costtune.cli``; each defines ``register(app)``. Every error is
one line on stderr (``error: ...``) with a non-zero exit: 2 for bad arguments or input, 1 for
anything else (``COSTTUNE_DEBUG=1`` shows the traceback of an unexpected one). Nothing is
written into the installed package or the shipped dataset unless a command is told to.
"""

from __future__ import annotations

import importlib
import os

import typer

from costtune.cli.console import OneLineErrors

app = typer.Typer(add_completion=False, no_args_is_help=True, cls=OneLineErrors,
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
