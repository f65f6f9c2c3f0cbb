"""Parallel precompilation: fill Triton's on-disk cache from a process pool before timing.

Cold ``triton.autotune`` spends most of its time compiling configs one after another. Here spawned
workers call ``warmup`` on every config at once; the measuring process then loads each kernel from
Triton's disk cache. Workers see tensors only through their shapes, strides and dtypes (empty CPU
tensors): Triton specializes on sizes, strides and 16-byte pointer alignment, all of which match.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing as mp
import os
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from costtune.types import Config, Status, Workload

_POOL: ProcessPoolExecutor | None = None
_POOL_SIZE = 0


@dataclass
class CompileResult:
    status: Status
    seconds: float
    error: str = ""


def tensor_specs(inputs: dict[str, Any]) -> dict[str, Any]:
    """Shape, stride and dtype of each input tensor (what a compile worker needs to rebuild it);
    non-tensor inputs (flags, scalars) pass through as they are."""
    import torch

    return {k: ("tensor", tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))
            if isinstance(t, torch.Tensor) else ("value", t) for k, t in inputs.items()}


def rebuild_inputs(specs: dict[str, Any]) -> dict[str, Any]:
    """Empty CPU tensors with the specs' shapes and strides (untouched pages cost nothing)."""
    import torch

    return {k: torch.empty_strided(s[1], s[2], dtype=getattr(torch, s[3])) if s[0] == "tensor"
            else s[1] for k, s in specs.items()}


def classify_error(exc: BaseException) -> Status:
    """Map a compile or launch exception to a Status (failures are data, not crashes)."""
    from triton.runtime.errors import OutOfResources, PTXASError

    if isinstance(exc, OutOfResources):
        return Status.OUT_OF_RESOURCES
    if isinstance(exc, PTXASError) or "ptxas" in str(exc).lower():
        return Status.PTXAS_ERROR
    if "out of resource" in str(exc).lower():
        return Status.OUT_OF_RESOURCES
    return Status.COMPILE_ERROR


def error_text(exc: BaseException, limit: int = 600) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= limit else text[:limit] + " ..."


def compile_config(kernel: str, specs: dict[str, tuple], config: dict[str, Any]) -> CompileResult:
    """Compile one config in this process (a pool worker) through the family's own launches.

    Under a host-wide lock per (kernel, config, specialization): GPU workers of one host that
    need the same kernel at once compile it once, the others wait and load it from Triton's
    disk cache (the seconds reported start after the wait)."""
    from costtune.kernels import get_family

    family = get_family(kernel)
    inputs = rebuild_inputs(specs)
    with compile_lock(kernel, specs, config):
        start = time.perf_counter()
        try:
            for call in family.kernel_calls(inputs, Config.from_dict(config)):
                call.warmup()
        except Exception as exc:  # every compile failure becomes a row
            return CompileResult(classify_error(exc), time.perf_counter() - start,
                                 error_text(exc))
    return CompileResult(Status.OK, time.perf_counter() - start)


