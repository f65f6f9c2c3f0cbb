"""One part file: reading it (schema metadata checked, errors naming the file), writing it
whole, and loading several into one table (keys checked, bad parts skipped on request)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from costtune.store.checks import KEY_COLUMNS, REQUIRED_COLUMNS
from costtune.types import CosttuneWarning

SCHEMA_VERSION = 1
META_KEY = b"costtune"
_RESERVED_META = ("schema_version", "kernel")


class StoreError(ValueError):
    """A part that cannot be trusted: unreadable, wrong schema version, missing fields, or
    holding a (workload, config) another part also holds. The message names the file(s)."""


class StoreWarning(CosttuneWarning):
    """Something in a store was left out of a load: a bad part skipped on request, or a
    parquet file outside the layout. The message names the files."""


def read_schema(path: Path) -> pa.Schema:
    try:
        return pq.read_schema(path)
    except Exception as e:  # pyarrow raises several types for a torn or foreign file
        raise StoreError(f"{path}: unreadable parquet part ({type(e).__name__}: "
                         f"{_first_line(e)})") from e


def check_meta(path: Path, schema: pa.Schema) -> dict[str, Any]:
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


def read_part(path: Path, columns: list[str] | None = None, *, in_layout: bool = False
              ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(rows, metadata) of one part; ``columns`` absent from the part are left out.
    ``in_layout``: the part sits in its kernel's folder, which must match its metadata."""
    schema = read_schema(path)
    meta = check_meta(path, schema)
    if in_layout and meta["kernel"] != path.parent.name:
        raise StoreError(f"{path}: metadata kernel {meta['kernel']!r} differs from its folder "
                         f"{path.parent.name!r}")
    if columns is not None:
        columns = [c for c in columns if c in schema.names]
    try:
        df = pq.read_table(path, columns=columns).to_pandas()
    except Exception as e:
        raise StoreError(f"{path}: unreadable parquet part ({type(e).__name__}: "
                         f"{_first_line(e)})") from e
    if "kernel" in df.columns and not (df["kernel"] == meta["kernel"]).all():
        raise StoreError(f"{path}: column 'kernel' disagrees with metadata kernel "
                         f"{meta['kernel']!r}")
    return df, meta


def gpu_keys(df: pd.DataFrame, default: Any) -> list[str]:
    """The GPU of each row for its key: the ``gpu`` column, else the part's metadata GPU."""
    fallback = "" if default is None else str(default)
    if "gpu" not in df.columns:
        return [fallback] * len(df)
    return [fallback if v is None or v != v else str(v) for v in df["gpu"]]


def load_parts(parts: list[Path], *, dedupe: str | None, gpu: str | None = None,
               on_bad_part: str = "error", in_layout: bool = False) -> pd.DataFrame:
    """The rows of ``parts`` as one table, one row per (GPU, workload, config); rows from
    several GPU models carry a ``gpu`` column (the model each part was measured on)."""
    if dedupe not in (None, "last"):
        raise ValueError(f"dedupe must be None or 'last', got {dedupe!r}")
    frames, keys, used, skipped = [], [], [], []
    for path in parts:
        try:
            df, meta = read_part(path, in_layout=in_layout)
        except StoreError as exc:
            if on_bad_part != "skip":
                raise
            skipped.append(str(exc))
            continue
        g = np.array(gpu_keys(df, meta.get("gpu")), dtype=object)
        if gpu is not None:
            df, g = df[g == gpu].reset_index(drop=True), g[g == gpu]
        frames.append(df)
        keys.append(g)
        used.append(path)
    if skipped:
        warnings.warn(f"skipped {len(skipped)} bad part(s): " + "; ".join(skipped),
                      StoreWarning, stacklevel=3)
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in REQUIRED_COLUMNS})
    source = np.concatenate([np.full(len(f), i) for i, f in enumerate(frames)])
    df = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    key = pd.DataFrame({"gpu": np.concatenate(keys), "workload": df["workload"].to_numpy(),
                        "config": df["config"].to_numpy()})
    if key["gpu"].nunique() > 1:  # rows of several GPU models: say which (metadata's too)
        df = df.assign(gpu=key["gpu"].to_numpy())
    dup = key.duplicated(keep=False).to_numpy()
    if dup.any():
        if dedupe == "last":
            df = df[~key.duplicated(keep="last").to_numpy()]
        else:
            first = int(np.flatnonzero(dup)[0])
            same = (key == key.iloc[first]).all(axis=1).to_numpy()
            files = sorted({str(used[source[i]]) for i in np.flatnonzero(same)})
            where = " and ".join(files) if len(files) > 1 else f"{files[0]} (twice)"
            k = tuple(key.iloc[first][list(KEY_COLUMNS)])
            raise StoreError(f"{int(dup.sum())} rows share a (GPU, workload, config); e.g. {k} "
                             f"is in {where}; load with dedupe='last' to keep the newest")
    df = df.reset_index(drop=True)
    df = _restore_int_columns(df, frames) if len(frames) > 1 else df
    return with_implementation(df)


def with_implementation(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with an ``implementation`` column: parts written before implementations existed
    (and their rows in a mixed table) hold the family's original kernel, named like the family."""
    if "kernel" not in df.columns:
        return df
    if "implementation" not in df.columns:
        after = "dtype" if "dtype" in df.columns else "kernel"
        pos = list(df.columns).index(after) + 1
        df.insert(pos, "implementation", df["kernel"].astype(str).to_numpy())
    elif df["implementation"].isna().any():
        df["implementation"] = df["implementation"].where(df["implementation"].notna(),
                                                          df["kernel"])
    return df


def _restore_int_columns(df: pd.DataFrame, frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Columns integer (or bool) in every part that has them come back nullable Int64/boolean
    instead of the float/object pandas makes when another family lacks the column."""
    for col in df.columns:
        dtypes = [f[col].dtype for f in frames if col in f.columns]
        if not dtypes:  # added here (the gpu column), in no part
            continue
        if all(pd.api.types.is_bool_dtype(d) for d in dtypes):
            if not pd.api.types.is_bool_dtype(df[col].dtype):
                df[col] = df[col].astype("boolean")
        elif all(pd.api.types.is_integer_dtype(d) for d in dtypes):
            if not pd.api.types.is_integer_dtype(df[col].dtype):
                df[col] = df[col].astype("Int64")
    return df


def write_atomic(table: pa.Table, path: Path) -> None:
    """Write ``path`` whole: a temp file beside it, fsync, rename, fsync the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
