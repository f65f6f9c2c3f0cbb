"""The dataset: append-only parquet parts, one folder per kernel family, with environment metadata.

Layout: ``<root>/<kernel>/part-<UTC timestamp>-<short uuid>.parquet``; nothing else is loaded (a
parquet file elsewhere in the tree is reported with a ``StoreWarning``, never merged). A part is
written once, whole (temp file, fsync, rename), so a killed collector loses at most the part it
was writing; the ``*.tmp`` it leaves is never loaded and is removed by the next writer once
older than ``stale_temp_s``. Each part's parquet schema metadata holds, under ``b"costtune"``, a
JSON dict: ``schema_version``, ``kernel`` and the caller's environment.

Every (GPU, workload, config) is stored once. The GPU is the row's ``gpu`` column, else its
part's metadata ``gpu``: the same workload measured on another GPU model is new data, not a
duplicate. ``append`` holds the kernel folder's writer lock (``costtune.store.locks``) while it
checks the keys already stored and writes, so several processes (on one machine or sharing a
filesystem) appending the same keys store each key once: the first wins, the others get an
error, or with ``existing="skip"`` write only what is new. ``load`` raises when two parts hold
the same key (unless ``dedupe="last"``): that can only come from parts written around the lock.
``append`` also keeps the folder's key index (``costtune.store.key_index``, a cache), so a
writer in a fresh process reads one file and the few parts written since, not every part.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
import warnings
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from costtune.store import key_index, locks
from costtune.store.checks import KEY_COLUMNS, REQUIRED_COLUMNS, check_rows
from costtune.store.parts import (
    META_KEY,
    SCHEMA_VERSION,
    StoreError,
    StoreWarning,
    check_meta,
    gpu_keys,
    load_parts,
    read_part,
    read_schema,
    write_atomic,
)

__all__ = ["LockTimeout", "Store", "StoreError", "StoreWarning", "load_dataset", "SCHEMA_VERSION",
           "META_KEY", "REQUIRED_COLUMNS", "KEY_COLUMNS", "BAD_PART_OPTIONS"]

PART_RE = re.compile(r"part-\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{8}\.parquet")
RESERVED_META = _RESERVED_META = ("schema_version", "kernel")


class LockTimeout(StoreError):
    """Another writer held a kernel folder's lock for longer than the store waits."""


BAD_PART_OPTIONS = ("error", "skip")
EXISTING_OPTIONS = ("error", "skip")


