"""Harvest: an opt-in listener that stores every ``triton.autotune`` tuning as dataset rows.

While a harvester is enabled, ``Autotuner.run`` is wrapped: after a call that tuned (Triton set
a fresh ``configs_timings``), each benchmarked config becomes a row of the dataset schema
(kernel, workload, dtype, problem sizes, config params, config key, status, time_ms, ...) and
the rows go to a ``costtune.Store`` as one part, with ``costtune.env.environment()`` as its
metadata. Infinite timings (Triton's OutOfResources / PTXAS / compile-time failures) are stored
as ``compile_error`` rows: failures are data.

Rows are labelled with costtune's family name only for costtune's own family kernels; any other
kernel keeps its function name as ``kernel`` and, when the launch reads as a family (as the
pruning hook reads it: names as Triton's tutorials and Inductor spell them, launch kwargs,
tensor and TensorDescriptor shapes), carries ``family``, the family's sizes and parameter
names, and ``param_map`` (config name -> family name); ``df.assign(kernel=df.family)`` turns
them into training rows. ``kernel_hash`` (SHA-256 of the kernel's source) and ``gpu`` key the
kernel's own model (``costtune.autotune(learn=True)``, ``costtune train``). Knobs no model
learns (GROUP_SIZE_M, WARP_SPECIALIZE, num_ctas, maxnreg, ...) stay columns of their own. A
kernel declared as a family it does not read as (a layer norm declared as softmax) is not
labelled with it. Times are Triton's ``do_bench``
(or the tuner's own), not costtune's graph replay, and outputs are not checked against a
reference: the part's metadata says so.

>>> import costtune
>>> with costtune.harvest("my_dataset"):  # doctest: +SKIP
...     matmul[grid](a, b, c, M, N, K)
>>> costtune.load_dataset("my_dataset")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from costtune.features.static import LAUNCHED
from costtune.kernels.base import IMPLEMENTATIONS
from costtune.tune.grid import grid_programs
from costtune.tune.launch import (
    LaunchSpec,
    NotApplicable,
    call_args,
    describe,
    first_tensor_dtype,
    launch_options,
    launch_params,
    launched_values,
)

# Kernel folders of costtune's own suite: a user's kernel of one of these names is stored as
# user_<name>, so its rows never mix with (or are dropped as) the suite's.
_SUITE_NAMES = frozenset({*IMPLEMENTATIONS, *(n for names in IMPLEMENTATIONS.values()
                                                for n in names)})
_SCALARS = (bool, int, float, str)  # values a stored config holds (no tensor, no None)
TIMING_NOTE = ("triton.autotune do_bench (or the tuner's own do_bench); outputs not checked "
               "against a reference")
LOCK_WAIT_S = 5.0  # a tuning call waits this long for another writer's lock at most
CLOSE_WAIT_S = 60.0  # leaving the harvest: for the rows kept back
SOURCE_DEPTH = 3  # helper levels of a kernel's source hash (helpers of helpers of helpers)
_ACTIVE: list[Harvester] = []
_ORIGINAL_RUN: Any = None


class Harvester:
    """Appends tunings to the Store at ``store_dir``; ``close()`` stops listening.

    ``rows`` counts the rows written; ``errors`` lists what could not be written.
    """

    def __init__(self, store_dir: str | os.PathLike, *,
                 meta: Mapping[str, Any] | None = None) -> None:
        from costtune.env import environment
        from costtune.store.dataset import RESERVED_META, Store

        if meta is not None and not isinstance(meta, Mapping):
            raise ValueError(f"harvest meta must be a dict, got {type(meta).__name__}")
        clash = sorted(set(meta or {}) & set(RESERVED_META))
        if clash:
            raise ValueError(f"harvest meta may not set {clash}: the store writes them")
        # A part the store cannot read (a newer format, a zero-byte file) is skipped with a
        # warning rather than stopping every later harvest; a writer holding the lock makes a
        # tuning wait LOCK_WAIT_S at most: its rows are kept and stored with a later one.
        self.store = Store(store_dir, on_bad_part="skip", lock_timeout=LOCK_WAIT_S)
        self.meta = {**environment(), "timing_method": TIMING_NOTE, **dict(meta or {})}
        self.rows = 0
        self.errors: list[str] = []
        self.pending: list[dict[str, Any]] = []  # rows a held lock kept from the store

    def record(self, tuner: Any, args: tuple, *, kwargs: dict[str, Any]) -> None:
        """Store ``tuner.configs_timings`` of the call ``tuner.run(*args, **kwargs)``."""
        try:
            self._store(tuning_rows(tuner, args, kwargs=kwargs, gpu=self.meta.get("gpu"))[1])
        except Exception as exc:  # harvesting must never break the user's program
            self._failed(exc)

    def _store(self, rows: list[dict[str, Any]]) -> None:
        from costtune.store.dataset import LockTimeout

        by_kernel: dict[str, list[dict[str, Any]]] = {}
        for row in [*self.pending, *rows]:
            by_kernel.setdefault(row["kernel"], []).append(row)
        self.pending = []
        for todo in by_kernel.values():  # one kernel's failure keeps the others'
            try:  # existing="skip": rows already stored (by another rank too) are left out
                part = self.store.append(todo, meta=self.meta, existing="skip")
            except LockTimeout:
                self.pending += todo
                continue
            except Exception as exc:  # these rows cannot be stored (said once), the rest can
                self._failed(exc)
                continue
            if part is not None:
                import pyarrow.parquet as pq

                self.rows += pq.read_metadata(part).num_rows

    def _failed(self, exc: Exception) -> None:
        from costtune.types import CosttuneWarning

        self.errors.append(f"{type(exc).__name__}: {exc}")
        if len(self.errors) == 1:
            warnings.warn(f"costtune harvest: rows not stored ({self.errors[0]})",
                          CosttuneWarning, stacklevel=4)

    def close(self) -> None:
        """Stop listening (the Autotuner is restored when no harvester is left); rows a held
        lock kept back are stored now, waiting for the lock up to a minute."""
        global _ORIGINAL_RUN
        if self.pending:
            self.store.lock_timeout = CLOSE_WAIT_S
            self._store([])
            if self.pending:
                self._failed(RuntimeError(f"{len(self.pending)} rows: another writer held the "
                                          f"store's lock for over {CLOSE_WAIT_S:.0f} s"))
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if not _ACTIVE and _ORIGINAL_RUN is not None:
            from triton.runtime.autotuner import Autotuner

            Autotuner.run = _ORIGINAL_RUN
            _ORIGINAL_RUN = None


def enable_harvest(store_dir: str | os.PathLike, *,
                   meta: Mapping[str, Any] | None = None) -> Harvester:
    """Start storing every autotune's timings in ``store_dir``; ``.close()`` stops.

    ``meta``: extra part metadata (next to the environment).

    >>> h = enable_harvest("my_dataset")  # doctest: +SKIP
    >>> h.close()  # doctest: +SKIP
    """
    global _ORIGINAL_RUN
    from triton.runtime.autotuner import Autotuner

    harvester = Harvester(store_dir, meta=meta)
    if _ORIGINAL_RUN is None:
        _ORIGINAL_RUN = Autotuner.run
        original = _ORIGINAL_RUN

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            before = getattr(self, "configs_timings", None)
            out = original(self, *args, **kwargs)
            timings = getattr(self, "configs_timings", None)
            if timings is not None and timings is not before:
                for h in list(_ACTIVE):
                    h.record(self, args, kwargs=kwargs)
            return out

        Autotuner.run = run
    _ACTIVE.append(harvester)
    return harvester


@contextlib.contextmanager
def harvest(store_dir: str | os.PathLike, *,
            meta: Mapping[str, Any] | None = None) -> Iterator[Harvester]:
    """Context manager: store every autotune's timings in ``store_dir`` while inside.

    >>> import costtune
    >>> with costtune.harvest("my_dataset") as h:  # doctest: +SKIP
    ...     kernel[grid](x, y, n)
    >>> h.rows  # doctest: +SKIP
    4
    """
    harvester = enable_harvest(store_dir, meta=meta)
    try:
        yield harvester
    finally:
        harvester.close()


def tuning_rows(tuner: Any, args: tuple, *, kwargs: dict[str, Any],
                gpu: str | None = None) -> tuple[str, list[dict[str, Any]]]:
    """(kernel, rows) for the tuning ``tuner.run(*args, **kwargs)`` just did."""
    from costtune.features.source import described as describe_source
    from costtune.kernels import FAMILIES
    from costtune.types import Config, Workload

    named = dict(zip(tuner.arg_names, args))
    all_args = call_args(named, kwargs)
    launched = None
    configs = list(tuner.configs_timings)
    pruner = tuner.early_config_prune
    # costtune's pruner carries how the user described the kernel; any other has no spec.
    spec = getattr(pruner, "spec", None)
    spec = spec if isinstance(spec, LaunchSpec) else LaunchSpec()
    base = tuner.base_fn
    own = base.__module__ in {f"costtune.kernels.{f}" for f in FAMILIES}
    ruled = None  # each config's values as its launch passes them, after triton.heuristics
    try:
        launch = describe(spec, configs, args=all_args, kernel=tuner, grid=kwargs.get("grid"))
        ruled = launched_values(launch, configs)
        if any(c in ("kind", "family") for c, _ in launch.doubts):
            raise NotApplicable("kind", "declared as a family it does not read as")
        params = launch_params(launch, configs)
        family, problem, dtype = launch.family, launch.problem, launch.dtype
        if launch.programs_cap is not None:  # a persistent launch: what its grid starts
            launched = grid_programs(kwargs.get("grid"), all_args, configs=configs,
                                     launch=launch)
        param_map = repr({k: v for k, v in launch.rename.items() if k != v})
    except NotApplicable:
        family, params, param_map = None, None, ""
        problem = {k: all_args[k] for k in tuner.keys
                   if isinstance(all_args.get(k), (int, float)) and not isinstance(
                       all_args.get(k), bool)}
        dtype = spec.dtype or first_tensor_dtype(all_args) or "unknown"
    kernel = family if own and family else base.__name__
    if not own and kernel in _SUITE_NAMES:  # never among the suite's rows of that name
        kernel = f"user_{kernel}"
    source = source_hash(tuner.fn)
    workload = Workload(kernel, problem, dtype).id
    if not own:  # another kernel of that name, or this one edited: other measurements
        workload = f"{workload}_src{source[:8]}"
    key_values = [all_args.get(k) for k in tuner.keys]
    described = describe_source(tuner)  # a static+src model reads the user's kernel by it
    rows, recorded = [], set()
    rule_names = {name for name, _ in launch.rules} if ruled else set()
    for i, config in enumerate(configs):
        # Beside the family's parameters: the config's other values and those rules set
        # (EVEN_K), as the launch took them: a row describes the kernel that ran.
        own = ruled[i] if ruled else dict(config.kwargs)
        extras = {k: v for k, v in own.items()
                  if (k in config.kwargs or k in rule_names) and isinstance(v, _SCALARS)
                  and (params is None or (k not in launch.rename and k not in params[i]
                                          and k not in launch.by_rule.values()))}
        values = {**(params[i] if params else dict(config.kwargs)), **extras,
                  **launch_options(config)}
        if not params:
            values.update(num_warps=config.num_warps, num_stages=config.num_stages)
        cfg = Config.from_dict(values)
        if cfg.key in recorded:  # configs a rule makes the same launch: its first timing
            continue
        recorded.add(cfg.key)
        p50, p20, p80 = _quantiles(tuner.configs_timings[config])
        ok = math.isfinite(p50)
        rows.append({
            "kernel": kernel, "workload": workload, "dtype": dtype, **problem,
            **cfg.as_dict(), "config": cfg.key, "status": "ok" if ok else "compile_error",
            "time_ms": p50 if ok else math.nan, "time_p20_ms": p20 if ok else math.nan,
            "time_p80_ms": p80 if ok else math.nan, "rel_err": math.nan,
            "error": "" if ok else "triton.autotune timed it as inf (OutOfResources, PTXAS "
                                   "error or compile-time assertion)",
            "gpu": gpu, "family": family, "param_map": param_map,
            "kernel_fn": f"{base.__module__}.{base.__qualname__}", "kernel_hash": source,
            "tuning_key": repr(tuple(key_values)),
            "bench_s": float(getattr(tuner, "bench_time", math.nan)),
            "n_tuned": len(configs), "n_configs": len(tuner.configs), **described,
            **({LAUNCHED: float(launched[i])} if launched is not None else {}),
        })
    return kernel, rows


def source_hash(fn: Any) -> str:
    """SHA-256 of the source Triton compiles of a kernel (``jitsource.source_text``: a
    JITFunction's ``src``, else the Python function's source) and of the JIT helpers it calls
    by name (an edited helper is an edited kernel, as in Triton's own cache key); without a
    readable source, of its name and compiled code."""
    from costtune.jitsource import jit_level, python_function, source_with_helpers, stable_text

    obj = jit_level(fn)
    src = source_with_helpers(obj, depth=SOURCE_DEPTH) if obj is not None else ""
    if not src:  # the same in every process: no address in it
        target = getattr(obj, "fn", obj) if obj is not None else fn
        src = getattr(target, "__qualname__", repr(target)) + stable_text(
            getattr(python_function(fn), "__code__", None))
    return hashlib.sha256(str(src).encode()).hexdigest()


def _quantiles(timing: Any) -> tuple[float, float, float]:
    """(median, p20, p80) from a do_bench result: a number or Triton's [p50, p20, p80]."""
    if isinstance(timing, (list, tuple)):
        values = [float(t) for t in timing] + [math.nan] * 3
        return values[0], values[1], values[2]
    return float(timing), math.nan, math.nan
