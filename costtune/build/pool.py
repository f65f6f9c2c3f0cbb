"""The one long-lived process pool that compiles for collection and for offline features.

Workers are spawned (no CUDA state inherited), start without ``TRITON_INTERPRET`` (so even a
script that imports kernels at top level re-imports them as JIT functions there), and run at a
lower priority so compiles yield the CPU to processes timing kernels on the GPU. Worker
start-up (torch and triton imports) is paid once per process; a pool that timed out or lost a
worker is shut down and replaced on the next request.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import threading
import time
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import psutil

from costtune.build.errors import CompileResult, error_text
from costtune.types import Config, Status

_POOL: ProcessPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_POOL_SIZE = 0


def _lower_priority() -> None:
    # Pool initializer: compiles yield the CPU to the processes timing kernels on the GPU.
    with contextlib.suppress(OSError, AttributeError):
        os.nice(5)


def _pool(workers: int) -> ProcessPoolExecutor:
    """The shared pool with ``workers`` processes, all started now: each submit to a pool
    without idle workers starts one, and a child takes the environment at its start."""
    with _POOL_LOCK:  # one pool made at a time (and the main module hidden once)
        return _make_pool(workers)


def _make_pool(workers: int) -> ProcessPoolExecutor:
    global _POOL, _POOL_SIZE
    if (_POOL is None or _POOL_SIZE != workers or getattr(_POOL, "_broken", False)
            or getattr(_POOL, "_shutdown_thread", False)):  # broken, or shut down by a caller
        shutdown_pool()
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                   initializer=_lower_priority)
        saved = os.environ.pop("TRITON_INTERPRET", None)
        try:
            with _main_hidden():
                for _ in range(workers):
                    pool.submit(int)
        finally:
            if saved is not None:
                os.environ["TRITON_INTERPRET"] = saved
        _POOL, _POOL_SIZE = pool, workers
    return _POOL


@contextlib.contextmanager
def _main_hidden() -> Any:
    """While workers start: a spawned worker imports the parent's main script or module
    (``__mp_main__``) for what it defines, so a script with no ``if __name__ ==
    "__main__":`` guard (Triton's tutorials) would run again in every worker. The pool's jobs
    name only costtune's code, so the main module's path and spec are hidden from the
    workers' start-up data meanwhile."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__")
             if main is not None and k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
            if "__spec__" not in saved:
                main.__dict__.pop("__spec__", None)


def get_pool(workers: int | None = None) -> ProcessPoolExecutor:
    """The shared pool, ``workers`` processes (default: every core)."""
    return _pool(workers or os.cpu_count() or 1)


def shutdown_pool(*, wait: bool = False, kill: bool = False, grace_s: float = 5.0) -> None:
    """Stop the long-lived pool: queued jobs are cancelled; with ``kill`` its processes and
    theirs (a compiler's ``ptxas``) are terminated too, and gone when this returns (SIGKILL
    after ``grace_s``): a compile that hangs would otherwise keep its process, and this
    interpreter's exit, waiting for good."""
    global _POOL
    if _POOL is None:
        return
    pool, _POOL = _POOL, None
    procs = _process_tree(pool) if kill else []
    for proc in procs:  # its queued jobs then fail as BrokenProcessPool, not cancelled
        with contextlib.suppress(psutil.Error):  # (cancelling them races the executor's
            proc.terminate()  # own clean-up of a broken pool on Python 3.11)
    pool.shutdown(wait=wait, cancel_futures=not procs)
    if procs:
        alive = _wait_gone(procs, grace_s)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        _wait_gone(alive, grace_s)


def _process_tree(pool: ProcessPoolExecutor) -> list[psutil.Process]:
    """The pool's worker processes and their children, as psutil handles (taken before any
    dies: an orphan is re-parented and no longer found from here)."""
    out = []
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(psutil.Error, ValueError, AttributeError):
            handle = psutil.Process(proc.pid)
            out += [handle, *handle.children(recursive=True)]
    return out


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until ``procs`` are dead (a zombie counts: dead, not yet reaped); the ones still
    running after ``timeout``. Never reaps: the executor's own thread reaps its workers, and a
    second ``waitpid`` racing it makes ``multiprocessing`` report a dead worker as alive."""
    deadline = time.monotonic() + timeout
    alive = list(procs)
    while alive:
        alive = [p for p in alive if is_running(p)]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    return alive


def is_running(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs: gone and zombie processes do not."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _result(fut: Future, deadline: float) -> Any:
    """A job's result, or the exception it raised (``TimeoutError`` once past ``deadline``;
    a timeout or a dead worker shuts the pool down: a stuck or broken pool can't be reused)."""
    try:
        return fut.result(timeout=max(0.0, deadline - time.monotonic()))
    except CancelledError:  # cancelled by the shutdown after another job's timeout
        return FutureTimeout()
    except Exception as exc:  # a timeout, or a worker died (e.g. a compiler segfault)
        if isinstance(exc, FutureTimeout | BrokenProcessPool):
            shutdown_pool(kill=isinstance(exc, FutureTimeout))
        return exc


class PendingCompiles:
    """Compiles of one workload running in the pool; ``get(config)`` waits for one of them,
    so a caller can time the configs already compiled while the rest still compile."""

    def __init__(self, futures: dict[str, Future | CompileResult], timeout_s: float) -> None:
        self._futures = futures
        self._timeout_s = timeout_s
        self._deadline = time.monotonic() + timeout_s
        self._timed_out = False  # then the pool was killed: what did not finish timed out

    def get(self, config: Config) -> CompileResult:
        item = self._futures[config.key]
        if isinstance(item, CompileResult):
            return item
        res = _result(item, self._deadline)
        self._timed_out |= isinstance(res, FutureTimeout)
        if isinstance(res, FutureTimeout) or (self._timed_out and isinstance(res, Exception)):
            res = CompileResult(Status.TIMEOUT, self._timeout_s,
                                f"compile not done {self._timeout_s:.0f}s after submission "
                                "(the pool stops at a workload's first timeout)")
        elif isinstance(res, Exception):  # a worker died (e.g. segfault in the compiler)
            res = CompileResult(Status.COMPILE_ERROR, float("nan"), error_text(res))
        self._futures[config.key] = res
        return res

    def cancel(self) -> None:
        """Drop the compiles not started yet (the caller stopped early: an error, a lost
        CUDA context); running ones finish into Triton's cache."""
        for item in self._futures.values():
            if isinstance(item, Future):
                item.cancel()