class Store:
    """Append-only parquet dataset under ``root`` (e.g. ``datasets/h200``).

    ``on_bad_part``: "error" (default: an unreadable or foreign part stops ``load`` and
    ``measured_keys`` with a StoreError naming it) or "skip" (leave it out with a StoreWarning
    naming it and why). ``lock_timeout``: seconds ``append`` waits for another writer.
    ``stale_temp_s``: age after which a writer's leftover ``*.tmp`` counts as abandoned.

    >>> import tempfile
    >>> store = Store(tempfile.mkdtemp())
    >>> row = {"kernel": "gemm", "workload": "gemm_M64_N64_K64_float16", "dtype": "float16",
    ...        "M": 64, "N": 64, "K": 64, "BLOCK_M": 32, "num_warps": 4, "num_stages": 3,
    ...        "config": "BLOCK_M=32,num_warps=4,num_stages=3", "status": "ok", "time_ms": 0.01}
    >>> part = store.append([row], meta={"gpu": "NVIDIA H200"})
    >>> store.part_meta(part)["gpu"], len(store.load("gemm"))
    ('NVIDIA H200', 1)
    >>> store.measured_keys("gemm", gpu="NVIDIA H200")
    {('gemm_M64_N64_K64_float16', 'BLOCK_M=32,num_warps=4,num_stages=3')}
    >>> store.measured_keys("gemm", gpu="NVIDIA A100")
    set()
    """

    def __init__(self, root: str | os.PathLike, *, on_bad_part: str = "error",
                 lock_timeout: float = 600.0, stale_temp_s: float = 3600.0) -> None:
        if on_bad_part not in BAD_PART_OPTIONS:
            raise ValueError(f"on_bad_part must be one of {BAD_PART_OPTIONS}, got "
                             f"{on_bad_part!r}")
        self.root = Path(root)
        self.on_bad_part = on_bad_part
        self.lock_timeout = float(lock_timeout)
        self.stale_temp_s = float(stale_temp_s)
        # (path, (size, mtime_ns)) -> (gpu, workload, config) keys; parts are write-once.
        self._keys_cache: dict[tuple[Path, key_index.Stamp], frozenset] = {}
        self._indexed: dict[Path, dict[str, key_index.Stamp]] = {}  # as its index holds it

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    # ------------------------------------------------------------------------------ layout
    def parts(self, kernel: str | None = None) -> list[Path]:
        """Part files of the layout: by kernel folder, then oldest first (names start with a UTC
        timestamp)."""
        folders = [self.root / kernel] if kernel is not None else _subdirs(self.root)
        return sorted(p for f in folders for p in _files(f) if PART_RE.fullmatch(p.name))

    def strays(self) -> list[Path]:
        """Parquet files in the tree that are not parts of the layout (never loaded): a part
        at the root, or a file in a kernel folder with another name."""
        out = [p for p in _files(self.root) if PART_RE.fullmatch(p.name)]
        for folder in _subdirs(self.root):
            out += [p for p in _files(folder)
                    if p.suffix == ".parquet" and not PART_RE.fullmatch(p.name)]
        return sorted(out)

    def kernels(self) -> list[str]:
        """Kernel families that have at least one part."""
        return sorted({p.parent.name for p in self.parts()})

    def part_meta(self, path: str | os.PathLike) -> dict[str, Any]:
        """The ``costtune`` metadata dict of one part (schema_version, kernel, environment)."""
        path = Path(path)
        return check_meta(path, read_schema(path))

    # ------------------------------------------------------------------------------ write
    def append(self, rows: Sequence[dict[str, Any]] | pd.DataFrame, *,
               meta: dict[str, Any], existing: str = "error") -> Path | None:
        """Write ``rows`` (one kernel family) as one new part; return its path (None if no row
        is written).

        ``meta`` is the environment of the run (see ``costtune.env.environment``). Rows are
        checked first (``costtune.store.checks``: ValueError naming the row and field). A
        (GPU, workload, config) already stored raises ValueError naming the part that holds
        it, or with ``existing="skip"`` that row is left out (another process stored it).
        """
        if existing not in EXISTING_OPTIONS:
            raise ValueError(f"existing must be one of {EXISTING_OPTIONS}, got {existing!r}")
        df = rows.reset_index(drop=True) if isinstance(rows, pd.DataFrame) else pd.DataFrame(
            list(rows))
        if df.empty:
            return None
        kernel, df = check_rows(df)
        clash = [k for k in (meta or {}) if k in _RESERVED_META]
        if clash:
            raise ValueError(f"meta may not set {clash}: the store writes them")
        payload = {"schema_version": SCHEMA_VERSION, "kernel": kernel, **(meta or {})}
        folder = self.root / kernel
        lock, found = self._lock(kernel), None
        try:
            self._clean_temp(folder)
            found = self._part_keys(kernel)
            stored = {key: path for path, (_, keys) in found.items() for key in keys}
            keys = list(zip(gpu_keys(df, payload.get("gpu")), df["workload"], df["config"],
                            strict=True))
            held = [i for i, key in enumerate(keys) if key in stored]
            if held and existing == "error":
                key = keys[held[0]]
                raise ValueError(f"(workload, config) {key[1:]} on GPU {key[0]!r} is already "
                                 f"stored in {stored[key]}; pass existing='skip' to store only "
                                 "new rows")
            if held:
                df = df.drop(index=held).reset_index(drop=True)
                if df.empty:
                    return None
            table = pa.Table.from_pandas(df, preserve_index=False)
            table = table.replace_schema_metadata({
                **(table.schema.metadata or {}),
                META_KEY: json.dumps(payload, default=_json_default).encode(),
            })
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
            path = folder / f"part-{stamp}-{uuid.uuid4().hex[:8]}.parquet"
            write_atomic(table, path)
            written = zip(gpu_keys(df, payload.get("gpu")), df["workload"], df["config"],
                          strict=True)
            found[path] = (key_index.stamp(path.stat()), frozenset(written))
            return path
        finally:
            if found is not None:  # what the next writer in a fresh process reads first
                self._update_index(folder, found)
            lock.release()

    def claim(self, kernel: str, workload: str, *, gpu: str | None):
        """Claim (workload, GPU model) for measuring: a held lock (``.release()`` it when the
        rows are stored), or None when another collector holds it now. Released by the OS if
        this process dies."""
        path = locks.claim_path(self.root, kernel, workload, gpu)
        return locks.try_acquire(path, stale_s=self.stale_temp_s)

    def clean_temp(self, *, older_than_s: float | None = None) -> list[Path]:
        """Remove leftover ``*.tmp`` files of killed writers (older than ``older_than_s``,
        default ``stale_temp_s``: a live writer's temp file is young); returns them."""
        removed: list[Path] = []
        for folder in _subdirs(self.root):
            lock = self._lock(folder.name)
            try:
                removed += self._clean_temp(folder, older_than_s)
            finally:
                lock.release()
        return removed

    # ------------------------------------------------------------------------------- read
    def load(self, kernel: str | None = None, *, dedupe: str | None = None,
             gpu: str | None = None, on_bad_part: str | None = None) -> pd.DataFrame:
        """All rows (or one family's) as a DataFrame, one row per (GPU, workload, config).

        ``dedupe="last"`` keeps the newest part's row when two parts hold the same key; by
        default that raises StoreError naming both files. ``gpu``: only rows measured on that
        GPU model. ``on_bad_part`` overrides the store's. A missing root raises
        FileNotFoundError (as ``load_dataset`` does).
        """
        if not self.root.is_dir():
            raise FileNotFoundError(f"no dataset at {self.root}")
        self._warn_strays()
        return load_parts(self.parts(kernel), dedupe=dedupe, gpu=gpu,
                          on_bad_part=on_bad_part or self.on_bad_part, in_layout=True)

    def measured_keys(self, kernel: str, *, gpu: str | None = None) -> set[tuple[str, str]]:
        """(workload, config) pairs already stored for ``kernel`` on GPU model ``gpu`` (None:
        on any GPU): a resumed collection skips them. Failed configs count as measured: their
        status is the result. A missing root holds nothing."""
        return {(w, c) for _, keys in self._part_keys(kernel).values() for g, w, c in keys
                if gpu is None or g == gpu}

    # ---------------------------------------------------------------------------- helpers
    def _lock(self, kernel: str):
        path = self.root / kernel / locks.WRITER_LOCK
        try:
            return locks.acquire(path, timeout=self.lock_timeout, stale_s=self.stale_temp_s)
        except locks.Timeout:
            raise LockTimeout(f"{path}: another writer held the store's lock for over "
                              f"{self.lock_timeout:.0f} s") from None

    def _clean_temp(self, folder: Path, older_than_s: float | None = None) -> list[Path]:
        limit = self.stale_temp_s if older_than_s is None else float(older_than_s)
        now, removed = time.time(), []
        for tmp in folder.glob("*.tmp"):
            try:
                if now - tmp.stat().st_mtime > limit:
                    tmp.unlink()
                    removed.append(tmp)
            except FileNotFoundError:
                continue
        return removed

    def _part_keys(self, kernel: str) -> dict[Path, tuple[key_index.Stamp, frozenset]]:
        """Each readable part -> (its stamp, its (GPU, workload, config) keys): from this
        process's cache, else the folder's key index (``store.key_index``), else the part."""
        found: dict[Path, tuple[key_index.Stamp, frozenset]] = {}
        skipped, index = [], None
        for path in self.parts(kernel):
            try:
                st = key_index.stamp(path.stat())
                keys = self._keys_cache.get((path, st))
                if keys is None:
                    if index is None:
                        index = self._read_index(path.parent)
                    held, keys = index.get(path.name, (None, None))
                    if held != st:
                        df, meta = read_part(path, columns=[*KEY_COLUMNS, "gpu"],
                                             in_layout=True)
                        keys = frozenset(zip(gpu_keys(df, meta.get("gpu")), df["workload"],
                                             df["config"], strict=True))
                    self._keys_cache[(path, st)] = keys
            except StoreError as exc:
                if self.on_bad_part == "error":
                    raise
                skipped.append(str(exc))
                continue
            found[path] = (st, keys)
        if skipped:
            warnings.warn(f"skipped {len(skipped)} bad part(s): " + "; ".join(skipped),
                          StoreWarning, stacklevel=3)
        return found

    def _read_index(self, folder: Path) -> dict:
        index = key_index.read(folder)
        self._indexed[folder] = {name: st for name, (st, _) in index.items()}
        return index

    def _update_index(self, folder: Path, found: dict) -> None:
        """Rewrite the folder's key index once ``key_index.EVERY`` parts are not in it."""
        if folder not in self._indexed:
            self._read_index(folder)
        indexed = self._indexed[folder]
        if sum(indexed.get(p.name) != st for p, (st, _) in found.items()) < key_index.EVERY:
            return
        if key_index.write(folder, {p.name: entry for p, entry in found.items()}):
            self._indexed[folder] = {p.name: st for p, (st, _) in found.items()}

    def _warn_strays(self) -> None:
        strays = self.strays()
        if strays:
            warnings.warn(f"{len(strays)} parquet file(s) outside the store's layout "
                          f"(<root>/<kernel>/part-*.parquet) not loaded: "
                          + ", ".join(map(str, strays)), StoreWarning, stacklevel=3)


