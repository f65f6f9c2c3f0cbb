"""Compiled features per (workload, config): registers, spills, shared memory, instruction counts.

Every row's launches are specialized exactly as the JIT would on the GPU (see ``aot``), compiled
for ``sm_<arch>`` on the CPU, and parsed. Distinct compile jobs run once even when many rows
share them (many shapes share a specialization), in a spawned process pool, with results cached
as small JSON files keyed by kernel source hash, specialization, options, arch and triton version.

>>> import pandas as pd
>>> df = pd.DataFrame([{"kernel": "softmax", "workload": "w", "dtype": "float16",
...     "rows": 100, "cols": 1000,
...     "config": "BLOCK_N=1024,ROWS_PER_PROG=1,num_warps=4,num_stages=1"}])
>>> compiled_features(df, workers=1)[["compile_status", "n_regs"]]  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from costtune.build.aot import (
    REGS_PER_SM,
    CompileJob,
    classify_error,
    compile_job,
    regs_per_warp,
    specialize,
)
from costtune.build.asm import PTX_FEATURES, RESOURCE_FEATURES, SASS_FEATURES
from costtune.build.cache import default_cache_dir, read_record, write_record
from costtune.build.ir import IR_FEATURES, IR_OK
from costtune.build.pool import get_pool
from costtune.build.threads import interpreting, thread_pool
from costtune.features.static import parse_config_key
from costtune.hardware import H200, known_archs, target
from costtune.types import Config, Status

log = logging.getLogger(__name__)

COMPILED_FEATURES: list[str] = [
    *RESOURCE_FEATURES, "n_spills", "shared_bytes", "ctas_per_sm", "occupancy", "n_launches",
    *PTX_FEATURES, *SASS_FEATURES,
]
KEY_COLUMNS = ("workload", "config")

_MAX_WARPS_PER_SM = H200.max_warps_per_sm
_MAX_CTAS_PER_SM = H200.max_ctas_per_sm


def workload_problem(family: Any, row: pd.Series | dict) -> dict[str, Any]:
    """The family's problem dict from a dataset row (nullable ints and floats made plain)."""
    out = {}
    for key in family.PROBLEM_KEYS:
        v = row[key]
        if isinstance(v, (bool, np.bool_)):
            out[key] = bool(v)
        else:
            f = float(v)
            out[key] = int(f) if f.is_integer() else f
    return out


def meta_inputs(family: Any, problem: dict[str, Any], dtype: str) -> dict[str, Any]:
    """The family's inputs as ``meta`` tensors: same shapes, strides, dtypes and storage offsets
    (which set pointer alignment), no memory held. Memoized: ``make_inputs`` fills random
    values, which costs ~1 s for the largest suite shapes."""
    key = (family.NAME, tuple(sorted(problem.items())), dtype)
    if key not in _META_INPUTS:
        if len(_META_INPUTS) >= 64:
            _META_INPUTS.pop(next(iter(_META_INPUTS)))
        _META_INPUTS[key] = _to_meta(family.make_inputs(problem, dtype, seed=0, device="cpu"))
    return dict(_META_INPUTS[key])


_META_INPUTS: dict[tuple, dict[str, Any]] = {}


def _to_meta(inputs: dict[str, Any]) -> dict[str, Any]:
    import torch

    out = {}
    for name, t in inputs.items():
        if isinstance(t, torch.Tensor):
            base = torch.empty(t.untyped_storage().nbytes() // t.element_size(), dtype=t.dtype,
                               device="meta")
            t = base.as_strided(t.shape, t.stride(), t.storage_offset())
        out[name] = t
    return out


def launch_jobs(kernel: str, problem: dict[str, Any], dtype: str, config: Config | str, *,
                arch: int = 90, inputs: dict[str, Any] | None = None
                ) -> tuple[list[CompileJob], int]:
    """Compile jobs of every launch one (workload, config) makes, and the main launch's index
    (the implementation's ``MAIN_LAUNCH``, else the one whose grid is its ``grid(problem,
    config)``). ``kernel``: an
    implementation name (a family name means the family's original kernel)."""
    from costtune.kernels import get_implementation

    family = get_implementation(kernel)
    config = parse_config_key(config) if isinstance(config, str) else config
    if inputs is None:
        inputs = meta_inputs(family, problem, dtype)
    calls = family.kernel_calls(inputs, config)
    if not calls:
        raise ValueError(f"{kernel}.kernel_calls made no launch for {config.key}")
    main = getattr(family, "MAIN_LAUNCH", None)  # where several launches share the grid
    if main is None:
        main_grid = tuple(family.grid(problem, config))
        main = next((i for i, c in enumerate(calls) if tuple(c.grid) == main_grid), 0)
    return [specialize(c, arch=arch) for c in calls], main


