"""CLI sub-commands, one module each; every module defines ``register(app)``.

Kept apart from ``costtune/cli.py`` so each command's options and imports stay next to it.
"""

from __future__ import annotations

import importlib

# Module names under costtune.commands, in the order `costtune --help` lists them.
COMMANDS: list[str] = ["features", "train", "eval", "study"]


def register_all(app) -> None:
    for name in COMMANDS:
        importlib.import_module(f"costtune.commands.{name}").register(app)
