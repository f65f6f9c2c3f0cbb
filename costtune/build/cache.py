"""The compile-record cache: one small JSON file per compile job, keyed by kernel source hash,
specialization, options, arch and triton version (the job's key), so a record is reused across
processes and runs, and a killed run keeps what it compiled."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$COSTTUNE_CACHE``, else ``features`` in costtune's per-user folder
    (``$COSTTUNE_HOME``, ``$XDG_CACHE_HOME/costtune`` or ``~/.cache/costtune``)."""
    from costtune.home import user_home

    env = os.environ.get("COSTTUNE_CACHE")
    return Path(env) if env else user_home() / "features"


def record_path(cache: Path, key: str) -> Path:
    return cache / key[:2] / f"{key}.json"


def read_record(cache: Path, key: str, *, sass: bool) -> dict[str, Any] | None:
    try:
        rec = json.loads(record_path(cache, key).read_text())
    except (OSError, ValueError):
        return None
    # A record made without SASS counts cannot answer a request that wants them.
    return None if sass and not rec.get("sass", False) else rec


def write_record(cache: Path, key: str, rec: dict[str, Any]) -> None:
    path = record_path(cache, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(rec, default=str))
        os.replace(tmp, path)
    except OSError as exc:  # a read-only cache slows us down but changes no result
        log.warning("compile cache not written (%s): %s", path, exc)
