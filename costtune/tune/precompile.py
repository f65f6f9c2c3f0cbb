"""Precompile the configs that survive pruning, in parallel, before Triton benchmarks them.

Triton compiles configs one after another while it benchmarks. Here the kernel is warmed up
for every surviving config at once under Triton's own ``triton.AsyncCompileMode``: each
``warmup`` call binds and specializes the arguments in this thread, exactly as the benchmark
launch will, and hands the compile to a thread pool (Triton's MLIR/LLVM passes and ptxas run
without the GIL). On leaving, every compiled kernel is in the JIT's in-memory cache, so the
benchmark loop launches them at once. Threads start instantly, where a spawned process pool
cost ~6 s before its first compile on the H200 host (workers import torch and triton). GPU
only: the interpreter compiles nothing.

>>> precompile(tuner, survivors, named_args=named_args, kwargs=kwargs)  # doctest: +SKIP
(8, 8)
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from costtune.build.threads import compile_threads, interpreting, thread_pool


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
               kwargs: Mapping[str, Any], threads: int | None = None,
               outcomes: list | None = None, min_configs: int = 2
               ) -> tuple[int, int] | None:
    """Compile ``configs`` of ``tuner`` (a triton Autotuner) for this call's arguments, in
    ``threads`` threads (default: one per usable core, at most one per config); returns
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
    with thread_pool(compile_threads(len(configs), threads)) as pool:
        mode = AsyncCompileMode(pool, ignore_errors=True)
        try:
            with mode:
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
        finally:
            # Triton leaves the mode active if finishing it raised (a post-compile hook, an
            # interrupt); every later compile in this thread would then go to a closed pool.
            if active_mode.get() is mode:
                active_mode.set(None)
    if outcomes is not None:
        outcomes.extend(_outcome(k) for k in kernels)
    return sum(_compiled(k) for k in kernels), len(configs)


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


def precompiler(tuner: Any, threads: bool | int) -> Any:
    """The pruner's after-prune step under plain ``triton.autotune``: compile the kept configs
    in parallel before Triton benchmarks them one by one; None for no tuner, ``threads``
    False, or ``costtune.autotune``'s tuner (it precompiles what it benchmarks itself)."""
    if tuner is None or threads is False or hasattr(tuner, "precompile_threads"):
        return None
    count = None if threads is True else int(threads)

    def run(kept: list[Any], named_args: Mapping[str, Any], kwargs: Mapping[str, Any],
            family: str | None) -> tuple[int, int] | None:
        return precompile(tuner, kept, named_args=named_args, kwargs=kwargs, threads=count)

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