def load_dataset(path: str | os.PathLike, *, kernel: str | None = None,
                 dedupe: str | None = None, gpu: str | None = None,
                 on_bad_part: str = "error") -> pd.DataFrame:
    """Load a store root, one kernel folder, or one part file; one row per (GPU, workload,
    config). ``kernel``: one family's rows, or one implementation's (``"gemm_tma"``: the rows
    of gemm whose ``implementation`` is gemm_tma). ``gpu``: only rows of that GPU model;
    ``on_bad_part="skip"`` leaves unreadable parts out (with a StoreWarning naming them). A
    missing path raises FileNotFoundError.

    >>> import costtune, tempfile
    >>> costtune.load_dataset(tempfile.mkdtemp()).empty
    True
    """
    path = Path(path)
    if on_bad_part not in BAD_PART_OPTIONS:
        raise ValueError(f"on_bad_part must be one of {BAD_PART_OPTIONS}, got {on_bad_part!r}")
    family = _family_holding(path, kernel)
    if family is not None:  # an implementation's rows live in its family's folder
        df = load_dataset(path, kernel=family, dedupe=dedupe, gpu=gpu, on_bad_part=on_bad_part)
        return df[df["implementation"] == kernel].reset_index(drop=True) if len(df) else df
    if path.is_file():
        df = load_parts([path], dedupe=dedupe, gpu=gpu, on_bad_part=on_bad_part)
    elif path.is_dir():
        store = Store(path, on_bad_part=on_bad_part)
        files = _files(path)
        own = [p for p in files if PART_RE.fullmatch(p.name)]
        if own and not store.parts():  # a kernel folder (or a copy of one)
            odd = sorted(p for p in files if p.suffix == ".parquet" and p not in own)
            if odd:
                warnings.warn(f"{len(odd)} parquet file(s) not named like a part not loaded: "
                              + ", ".join(map(str, odd)), StoreWarning, stacklevel=2)
            df = load_parts(own, dedupe=dedupe, gpu=gpu, on_bad_part=on_bad_part)
        else:
            df = store.load(kernel, dedupe=dedupe, gpu=gpu)
            _warn_unknown_kernel(store, kernel)
    else:
        raise FileNotFoundError(f"no dataset at {path}")
    if kernel is not None and not df.empty:
        df = df[df["kernel"] == kernel].reset_index(drop=True)
    if gpu is not None and df.empty and _holds_rows(path):
        warnings.warn(f"no rows measured on GPU {gpu!r} in {path} (the gpu column holds "
                      "full model names, e.g. 'NVIDIA H200')", StoreWarning, stacklevel=2)
    return df


