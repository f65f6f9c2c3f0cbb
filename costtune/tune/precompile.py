"""Precompile the configs that survive pruning, in parallel, before Triton benchmarks them.

Triton compiles configs one after another while it benchmarks. Here the kernel is warmed up
for every surviving config at once under Triton's own ``triton.AsyncCompileMode``: each
``warmup`` call binds and specializes the arguments in this thread, exactly as the benchmark
launch will, and hands the compile to an executor. On leaving, every compiled kernel is in the
JIT's in-memory cache, so the benchmark loop launches them at once. Two executors:

- ``"processes"``: forked children compile, this process loads from Triton's disk cache
  (``build.forked``; Linux, a process under 6 GB resident, no torch.distributed group or
  MPI). Truly parallel, and a fork starts in milliseconds, where a spawned pool cost ~6 s
  on the H200 host before its first compile (imports);
- ``"threads"``: Triton's frontend holds the GIL, so threads overlap only part of each
  compile (13-16 GEMM configs on the H200 host: 11.5-25 s of compile in 2.2-4.7 s).

Measured there (experiments/results/cold_tune.md): with ``costtune.autotune`` benchmarking
each config as it lands, both executors gave the same first call (2.03 vs 2.26 s, 4.45 vs
4.49 s); under plain ``triton.autotune`` (all compiles before Triton benchmarks) processes
saved 0-0.6 s of 3-7 s.

GPU only: the interpreter compiles nothing.

>>> precompile(tuner, survivors, named_args=named_args, kwargs=kwargs)  # doctest: +SKIP
(8, 8)
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from costtune.build.threads import compile_threads, interpreting, thread_pool

MODES = ("processes", "threads")
DEFAULT_MODE = "processes"


def parse_precompile(value: Any) -> tuple[str, int | None] | None:
    """(executor, workers or None for one per usable core) for a ``precompile=`` value, None
    for False. True: the default executor (``DEFAULT_MODE``); an int: that many threads;
    "processes" / "threads". ValueError, naming the value, for anything else."""
    if value is False:
        return None
    if value is True:
        return DEFAULT_MODE, None
    if isinstance(value, str) and value in MODES:
        return value, None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return "threads", value
    raise ValueError(f"precompile must be True, False, 'processes', 'threads' or a thread "
                     f"count >= 1, got {value!r}")


def can_precompile() -> bool:
    """True on a CUDA machine outside Triton's interpreter."""
    if interpreting():
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def precompile(tuner: Any, configs: Sequence[Any], *, named_args: Mapping[str, Any],
               kwargs: Mapping[str, Any], threads: int | None = None, mode: str = "threads",
               outcomes: list | None = None, min_configs: int = 2,
               errors: dict | None = None) -> tuple[int, int] | None:
    """Compile ``configs`` of ``tuner`` (a triton Autotuner) for this call's arguments, in
    ``threads`` workers (default: one per usable core, at most one per config) of ``mode``
    ("processes" where ``build.forked`` can fork, else "threads"), and wait for all; returns
    (compiled, submitted), or None when skipped (``start_batch``). ``outcomes``, when given,
    receives one entry per config, in order (``Batch``); ``errors`` what each failed compile
    raised, by position."""
    batch = start_batch(tuner, configs, named_args=named_args, kwargs=kwargs,
                        threads=threads, mode=mode, min_configs=min_configs)
    if batch is None:
        return None
    with batch:
        done = dict(batch)
    if outcomes is not None:
        outcomes.extend(done[i] for i in range(len(configs)))
    if errors is not None:
        errors.update(batch.errors)
    return batch.compiled, len(configs)


