"""costtune's per-user folder (learned per-kernel models, saved models, kept-list and compile
caches), read from the environment and nothing else, so every stage can import it."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["user_home"]

_HOMES: dict[str, Path] = {}


def user_home() -> Path:
    """costtune's per-user folder: ``$COSTTUNE_HOME``, else ``$XDG_CACHE_HOME/costtune``, else
    ``~/.cache/costtune``."""
    raw = os.environ.get("COSTTUNE_HOME")
    if raw:  # a relative one is read against the folder of its first use: a chdir keeps it
        return _HOMES.setdefault(raw, Path(raw).expanduser().absolute())
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return (Path(cache) / "costtune").absolute()
