"""Compiling in forked processes: the few dozen compiles of one tuning call, truly in parallel.

Threads (``build.threads``) overlap little: Triton's Python frontend holds the GIL, so 13 GEMM
configs took 2-2.7 s on the H200 host in 16 threads, ~2x better than one by one. A spawned pool
must first import torch, triton and the user's module (~6 s there). A fork has all of that
already, the user's kernel included (even one defined in ``__main__``), and needs no pickling:
each child runs the very compile closures Triton hands an executor under
``triton.AsyncCompileMode`` (``self.compile(src, target=..., options=...)``, the target given,
so no CUDA call), writing to Triton's on-disk cache. This process then runs each closure again
in a thread: a cache hit, the kernel loaded in milliseconds. Same closure, same cache key.

Nothing depends on the children: a closure whose child failed, died or stalled is run here (a
real compile, so a real failure raises here as it would have), and a child that stops
reporting for ``stall_s`` seconds is killed. Linux only; not when Triton recompiles every time
(``TRITON_ALWAYS_COMPILE``), where the second run would compile again.

>>> with ForkCompiler(workers=4) as pool:  # doctest: +SKIP
...     futures = [pool.submit(compile_fn) for compile_fn in closures]
...     pool.start()  # forks now; the futures resolve as the children finish
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import sys
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

__all__ = ["ForkCompiler", "can_fork_compile"]

_OK, _FAILED = b"1", b"0"
_REPORT = struct.Struct("=cd")  # per job: verdict, seconds the child spent on it


def can_fork_compile() -> bool:
    """True where forked children can fill Triton's disk cache for this process: Linux
    (``os.fork``), Triton's cache on (not ``TRITON_ALWAYS_COMPILE``)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        from triton import knobs

        return not knobs.compilation.always_compile
    except Exception:
        return False


class ForkCompiler(Executor):
    """An executor for one batch of compile closures: ``submit`` them all, then ``start``
    forks up to ``workers`` children, each running its share (round-robin in submission
    order, so the first submitted finish first); every future resolves with the closure's
    result run in this process after its child compiled it (or instead, when the child
    failed). Closures submitted after ``start`` run in threads here."""

    def __init__(self, workers: int, *, stall_s: float = 60.0) -> None:
        self.workers = max(1, int(workers))
        self.stall_s = float(stall_s)
        self._jobs: list[tuple[Callable[[], Any], Future]] = []
        self._threads: list[threading.Thread] = []
        self._started = False
        self._count = threading.Lock()
        self.forked = 0  # children started
        self.compiled_in_child = 0  # closures a child ran without error
        self.ran_here = 0  # closures that compiled here (a child failed, stalled or none ran)
        self.child_seconds: list[float] = []  # each job's time in its child, as reported

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        call = (lambda: fn(*args, **kwargs)) if args or kwargs else fn
        if self._started:
            self._spawn_thread(self._run_here, [(call, future)])
        else:
            self._jobs.append((call, future))
        return future

    def start(self) -> None:
        """Fork the children (at most one per job) and the threads that wait for them."""
        if self._started:
            return
        self._started = True
        jobs, self._jobs = self._jobs, []
        n = min(self.workers, len(jobs))
        shares = [jobs[i::n] for i in range(n)] if n else []
        children = []
        for share in shares:
            child = self._fork(share)
            if child is None:  # fork refused (no memory, no pids): compile here
                self._spawn_thread(self._run_here, share)
            else:
                children.append((child, share))
        for (pid, fd), share in children:
            self._spawn_thread(self._collect, pid, fd, share)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.start()  # jobs submitted but never started still resolve
        if wait:
            for thread in self._threads:
                thread.join()

    def _spawn_thread(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True,
                                  name="costtune-fork-compile")
        thread.start()
        self._threads.append(thread)

    def _fork(self, share: list[tuple[Callable[[], Any], Future]]) -> tuple[int, int] | None:
        read_fd, write_fd = os.pipe()
        try:
            with warnings.catch_warnings():
                # Python 3.12 warns on fork in a threaded process: the child runs only
                # compiles (no CUDA, no locks of the parent's threads), and a child that
                # stalls anyway is killed and its jobs compiled here.
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            return None
        if pid == 0:  # the child: never returns
            _child(share, read_fd, write_fd)
        os.close(write_fd)
        self.forked += 1
        return pid, read_fd

    def _collect(self, pid: int, fd: int, share: list[tuple[Callable[[], Any], Future]]
                 ) -> None:
        """Wait for the child's verdict on each of its jobs, in order; load what it compiled,
        compile here what it did not."""
        done = 0
        try:
            while done < len(share):
                report = _read_report(fd, self.stall_s)
                if report is None:  # the child died or stalled
                    break
                verdict, seconds = report
                with self._count:
                    self.child_seconds.append(seconds)
                    self.compiled_in_child += verdict == _OK
                self._resolve(*share[done], in_child=verdict == _OK)
                done += 1
        finally:
            os.close(fd)
            _reap(pid, kill=done < len(share))
        for job in share[done:]:
            self._resolve(*job, in_child=False)

    def _run_here(self, jobs: list[tuple[Callable[[], Any], Future]]) -> None:
        for job in jobs:
            self._resolve(*job, in_child=False)

    def _resolve(self, call: Callable[[], Any], future: Future, *, in_child: bool) -> None:
        if not future.set_running_or_notify_cancel():
            return
        if not in_child:
            with self._count:
                self.ran_here += 1
        try:
            future.set_result(call())
        except BaseException as exc:  # the compile's own error, as a thread would give it
            future.set_exception(exc)


def _child(share: list[tuple[Callable[[], Any], Future]], read_fd: int, write_fd: int) -> None:
    """Run each job, report one byte per job, exit without running the parent's exit hooks
    (or flushing its buffered output a second time)."""
    code = 0
    try:
        os.close(read_fd)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_WRONLY)  # Triton prints whole PTX on a failure
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        for call, _ in share:
            start = time.perf_counter()
            try:
                call()
                verdict = _OK
            except BaseException:
                verdict = _FAILED
            os.write(write_fd, _REPORT.pack(verdict, time.perf_counter() - start))
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _read_report(fd: int, timeout_s: float) -> tuple[bytes, float] | None:
    """One job's (verdict, seconds) from ``fd``; None at end of file, or when ``timeout_s``
    passes without the whole report."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while len(data) < _REPORT.size:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            ready, _, _ = select.select([fd], [], [], left)
        except InterruptedError:
            continue
        if ready:
            chunk = os.read(fd, _REPORT.size - len(data))
            if not chunk:
                return None
            data += chunk
    verdict, seconds = _REPORT.unpack(data)
    return verdict, seconds


def _reap(pid: int, *, kill: bool) -> None:
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
