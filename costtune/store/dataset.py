"""The dataset: append-only parquet parts, one folder per kernel family, with environment metadata.

Layout: ``<root>/<kernel>/part-<UTC timestamp>-<short uuid>.parquet``. A part is written whole
(temp file, fsync, rename), so a killed collector loses at most the part it was writing; the
stray ``*.tmp`` it leaves is never loaded. Each part's parquet schema metadata holds, under
``b"costtune"``, a JSON dict: ``schema_version``, ``kernel`` and the caller's environment.

Every (workload, config) is stored once: ``append`` refuses a key already stored and ``load``
raises when two parts hold the same key (unless ``dedupe="last"``).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from costtune.types import Status

SCHEMA_VERSION = 1
META_KEY = b"costtune"
REQUIRED_COLUMNS = ("kernel", "workload", "dtype", "config", "status", "time_ms")
KEY_COLUMNS = ("workload", "config")
_PART_GLOB = "part-*.parquet"
_RESERVED_META = ("schema_version", "kernel")
_STORABLE_STATUS = frozenset(s.value for s in Status) - {Status.NOT_MEASURED.value}


class StoreError(ValueError):
    """A part that cannot be trusted: unreadable, wrong schema version, missing fields, or
    holding a (workload, config) another part also holds. The message names the file(s)."""


class Store:
    """Append-only parquet dataset under ``root`` (e.g. ``datasets/h200``).

    >>> import tempfile
    >>> store = Store(tempfile.mkdtemp())
    >>> row = {"kernel": "gemm", "workload": "gemm_M64_N64_K64_float16", "dtype": "float16",
    ...        "M": 64, "N": 64, "K": 64, "BLOCK_M": 32, "num_warps": 4, "num_stages": 3,
    ...        "config": "BLOCK_M=32,num_warps=4,num_stages=3", "status": "ok", "time_ms": 0.01}
    >>> part = store.append([row], meta={"gpu": "NVIDIA H200"})
    >>> store.part_meta(part)["gpu"], len(store.load("gemm"))
    ('NVIDIA H200', 1)
    >>> store.measured_keys("gemm")
    {('gemm_M64_N64_K64_float16', 'BLOCK_M=32,num_warps=4,num_stages=3')}
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        # (path, mtime_ns, size) -> keys in that part; parts are immutable once renamed in.
        self._keys_cache: dict[tuple[Path, int, int], set[tuple[str, str]]] = {}

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def parts(self, kernel: str | None = None) -> list[Path]:
        """Part files, oldest first (names start with a UTC timestamp); temp files excluded."""
        if kernel is not None:
            return sorted((self.root / kernel).glob(_PART_GLOB))
        return sorted(self.root.glob(f"*/{_PART_GLOB}"))

    def kernels(self) -> list[str]:
        """Kernel families that have at least one part."""
        return sorted({p.parent.name for p in self.parts()})

    def part_meta(self, path: str | os.PathLike) -> dict[str, Any]:
        """The ``costtune`` metadata dict of one part (schema_version, kernel, environment)."""
        path = Path(path)
        return _check_meta(path, _read_schema(path))

    def append(self, rows: Sequence[dict[str, Any]] | pd.DataFrame, *,
               meta: dict[str, Any]) -> Path | None:
        """Write ``rows`` (one kernel family) as one new part; return its path (None if empty).

        ``meta`` is the environment of the run (see ``costtune.env.environment``). Raises
        ValueError for mixed kernels, missing required columns, statuses that are not
        storable, or a (workload, config) already in the rows or in the store.
        """
        df = rows.reset_index(drop=True) if isinstance(rows, pd.DataFrame) else pd.DataFrame(
            list(rows))
        if df.empty:
            return None
        kernel = _check_rows(df)
        clash = [k for k in (meta or {}) if k in _RESERVED_META]
        if clash:
            raise ValueError(f"meta may not set {clash}: the store writes them")
        stored = self._stored_keys(kernel)
        for key in zip(df["workload"], df["config"], strict=True):
            if key in stored:
                raise ValueError(f"(workload, config) {key} is already stored in "
                                 f"{stored[key]}; collect only keys not in measured_keys()")
        payload = {"schema_version": SCHEMA_VERSION, "kernel": kernel, **(meta or {})}
        table = pa.Table.from_pandas(df, preserve_index=False)
        table = table.replace_schema_metadata({
            **(table.schema.metadata or {}),
            META_KEY: json.dumps(payload, default=_json_default).encode(),
        })
        folder = self.root / kernel
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        path = folder / f"part-{stamp}-{uuid.uuid4().hex[:8]}.parquet"
        _write_atomic(table, path)
        return path

    def load(self, kernel: str | None = None, *, dedupe: str | None = None) -> pd.DataFrame:
        """All rows (or one family's) as a DataFrame, one row per (workload, config).

        ``dedupe="last"`` keeps the newest part's row when two parts hold the same key;
        by default that raises StoreError naming both files.
        """
        return _load_parts(self.parts(kernel), dedupe=dedupe)

    def measured_keys(self, kernel: str) -> set[tuple[str, str]]:
        """(workload, config) pairs already stored for ``kernel``: a resumed collection skips
        them. Failed configs count as measured: their status is the result."""
        return set(self._stored_keys(kernel))

    def _stored_keys(self, kernel: str) -> dict[tuple[str, str], Path]:
        out: dict[tuple[str, str], Path] = {}
        for path in self.parts(kernel):
            st = path.stat()
            cache_key = (path, st.st_mtime_ns, st.st_size)
            keys = self._keys_cache.get(cache_key)
            if keys is None:
                df = _read_part(path, columns=list(KEY_COLUMNS))
                keys = set(zip(df["workload"], df["config"], strict=True))
                self._keys_cache[cache_key] = keys
            out.update(dict.fromkeys(keys, path))
        return out


