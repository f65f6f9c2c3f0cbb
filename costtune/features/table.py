"""Features of (workload, config) pairs, keyed like the dataset.

- ``static``: from problem sizes and config alone (tiles, waves, padding, shared-memory estimate,
  intensity, trip counts); cheap enough for the autotune pruning hook.
- ``compiled``: from an ahead-of-time compile for the target arch on the CPU (registers, spills,
  shared memory, PTX/SASS instruction counts); a second stage on a shortlist, or offline.

>>> import costtune.features as F
>>> table = F.feature_table(dataset, compiled=False)  # doctest: +SKIP
>>> F.compute_features("datasets/h200")  # writes datasets/h200/features.parquet  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from costtune.build.aot import classify_error, kernel_source_hash, spec_text, specialize
from costtune.features.compiled import COMPILED_FEATURES, compiled_features, launch_jobs
from costtune.features.static import (
    NUM_SMS,
    STATIC_FEATURES,
    parse_config_key,
    static_features,
    static_features_for,
)

KEY_COLUMNS = ["workload", "config"]
_BATCH_ROWS = 512
META_KEY = b"costtune_features"

__all__ = ["COMPILED_FEATURES", "KEY_COLUMNS", "STATIC_FEATURES", "classify_error",
           "compiled_features", "compute_features", "feature_table", "kernel_source_hash",
           "feature_table_paths", "launch_jobs", "load_feature_tables", "parse_config_key",
           "spec_text", "specialize", "static_features", "static_features_for"]


def feature_table(df: pd.DataFrame, *, compiled: bool = True, arch: int = 90,
                  num_sms: int = NUM_SMS, workers: int | None = None,
                  cache_dir: str | os.PathLike | None = None, sass: bool = True) -> pd.DataFrame:
    """One row per distinct (workload, config) of ``df``: the keys, ``STATIC_FEATURES`` and,
    with ``compiled``, ``compile_status``/``compile_error`` and ``COMPILED_FEATURES``.

    Join it back with ``df.merge(table, on=KEY_COLUMNS)``.
    """
    missing = [c for c in (*KEY_COLUMNS, "kernel", "dtype") if c not in df.columns]
    if missing:
        raise ValueError(f"dataset lacks column(s) {missing}")
    keys = df.drop_duplicates(KEY_COLUMNS).reset_index(drop=True)
    table = static_features(keys, num_sms=num_sms)
    if compiled:
        comp = compiled_features(keys, arch=arch, workers=workers, cache_dir=cache_dir,
                                 sass=sass)
        table = table.merge(comp, on=KEY_COLUMNS, how="left", validate="one_to_one")
    return table


def compute_features(dataset: str | os.PathLike | pd.DataFrame, *,
                     out: str | os.PathLike | None = None, compiled: bool = True,
                     arch: int = 90, workers: int | None = None, num_sms: int = NUM_SMS,
                     cache_dir: str | os.PathLike | None = None,
                     progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Feature table of a dataset (a store root, kernel folder, part file or DataFrame), written
    as parquet to ``out`` (default ``<dataset root>/features.parquet``; a DataFrame input is
    written only when ``out`` is given). The CLI's ``costtune features --dataset DIR``.

    ``progress(done, total)`` is called as batches of whole workloads finish (shared compiles
    across batches come from the compile-record cache)."""
    if isinstance(dataset, pd.DataFrame):
        df, default_out = dataset, None
    else:
        from costtune.store.dataset import load_dataset

        path = Path(dataset)
        df = load_dataset(path)
        default_out = (path if path.is_dir() else path.parent) / "features.parquet"
    table = _in_batches(df, progress, compiled=compiled, arch=arch, num_sms=num_sms,
                        workers=workers, cache_dir=cache_dir)
    target = Path(out) if out is not None else default_out
    if target is not None:
        _write(table, target, meta={"static": STATIC_FEATURES,
                                    "compiled": COMPILED_FEATURES if compiled else [],
                                    "arch": arch, "num_sms": num_sms, **_versions()})
    return table


def _in_batches(df: pd.DataFrame, progress: Callable[[int, int], None] | None,
                **options) -> pd.DataFrame:
    if progress is None:
        return feature_table(df, **options)
    keys = df.drop_duplicates(KEY_COLUMNS)
    batches, batch = [], []
    for _, group in keys.groupby("workload", sort=False):
        batch.append(group)
        if sum(len(g) for g in batch) >= _BATCH_ROWS:
            batches.append(pd.concat(batch))
            batch = []
    batches += [pd.concat(batch)] if batch else []
    tables, done = [], 0
    progress(0, len(keys))
    for part in batches:
        tables.append(feature_table(part, **options))
        done += len(part)
        progress(done, len(keys))
    if not tables:
        return feature_table(df, **options)
    return pd.concat(tables, ignore_index=True)


def feature_table_paths(dataset: str | os.PathLike, kernel: str) -> list[Path]:
    """Where a store root's compiled features of ``kernel`` may be, in the order looked at."""
    root = Path(dataset)
    return [root / f"features_{kernel}.parquet", root / "features.parquet"]


def load_feature_tables(dataset: str | os.PathLike, kernels: list[str]
                        ) -> tuple[pd.DataFrame | None, list[str]]:
    """The compiled-feature table of a store root for ``kernels``: per kernel
    ``features_<kernel>.parquet``, else that kernel's rows of ``features.parquet``. Returns
    (the tables concatenated, or None when none was found; kernels without compiled features).
    """
    found, missing = [], []
    for kernel in kernels:
        table = None
        for path in feature_table_paths(dataset, kernel):
            if path.exists():
                table = pd.read_parquet(path)
                table = table[table["workload"].str.startswith(f"{kernel}_")]
                break
        if table is None or table.empty or "compile_status" not in table.columns:
            missing.append(kernel)
        else:
            found.append(table)
    return (pd.concat(found, ignore_index=True) if found else None), missing


def _versions() -> dict[str, str]:
    import triton

    return {"triton": triton.__version__}


def _write(table: pd.DataFrame, path: Path, *, meta: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow = pa.Table.from_pandas(table, preserve_index=False)
    arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}),
                                           META_KEY: json.dumps(meta).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(arrow, tmp)
    os.replace(tmp, path)