def compiled_features(df: pd.DataFrame, *, arch: int = 90, workers: int | None = None,
                      cache_dir: str | os.PathLike | None = None,
                      sass: bool = True, threads: bool = False, ir: bool = False
                      ) -> pd.DataFrame:
    """One row per distinct (workload, config) of ``df``: ``compile_status``, ``compile_error``,
    ``compile_s``, ``compile_key`` and ``COMPILED_FEATURES`` (NaN where the compile failed);
    with ``ir`` also the TTIR/TTGIR counts the same compile gave (``IR_FEATURES``, ``ir_ok``).

    ``workers``: processes (default: all cores; 1 compiles in this process, unless this
    process runs Triton's interpreter, whose kernels cannot compile: then in one worker).
    ``threads``: compile in this process's threads instead of processes (no pool to start:
    the pruning hook's few dozen compiles; a large batch scales better in processes).
    """
    keys = df.drop_duplicates(list(KEY_COLUMNS)).reset_index(drop=True)
    workers = max(1, workers or os.cpu_count() or 1)
    # Under Triton's interpreter (the CPU test setup) @triton.jit makes interpreter functions,
    # which neither specialize nor compile: the pool's workers, started without it, can.
    pool = get_pool(workers) if interpreting() and not keys.empty else None
    if pool is not None:
        row_jobs = pool.submit(rows_to_jobs, keys, arch).result()
    else:
        row_jobs = rows_to_jobs(keys, arch)
    jobs = {j.key: j for item in row_jobs if not isinstance(item, str) for j in item[0]}
    records = compile_jobs(list(jobs.values()), workers=workers, cache_dir=cache_dir,
                           sass=sass, pool=pool, threads=threads and pool is None)
    out = [_row_features(item, records, ir=ir) for item in row_jobs]
    table = pd.DataFrame(out, columns=table_columns(ir=ir))
    table.insert(0, "config", keys["config"].to_numpy())
    table.insert(0, "workload", keys["workload"].to_numpy())
    return table


def rows_to_jobs(keys: pd.DataFrame, arch: int) -> list[tuple[list[CompileJob], int] | str]:
    """Per row of ``keys``: (compile jobs, main launch index), or a failure text (status,
    a tab, the error)."""
    by_index: dict[int, tuple[list[CompileJob], int] | str] = {}
    for _, group in keys.groupby("workload", sort=False):
        by_index.update(zip(group.index, _workload_jobs(group, arch), strict=True))
    return [by_index[i] for i in keys.index]


def _workload_jobs(group: pd.DataFrame, arch: int) -> list[tuple[list[CompileJob], int] | str]:
    from costtune.kernels import get_implementation

    first = group.iloc[0]
    impl = first.get("implementation")
    try:
        family = get_implementation(impl if isinstance(impl, str) else str(first["kernel"]))
        problem = workload_problem(family, first)
        inputs = meta_inputs(family, problem, str(first["dtype"]))
    except Exception as exc:  # a bad workload fails its rows, not the batch
        return [f"{Status.COMPILE_ERROR.value}\t{type(exc).__name__}: {exc}"] * len(group)
    out: list[tuple[list[CompileJob], int] | str] = []
    for key in group["config"]:
        try:
            out.append(launch_jobs(family.NAME, problem, str(first["dtype"]), key, arch=arch,
                                   inputs=inputs))
        except Exception as exc:
            out.append(f"{classify_error(exc).value}\t{type(exc).__name__}: {exc}")
    return out


def table_columns(*, ir: bool = False) -> list[str]:
    """The columns of a ``compiled_features`` table after its keys (``ir``: with the IR counts
    the compile gave)."""
    cols = ["compile_status", "compile_error", "compile_s", "compile_key", *COMPILED_FEATURES]
    return cols + [c for c in (*IR_FEATURES, IR_OK) if c not in cols] if ir else cols


def _row_features(item: tuple[list[CompileJob], int] | str,
                  records: dict[str, dict[str, Any]], *, ir: bool = False) -> dict[str, Any]:
    if isinstance(item, str):
        status, _, error = item.partition("\t")
        return {"compile_status": status, "compile_error": error[:600]}
    jobs, main = item
    recs = [records[j.key] for j in jobs]
    bad = next((r for r in recs if r["status"] != Status.OK.value), None)
    rec = recs[main]
    row = {k: rec.get(k, np.nan) for k in COMPILED_FEATURES}
    if ir:  # a full compile's record carries the counts of its TTIR/TTGIR stages
        row.update({k: rec.get(k, np.nan) for k in IR_FEATURES if k not in row})
        row[IR_OK] = float(IR_FEATURES[0] in rec)
    row.update(compile_status=(bad or rec)["status"], compile_error=(bad or rec)["error"],
               compile_s=sum(r.get("compile_s", np.nan) for r in recs),
               compile_key=jobs[main].key, n_launches=len(jobs))
    if "n_regs" in rec:
        row.update(_occupancy(rec, num_warps=jobs[main].options["num_warps"],
                              arch=jobs[main].arch))
    return row


