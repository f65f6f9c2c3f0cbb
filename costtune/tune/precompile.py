"""Precompile the configs that survive pruning, in parallel, before Triton benchmarks them.

Triton compiles configs one after another while it benchmarks. Here the kernel is warmed up
for every surviving config at once under Triton's own ``triton.AsyncCompileMode``: each
``warmup`` call binds and specializes the arguments in this thread, exactly as the benchmark
launch will, and hands the compile to an executor. On leaving, every compiled kernel is in the
JIT's in-memory cache, so the benchmark loop launches them at once. Two executors:

- ``"processes"``: forked children compile, this process loads from Triton's disk cache
  (``build.forked``; Linux). Truly parallel, and a fork starts in milliseconds, where a
  spawned pool cost ~6 s on the H200 host before its first compile (imports);
- ``"threads"``: Triton's frontend holds the GIL, so threads overlap only the native passes
  and ptxas (~2x over one by one for 13 GEMM configs on the H200 host).

GPU only: the interpreter compiles nothing.

>>> precompile(tuner, survivors, named_args=named_args, kwargs=kwargs)  # doctest: +SKIP
(8, 8)
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
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
               outcomes: list | None = None, min_configs: int = 2
               ) -> tuple[int, int] | None:
    """Compile ``configs`` of ``tuner`` (a triton Autotuner) for this call's arguments, in
    ``threads`` workers (default: one per usable core, at most one per config) of ``mode``
    ("processes" where ``build.forked`` can fork, else "threads"); returns
    (compiled, submitted), or None when skipped (no GPU, the interpreter, fewer than
    ``min_configs`` configs, a kernel under another autotuner). A config with a ``pre_hook``
    is compiled for the arguments its hook sets (``_hooked``); one whose compile fails (or
    whose hook raises) is left to the benchmark loop, which compiles it as it would have.
    ``outcomes``, when given, receives one entry per config: "ok", "failed" (the compile
    raised), "too_big" (compiled, but needs more shared memory than this GPU has: it would
    raise OutOfResources at launch) or None (not compiled here)."""
    if len(configs) < min_configs or not can_precompile() or not _compiles_directly(tuner):
        return None
    from triton import AsyncCompileMode
    from triton.runtime._async_compile import active_mode

    args = list(named_args.values())  # Triton's nargs: every positional argument, in order
    meta = {k: v for k, v in kwargs.items() if k != "warmup"}
    kernels = []
    with _executor(mode, compile_threads(len(configs), threads)) as pool:
        async_mode = AsyncCompileMode(pool, ignore_errors=True)
        try:
            with async_mode:
                try:
                    for config in configs:
                        try:
                            # The launch the benchmark makes (tuner.fn may be a Heuristics
                            # wrapper, which adds its values), with warmup=True: compile only.
                            call = (args if config.pre_hook is None
                                    else _hooked(named_args, meta, config))
                            kernels.append(tuner.fn.run(*call, warmup=True,
                                                        **{**meta, **config.all_kwargs()}))
                        except Exception:  # e.g. a config the binder rejects: the benchmark
                            kernels.append(None)  # meets and reports the same failure
                finally:  # a forked batch starts once every compile is submitted
                    getattr(pool, "start", lambda: None)()
        finally:
            # Triton leaves the mode active if finishing it raised (a post-compile hook, an
            # interrupt); every later compile in this thread would then go to a closed pool.
            if active_mode.get() is async_mode:
                active_mode.set(None)
    if outcomes is not None:
        outcomes.extend(_outcome(k) for k in kernels)
    return sum(_compiled(k) for k in kernels), len(configs)


def _executor(mode: str, workers: int) -> Any:
    if mode == "processes":
        from costtune.build.forked import ForkCompiler, can_fork_compile

        if can_fork_compile():
            return ForkCompiler(workers)
    return thread_pool(workers)


def _hooked(named_args: Mapping[str, Any], meta: Mapping[str, Any], config: Any) -> list:
    """The positional arguments as ``config.pre_hook`` leaves them before its benchmark
    launch (Triton's tutorials set host TensorDescriptors' block shapes there, which changes
    what compiles), run on copies of the descriptors so that configs compiled side by side
    do not see each other's shapes; tensors are the caller's, as in Triton's own calls."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    copies = {k: copy.copy(v) if isinstance(v, TensorDescriptor) else v
              for k, v in named_args.items()}
    full = {**copies, **meta, **config.all_kwargs()}
    config.pre_hook(full)
    return [full[k] for k in named_args]


def precompiler(tuner: Any, option: Any) -> Any:
    """The pruner's after-prune step under plain ``triton.autotune``: compile the kept configs
    in parallel before Triton benchmarks them one by one; None for no tuner, ``option``
    False (a ``precompile=`` value), or ``costtune.autotune``'s tuner (it precompiles what it
    benchmarks itself)."""
    parsed = parse_precompile(option)
    if tuner is None or parsed is None or hasattr(tuner, "precompile_threads"):
        return None
    mode, count = parsed

    def run(kept: list[Any], named_args: Mapping[str, Any], kwargs: Mapping[str, Any],
            family: str | None) -> tuple[int, int] | None:
        return precompile(tuner, kept, named_args=named_args, kwargs=kwargs, threads=count,
                          mode=mode)

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


def _compiled(kernel: Any) -> bool:
    if kernel is None:
        return False
    if hasattr(kernel, "future"):  # triton's FutureKernel: finalized on leaving the mode
        return kernel.kernel is not None
    return True  # already in the JIT's cache