def _family_holding(path: Path, kernel: str | None) -> str | None:
    """The family of ``kernel`` when it names one of the suite's implementations other than
    the family's original (and no folder of ``path`` is named after it), else None."""
    from costtune.kernels.base import IMPLEMENTATIONS, family_of

    if kernel is None or kernel in IMPLEMENTATIONS or (path / kernel).is_dir():
        return None
    try:
        return family_of(kernel)
    except (KeyError, ValueError):
        return None


def _holds_rows(path: Path) -> bool:
    """Whether ``path`` holds any part at all (its rows then are on other GPUs)."""
    return path.is_file() or any(path.glob("**/part-*.parquet"))


def _warn_unknown_kernel(store: Store, kernel: str | None) -> None:
    """A StoreWarning when ``kernel`` names no folder of a store that holds others and is no
    suite kernel's name either (a typo; a collection may load a suite kernel's rows before
    its first part exists)."""
    if kernel is None:
        return
    from costtune.kernels.base import IMPLEMENTATIONS

    held = store.kernels()
    suite = {*IMPLEMENTATIONS, *(n for names in IMPLEMENTATIONS.values() for n in names)}
    if held and kernel not in held and kernel not in suite:
        warnings.warn(f"no kernel {kernel!r} in {store.root}: it holds {', '.join(held)}",
                      StoreWarning, stacklevel=3)


def _subdirs(root: Path) -> list[Path]:
    try:
        return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _files(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)