def _occupancy(rec: dict[str, Any], *, num_warps: int, arch: int) -> dict[str, Any]:
    """Resident programs per SM from registers, shared memory and warp slots."""
    limits = [_MAX_CTAS_PER_SM, _MAX_WARPS_PER_SM // num_warps,
              REGS_PER_SM // max(1, regs_per_warp(rec["n_regs"]) * num_warps)]
    if rec["shared_bytes"] > 0 and arch in known_archs():
        limits.append(target(arch).shared_per_sm // (rec["shared_bytes"] + 1024))
    ctas = max(0, min(limits))
    # Triton's n_spills is CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES / 4: the thread's local memory,
    # which holds the stack frame where ptxas spills.
    return {"n_spills": (rec["stack_bytes"] + rec["local_bytes"]) // 4, "ctas_per_sm": ctas,
            "occupancy": ctas * num_warps / _MAX_WARPS_PER_SM}


def compile_jobs(jobs: Sequence[CompileJob], *, workers: int | None = None,
                 cache_dir: str | os.PathLike | None = None, sass: bool = True,
                 pool: ProcessPoolExecutor | None = None,
                 threads: bool = False) -> dict[str, dict[str, Any]]:
    """``{job.key: record}`` for every job: from the disk cache, else compiled (in a pool,
    or in ``workers`` threads of this process with ``threads``)."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    records: dict[str, dict[str, Any]] = {}
    todo = []
    by_key = {job.key: job for job in jobs}  # jobs sharing a key compile once
    for key, job in by_key.items():
        rec = read_record(cache, key, sass=sass)
        if rec is None:
            todo.append(job)
        else:
            records[key] = rec
    if todo:
        start = time.perf_counter()
        # Each record is cached as it arrives, so a run killed part-way keeps what it compiled.
        for key, fresh in _compile_all(todo, workers=workers, sass=sass, pool=pool,
                                       threads=threads):
            job = by_key[key]
            rec = {**fresh, "kernel_fn": f"{job.fn_module}.{job.fn_name}",
                   "spec": job.spec, "arch": job.arch, "sass": sass}
            if not rec.pop("transient", False):
                write_record(cache, job.key, rec)
            records[job.key] = rec
        log.info("compiled %d jobs in %.1fs (%d cached)", len(todo),
                 time.perf_counter() - start, len(records) - len(todo))
    return records


def _compile_all(jobs: list[CompileJob], *, workers: int | None, sass: bool,
                 pool: ProcessPoolExecutor | None, threads: bool = False,
                 fn: Callable[..., dict[str, Any]] | None = None
                 ) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(job.key, record)`` for every job, in order of completion. ``fn(job)``: what makes a
    record (default ``compile_job`` with ``sass``; ``aot.compile_ir`` for IR features)."""
    workers = min(workers or os.cpu_count() or 1, len(jobs))
    fn = fn or partial(compile_job, sass=sass)
    if pool is None and workers <= 1:
        for j in jobs:
            yield j.key, fn(j)
        return
    if pool is None and threads:
        # Triton's passes and ptxas run without the GIL. stdout stays as it is: redirecting it
        # is process-wide, so threads cannot each swallow their own compile's output.
        with thread_pool(workers, name="costtune-aot") as tpool:
            futures = {tpool.submit(_loud, fn, j): j.key for j in jobs}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()  # compile_job returns failures as records
        return
    # Kernels a spawned worker cannot import by name (or whose constants do not pickle)
    # compile here instead.
    local = {j.key for j in jobs if pool is None and not _picklable(j)}
    for j in jobs:
        if j.key in local:
            yield j.key, fn(j)
    own_pool = pool is None
    pool = pool or get_pool(workers)
    futures = {pool.submit(fn, j): j.key for j in jobs if j.key not in local}
    try:
        for fut in as_completed(futures):
            try:
                rec = fut.result()
            except Exception as exc:  # a worker died (e.g. a compiler segfault)
                rec = {"status": Status.COMPILE_ERROR.value, "transient": True,
                       "error": f"{type(exc).__name__}: {exc}"[:600], "compile_s": np.nan}
            yield futures[fut], rec
    except KeyboardInterrupt:  # Ctrl-C: stop the queued compiles, not wait for them all
        if own_pool:
            from costtune.build.pool import shutdown_pool

            shutdown_pool(kill=True)
        raise


def _loud(fn: Callable[..., dict[str, Any]], job: CompileJob) -> dict[str, Any]:
    """``fn(job)`` leaving stdout alone where ``fn`` would swallow it (``compile_job``)."""
    target = fn.func if isinstance(fn, partial) else fn
    return fn(job, quiet=False) if target is compile_job else fn(job)


def _picklable(job: CompileJob) -> bool:
    try:
        pickle.dumps(job)
        # A spawned worker imports the kernel's module by name; __main__ is not that module.
        return job.fn_module != "__main__" and job.resolve_fn() is not None
    except Exception:
        return False