class Batch:
    """Compiles under way, one per config: iterating yields (position, outcome) as each
    finishes, its kernel then in the JIT's cache. Outcomes: "ok", "failed" (the compile
    raised), "too_big" (compiled, but needs more shared memory than this GPU has: it would
    raise OutOfResources at launch) or None (not compiled here: the benchmark compiles it, as
    Triton would have). ``waited_s``: time spent submitting and waiting, the compile time a
    caller that benchmarks each config as it arrives is left with."""

    def __init__(self, kernels: list[Any], pool: Any, waited_s: float) -> None:
        self.kernels, self.pool, self.waited_s = kernels, pool, waited_s
        self.compiled = 0
        self.errors: dict[int, BaseException] = {}  # position -> what its failed compile raised

    def __iter__(self) -> Iterator[tuple[int, str | None]]:
        from concurrent.futures import as_completed

        pending: dict[Any, list[int]] = {}  # configs compiling to one kernel share a future
        for i, kernel in enumerate(self.kernels):
            if hasattr(kernel, "future"):
                pending.setdefault(kernel.future, []).append(i)
            else:
                yield self._done(i, kernel)
        resumed = time.perf_counter()
        for future in as_completed(pending):
            first = pending[future][0]
            self.kernels[first].result(ignore_errors=True)  # finalize: into the JIT's cache
            self.waited_s += time.perf_counter() - resumed
            for i in pending[future]:
                yield self._done(i, self.kernels[i])
            resumed = time.perf_counter()

    def _done(self, i: int, kernel: Any) -> tuple[int, str | None]:
        outcome = _outcome(kernel)
        self.compiled += outcome in ("ok", "too_big")
        if outcome == "failed" and hasattr(kernel, "future") and kernel.future.done():
            error = kernel.future.exception()
            if error is not None:
                self.errors[i] = error
        return i, outcome

    def close(self) -> None:
        self.pool.shutdown(wait=False)

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def start_batch(tuner: Any, configs: Sequence[Any], *, named_args: Mapping[str, Any],
                kwargs: Mapping[str, Any], threads: int | None = None,
                mode: str = "threads", min_configs: int = 2) -> Batch | None:
    """Start compiling ``configs`` of ``tuner`` for this call's arguments (see ``precompile``);
    None when skipped (no GPU, the interpreter, fewer than ``min_configs`` configs, a kernel
    under another autotuner). A config with a ``pre_hook`` is compiled for the arguments its
    hook sets (``_hooked``); one the binder rejects (or whose hook raises) is left to the
    benchmark loop, which meets and reports the same failure."""
    if len(configs) < min_configs or not can_precompile() or not _compiles_directly(tuner):
        return None
    from triton import AsyncCompileMode
    from triton.runtime._async_compile import active_mode

    start = time.perf_counter()
    args = list(named_args.values())  # Triton's nargs: every positional argument, in order
    meta = {k: v for k, v in kwargs.items() if k != "warmup"}
    kernels = []
    pool = _executor(mode, compile_threads(len(configs), threads))
    async_mode = AsyncCompileMode(pool, ignore_errors=True)
    async_mode.__enter__()
    try:
        for config in configs:
            try:
                # The launch the benchmark makes (tuner.fn may be a Heuristics wrapper, which
                # adds its values), with warmup=True: compile only.
                call = args if config.pre_hook is None else _hooked(named_args, meta, config)
                kernels.append(tuner.fn.run(*call, warmup=True,
                                            **{**meta, **config.all_kwargs()}))
            except Exception:
                kernels.append(None)
    finally:
        try:
            getattr(pool, "start", lambda: None)()  # a forked batch starts once all are in
        finally:
            # Compiles the benchmark itself makes (a config not compiled here) run at once,
            # and nothing later in this thread goes to this batch's pool.
            if active_mode.get() is async_mode:
                active_mode.set(None)
    return Batch(kernels, pool, time.perf_counter() - start)


def _executor(mode: str, workers: int) -> Any:
    if mode == "processes":
        from costtune.build.forked import ForkCompiler, can_fork_compile

        if can_fork_compile():
            return ForkCompiler(workers)
    return thread_pool(workers)


def _hooked(named_args: Mapping[str, Any], meta: Mapping[str, Any], config: Any) -> list:
    """The positional arguments as ``config.pre_hook`` leaves them before its benchmark
    launch (``hooked_args``); tensors are the caller's, as in Triton's own calls."""
    full = hooked_args({**named_args, **meta}, config)
    return [full[k] for k in named_args]


def hooked_args(args: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """Every argument, with the config's values, as ``config.pre_hook`` leaves them (Triton's
    tutorials set host TensorDescriptors' block shapes there, which changes what compiles),
    the hook run on copies of the descriptors so that configs compiled side by side do not
    see each other's shapes."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    full = {k: copy.copy(v) if isinstance(v, TensorDescriptor) else v for k, v in args.items()}
    full.update(config.all_kwargs())
    config.pre_hook(full)
    return full


def precompiler(tuner: Any, option: Any) -> Any:
    """The pruner's after-prune step under plain ``triton.autotune``: compile the kept configs
    in parallel before Triton benchmarks them one by one (``outcomes``, when given, receives
    each config's: the pruner replaces those that cannot launch); None for no tuner, ``option``
    False (a ``precompile=`` value), or ``costtune.autotune``'s tuner (it precompiles what it
    benchmarks itself)."""
    parsed = parse_precompile(option)
    if tuner is None or parsed is None or hasattr(tuner, "precompile_threads"):
        return None
    mode, count = parsed

    def run(kept: list[Any], named_args: Mapping[str, Any], kwargs: Mapping[str, Any],
            family: str | None, outcomes: list | None = None, errors: dict | None = None
            ) -> tuple[int, int] | None:
        # One config too: what it compiles to says whether it can launch (``outcomes``).
        return precompile(tuner, kept, named_args=named_args, kwargs=kwargs, threads=count,
                          mode=mode, outcomes=outcomes, min_configs=1, errors=errors)

    return run


def _outcome(kernel: Any) -> str | None:
    if kernel is None:
        return None
    compiled = kernel.kernel if hasattr(kernel, "future") else kernel
    if compiled is None:
        return "failed"
    try:
        from triton.compiler.compiler import max_shared_mem
        from triton.runtime.driver import driver

        limit = max_shared_mem(driver.active.get_current_device())
        return "too_big" if compiled.metadata.shared > limit else "ok"
    except Exception:  # cannot tell: the benchmark launch decides
        return "ok"


def _compiles_directly(tuner: Any) -> bool:
    """True when ``tuner.fn`` is the JIT function, maybe under heuristics: a nested autotuner
    would benchmark its own configs when asked to warm up."""
    from triton.runtime.autotuner import Heuristics
    from triton.runtime.jit import JITFunction

    fn = getattr(tuner, "fn", None)
    while isinstance(fn, Heuristics):
        fn = fn.fn
    return isinstance(fn, JITFunction)


