"""Compiling in this process's threads: Triton's MLIR/LLVM passes and ptxas run without the
GIL, and threads start at once, where a spawned pool first spends seconds importing torch and
triton. Used for the few dozen compiles of one tuning call (the hook's precompile, stage-2 AOT
features of a shortlist); large batches go to the process pool (``build.pool``).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def compile_threads(n_jobs: int, threads: int | None = None) -> int:
    """Threads for ``n_jobs`` compiles: ``threads``, else this process's usable cores, and
    never more than one per job."""
    return max(1, min(int(threads or usable_cores()), n_jobs))


def thread_pool(threads: int, *, name: str = "costtune-compile") -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max(1, threads), thread_name_prefix=name)


def interpreting() -> bool:
    """True under ``TRITON_INTERPRET=1``: @triton.jit makes interpreter functions there, which
    neither specialize nor compile."""
    from triton import knobs

    return bool(knobs.runtime.interpret)