def load_dataset(path: str | os.PathLike, *, kernel: str | None = None,
                 dedupe: str | None = None) -> pd.DataFrame:
    """Load a store root, one kernel folder, or one part file; one row per (workload, config).

    >>> import costtune, tempfile
    >>> costtune.load_dataset(tempfile.mkdtemp()).empty
    True
    """
    path = Path(path)
    if path.is_file():
        parts = [path]
    elif path.is_dir():
        parts = sorted(path.glob(_PART_GLOB))
        if not parts:  # a store root: one folder per kernel
            store = Store(path)
            parts = store.parts(kernel)
    else:
        raise FileNotFoundError(f"no dataset at {path}")
    df = _load_parts(parts, dedupe=dedupe)
    if kernel is not None:
        df = df[df["kernel"] == kernel].reset_index(drop=True)
    return df


def _load_parts(parts: Iterable[Path], *, dedupe: str | None) -> pd.DataFrame:
    if dedupe not in (None, "last"):
        raise ValueError(f"dedupe must be None or 'last', got {dedupe!r}")
    parts = list(parts)
    frames = [_read_part(p) for p in parts]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in REQUIRED_COLUMNS})
    source = [i for i, f in enumerate(frames) for _ in range(len(f))]
    df = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    dup = df.duplicated(list(KEY_COLUMNS), keep=False)
    if dup.any():
        if dedupe == "last":
            df = df[~df.duplicated(list(KEY_COLUMNS), keep="last")]
        else:
            first = df.index[dup][0]
            key = tuple(df.loc[first, list(KEY_COLUMNS)])
            same = (df["workload"] == key[0]) & (df["config"] == key[1])
            files = sorted({str(parts[source[i]]) for i in df.index[same]})
            where = " and ".join(files) if len(files) > 1 else f"{files[0]} (twice)"
            raise StoreError(f"{int(dup.sum())} rows share a (workload, config); e.g. {key} is "
                             f"in {where}; load with dedupe='last' to keep the newest")
    df = df.reset_index(drop=True)
    return _restore_int_columns(df, frames) if len(frames) > 1 else df


def _restore_int_columns(df: pd.DataFrame, frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Columns integer (or bool) in every part that has them come back nullable Int64/boolean
    instead of the float/object pandas makes when another family lacks the column."""
    for col in df.columns:
        dtypes = [f[col].dtype for f in frames if col in f.columns]
        if all(pd.api.types.is_bool_dtype(d) for d in dtypes):
            if not pd.api.types.is_bool_dtype(df[col].dtype):
                df[col] = df[col].astype("boolean")
        elif all(pd.api.types.is_integer_dtype(d) for d in dtypes):
            if not pd.api.types.is_integer_dtype(df[col].dtype):
                df[col] = df[col].astype("Int64")
    return df


def _read_schema(path: Path) -> pa.Schema:
    try:
        return pq.read_schema(path)
    except Exception as e:  # pyarrow raises several types for a torn or foreign file
        raise StoreError(f"{path}: unreadable parquet part ({type(e).__name__}: {e})") from e


def _check_meta(path: Path, schema: pa.Schema) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise StoreError(f"{path}: no 'costtune' metadata in the parquet schema "
                         "(not written by costtune.Store)")
    try:
        meta = json.loads(raw)
    except ValueError as e:
        raise StoreError(f"{path}: 'costtune' metadata is not JSON ({e})") from e
    if not isinstance(meta, dict):
        raise StoreError(f"{path}: 'costtune' metadata is not a JSON object")
    for field in _RESERVED_META:
        if field not in meta:
            raise StoreError(f"{path}: 'costtune' metadata lacks field {field!r}")
    if meta["schema_version"] != SCHEMA_VERSION:
        raise StoreError(f"{path}: field 'schema_version' is {meta['schema_version']!r}; "
                         f"this costtune reads schema_version {SCHEMA_VERSION}")
    missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
    if missing:
        raise StoreError(f"{path}: required column(s) {missing} missing")
    return meta


def _read_part(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    meta = _check_meta(path, _read_schema(path))
    try:
        df = pq.read_table(path, columns=columns).to_pandas()
    except Exception as e:
        raise StoreError(f"{path}: unreadable parquet part ({type(e).__name__}: {e})") from e
    if "kernel" in df.columns and not (df["kernel"] == meta["kernel"]).all():
        raise StoreError(f"{path}: column 'kernel' disagrees with metadata kernel "
                         f"{meta['kernel']!r}")
    return df


def _check_rows(df: pd.DataFrame) -> str:
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"rows lack required column(s) {missing}")
    kernels = df["kernel"].dropna().unique()
    if len(kernels) != 1 or df["kernel"].isna().any():
        raise ValueError(f"one part holds one kernel family; rows have kernel {list(kernels)}")
    kernel = str(kernels[0])
    if not kernel or kernel != Path(kernel).name or kernel.startswith("."):
        raise ValueError(f"kernel {kernel!r} is not a usable folder name")
    bad = sorted(set(df["status"].astype(str)) - _STORABLE_STATUS)
    if bad:
        raise ValueError(f"unstorable status value(s) {bad}; expected one of "
                         f"{sorted(_STORABLE_STATUS)}")
    dup = df.duplicated(list(KEY_COLUMNS))
    if dup.any():
        key = tuple(df.loc[dup.idxmax(), list(KEY_COLUMNS)])
        raise ValueError(f"rows repeat (workload, config) {key}")
    return kernel


def _write_atomic(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    try:  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)