def specialization_key(kernel: str, specs: dict[str, tuple], config: dict[str, Any]) -> str:
    """A hash that two compiles share when Triton likely compiles the same kernels for them:
    the config, dtypes, and for every size, stride and int how Triton specializes it (equal to
    1, divisible by 16, other). It can differ from Triton's own key either way (it ignores the
    int width and the GPU; it tells floats apart by value): a shared key only makes one compile
    wait for the other, a split one only compiles twice."""
    def cls(v: Any) -> str:
        if isinstance(v, bool) or not isinstance(v, int):
            return repr(v)
        return "1" if v == 1 else "16" if v % 16 == 0 else "x"

    parts = [kernel, repr(sorted(config.items()))]
    for name, spec in sorted(specs.items()):
        if spec[0] == "tensor":
            parts.append(f"{name}:{spec[3]}:{[cls(d) for d in spec[1]]}:"
                         f"{[cls(d) for d in spec[2]]}")
        else:
            parts.append(f"{name}={cls(spec[1])}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


LOCK_WAIT_S = 300.0  # a holder stuck longer than this (a hung worker) is compiled around


@contextlib.contextmanager
def compile_lock(kernel: str, specs: dict[str, tuple], config: dict[str, Any], *,
                 wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the host-wide lock of this compile (an flock in Triton's cache directory, released
    by the OS if the holder dies), waiting at most ``wait_s``. When flock is missing, the cache
    is not writable, the file system refuses locks (NFS without locking) or the wait runs out,
    the compile goes ahead unlocked: the lock only saves duplicate work."""
    try:
        import fcntl

        from triton import knobs

        folder = os.path.join(knobs.cache.dir, "costtune-locks")
        os.makedirs(folder, exist_ok=True)
        fd = os.open(os.path.join(folder, specialization_key(kernel, specs, config)),
                     os.O_CREAT | os.O_RDWR, 0o644)
    except (ImportError, OSError):
        yield
        return
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:  # held by another compile of the same kernel
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
            except OSError:  # the file system does not lock (ENOLCK, ENOSYS, ...)
                break
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _lower_priority() -> None:
    # Pool initializer: compiles yield the CPU to the processes timing kernels on the GPU.
    with contextlib.suppress(OSError, AttributeError):
        os.nice(5)


def _pool(workers: int) -> ProcessPoolExecutor:
    # One long-lived pool: worker start-up (torch import, CUDA init) is paid once per collection.
    global _POOL, _POOL_SIZE
    if _POOL is None or _POOL_SIZE != workers:
        shutdown_pool()
        _POOL = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                    initializer=_lower_priority)
        _POOL_SIZE = workers
    return _POOL


def shutdown_pool(*, wait: bool = False, kill: bool = False) -> None:
    """Stop the long-lived pool: queued jobs are cancelled; with ``kill`` its processes are
    terminated too (after a timeout: a compile that hangs would otherwise keep its process,
    and this interpreter's exit, waiting for good)."""
    global _POOL
    if _POOL is not None:
        procs = list((getattr(_POOL, "_processes", None) or {}).values()) if kill else []
        for proc in procs:  # its queued jobs then fail as BrokenProcessPool, not cancelled
            with contextlib.suppress(Exception):  # (cancelling them races the executor's
                proc.terminate()  # own clean-up of a broken pool on Python 3.11)
        _POOL.shutdown(wait=wait, cancel_futures=not procs)
        _POOL = None


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


def submit_compiles(workload: Workload, configs: list[Config], inputs: dict[str, Any], *,
                    workers: int | None = None, timeout_s: float = 300.0) -> PendingCompiles:
    """Start compiling every config of ``workload`` on ``workers`` processes (default: all
    cores), in the order given; returns at once. ``workers=0`` compiles here, before returning
    (no pool), which is what a CPU test can afford. A compile still running ``timeout_s`` after
    submission is a TIMEOUT."""
    specs = tensor_specs(inputs)
    if workers == 0:
        return PendingCompiles({c.key: compile_config(workload.kernel, specs, c.as_dict())
                                for c in configs}, timeout_s)
    pool = _pool(workers or os.cpu_count() or 1)
    return PendingCompiles({c.key: pool.submit(compile_config, workload.kernel, specs,
                                               c.as_dict()) for c in configs}, timeout_s)


def precompile(workload: Workload, configs: list[Config], inputs: dict[str, Any], *,
               workers: int | None = None, timeout_s: float = 300.0) -> dict[str, CompileResult]:
    """Compile every config of ``workload`` on ``workers`` processes (default: all cores) and
    wait for all of them.

    Returns ``{config.key: CompileResult}``; a compile outliving ``timeout_s`` is a TIMEOUT row.
    ``workers=0`` compiles in this process (no pool), which is what a CPU test can afford.
    """
    pending = submit_compiles(workload, configs, inputs, workers=workers, timeout_s=timeout_s)
    return {c.key: pending.get(c) for c in configs}
