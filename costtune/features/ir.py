"""IR features per (workload, config): TTIR/TTGIR op counts (``costtune.build.ir.IR_FEATURES``)
from a compile that stops after the ``ttgir`` stage: no LLVM, PTX, ptxas or disassembly, so
several times cheaper per config than compiled features, and no GPU.

Rows are specialized exactly as for compiled features (``compiled.launch_jobs``: the JIT's own
binder) and the counts are the main launch's. Records are cached beside the compiled ones
(``build.cache``) under ``<compile key>.ir``; a full compile record of the same job (which carries
the same counts, ``aot.PARSER_VERSION`` >= 2) answers too, so a job compiled in full is not
compiled again for its IR.

>>> import pandas as pd
>>> df = pd.DataFrame([{"kernel": "softmax", "workload": "w", "dtype": "float16",
...     "rows": 100, "cols": 1000,
...     "config": "BLOCK_N=1024,ROWS_PER_PROG=1,num_warps=4,num_stages=1"}])
>>> ir_features(df, workers=1)[["ir_status", "ir_reduce", "ttgir_num_warps"]]  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from costtune.build.aot import CompileJob, compile_ir
from costtune.build.cache import default_cache_dir, read_record, write_record
from costtune.build.ir import IR_FEATURES
from costtune.build.pool import get_pool
from costtune.build.threads import interpreting
from costtune.features.compiled import KEY_COLUMNS, _compile_all, rows_to_jobs
from costtune.types import Status

log = logging.getLogger(__name__)

IR_COLUMNS = ["ir_status", "ir_error", "ir_s", "ir_key"]
IR_SUFFIX = ".ir"

__all__ = ["IR_COLUMNS", "IR_FEATURES", "compute_ir_features", "ir_features", "ir_jobs",
           "ir_table_path", "load_ir_tables"]


def ir_features(df: pd.DataFrame, *, arch: int = 90, workers: int | None = None,
                cache_dir: str | os.PathLike | None = None,
                threads: bool = False) -> pd.DataFrame:
    """One row per distinct (workload, config) of ``df``: ``ir_status`` (``ok`` when the TTIR and
    TTGIR stages ran), ``ir_error``, ``ir_s`` (seconds of the IR-only compiles, NaN when a full
    compile record answered), ``ir_key`` and ``IR_FEATURES`` (NaN where the IR failed).

    ``workers``/``threads`` as for ``compiled_features``; failures are rows, never raised.
    """
    missing = [c for c in (*KEY_COLUMNS, "kernel", "dtype") if c not in df.columns]
    if missing:
        raise ValueError(f"ir_features: rows lack column(s) {missing}")
    keys = df.drop_duplicates(list(KEY_COLUMNS)).reset_index(drop=True)
    workers = max(1, workers or os.cpu_count() or 1)
    pool = get_pool(workers) if interpreting() and not keys.empty else None
    if pool is not None:
        row_jobs = pool.submit(rows_to_jobs, keys, arch).result()
    else:
        row_jobs = rows_to_jobs(keys, arch)
    mains = {item[0][item[1]].key: item[0][item[1]] for item in row_jobs
             if not isinstance(item, str)}
    records = ir_jobs(list(mains.values()), workers=workers, cache_dir=cache_dir, pool=pool,
                      threads=threads and pool is None)
    out = [_row(item, records) for item in row_jobs]
    table = pd.DataFrame(out, columns=[*IR_COLUMNS, *IR_FEATURES])
    table.insert(0, "config", keys["config"].to_numpy())
    table.insert(0, "workload", keys["workload"].to_numpy())
    return table


def ir_jobs(jobs: list[CompileJob], *, workers: int | None = None,
            cache_dir: str | os.PathLike | None = None, pool: Any = None,
            threads: bool = False) -> dict[str, dict[str, Any]]:
    """``{job.key: record}`` with the IR counts of every job: a cached full-compile record that
    has them, else a cached IR record, else an IR-only compile (cached as it arrives)."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    records: dict[str, dict[str, Any]] = {}
    todo = []
    for job in {j.key: j for j in jobs}.values():
        full = read_record(cache, job.key, sass=False)
        if full is not None and IR_FEATURES[0] in full:
            records[job.key] = {**full, "status": Status.OK.value, "error": "",
                                "compile_s": np.nan}
            continue
        rec = read_record(cache, job.key + IR_SUFFIX, sass=False)
        if rec is None:
            todo.append(job)
        else:
            records[job.key] = rec
    if todo:
        start = time.perf_counter()
        by_key = {j.key: j for j in todo}
        for key, fresh in _compile_all(todo, workers=workers, sass=False, pool=pool,
                                       threads=threads, fn=compile_ir):
            job = by_key[key]
            rec = {**fresh, "kernel_fn": f"{job.fn_module}.{job.fn_name}", "spec": job.spec,
                   "arch": job.arch, "stage": "ttgir"}
            if not rec.pop("transient", False):
                write_record(cache, key + IR_SUFFIX, rec)
            records[key] = rec
        log.info("IR of %d jobs in %.1fs (%d cached)", len(todo), time.perf_counter() - start,
                 len(records) - len(todo))
    return records


def _row(item: tuple[list[CompileJob], int] | str,
         records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if isinstance(item, str):
        status, _, error = item.partition("\t")
        return {"ir_status": status, "ir_error": error[:600]}
    jobs, main = item
    rec = records[jobs[main].key]
    row = {k: rec.get(k, np.nan) for k in IR_FEATURES}
    row.update(ir_status=rec["status"], ir_error=rec.get("error", ""),
               ir_s=rec.get("compile_s", np.nan), ir_key=jobs[main].key)
    return row


def ir_table_path(dataset: str | os.PathLike, kernel: str) -> Path:
    """Where a store root keeps ``kernel``'s IR feature table: ``features_<kernel>_ir.parquet``."""
    return Path(dataset) / f"features_{kernel}_ir.parquet"


def load_ir_tables(dataset: str | os.PathLike, kernels: list[str]
                   ) -> tuple[pd.DataFrame | None, list[str]]:
    """The IR-feature tables of a store root for ``kernels`` (concatenated, or None when none
    was found) and the kernels without one."""
    found, missing = [], []
    for kernel in kernels:
        path = ir_table_path(dataset, kernel)
        table = pd.read_parquet(path) if path.exists() else None
        if table is None or table.empty or "ir_status" not in table.columns:
            missing.append(kernel)
        else:
            found.append(table)
    return (pd.concat(found, ignore_index=True) if found else None), missing


def compute_ir_features(dataset: str | os.PathLike | pd.DataFrame, *,
                        out: str | os.PathLike | None = None, arch: int = 90,
                        workers: int | None = None,
                        cache_dir: str | os.PathLike | None = None,
                        progress: Callable[[int, int], None] | None = None,
                        batch_rows: int = 512) -> pd.DataFrame:
    """``ir_features`` of a dataset (a store root, kernel folder, part file or DataFrame),
    written as parquet to ``out`` when given (the CLI's ``costtune features --ir``), with the
    feature names, arch and triton version in the file's metadata. ``progress(done, total)``
    is called as batches of whole workloads finish."""
    from costtune.features.table import _versions, _write

    if isinstance(dataset, pd.DataFrame):
        df = dataset
    else:
        from costtune.store.dataset import load_dataset

        df = load_dataset(Path(dataset))
    keys = df.drop_duplicates(list(KEY_COLUMNS))
    batches, batch, size = [], [], 0
    for _, group in keys.groupby("workload", sort=False):
        batch.append(group)
        size += len(group)
        if size >= batch_rows:
            batches.append(pd.concat(batch))
            batch, size = [], 0
    batches += [pd.concat(batch)] if batch else []
    tables, done = [], 0
    if progress is not None:
        progress(0, len(keys))
    for part in batches:
        tables.append(ir_features(part, arch=arch, workers=workers, cache_dir=cache_dir))
        done += len(part)
        if progress is not None:
            progress(done, len(keys))
    table = (pd.concat(tables, ignore_index=True) if tables
             else ir_features(keys, arch=arch, workers=workers, cache_dir=cache_dir))
    if out is not None:
        _write(table, Path(out), meta={"ir": IR_FEATURES, "arch": arch, **_versions()})
    return table
