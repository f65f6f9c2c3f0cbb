"""Compiling in forked processes: the few dozen compiles of one tuning call, truly in parallel.

Threads (``build.threads``) overlap only part of a compile: Triton's Python frontend holds the
GIL. A spawned pool must first import torch, triton and the user's module (~6 s on the H200
host). A fork has all of that already, the user's kernel included (even one defined in
``__main__``), and needs no pickling: each child runs the very compile closures Triton hands an
executor under ``triton.AsyncCompileMode`` (``self.compile(src, target=..., options=...)``, the
target given, so no CUDA call), writing to Triton's on-disk cache. This process then runs each
closure again in a thread: a cache hit, the kernel loaded in milliseconds. Same closure, same
cache key.

A fork copies the page tables of a process holding torch and a CUDA context: ~60 ms each on
the H200 host, so 16 forks one after another would start the last child a second late. The
children fork each other instead (child ``j`` forks ``j + 2**m`` for every ``2**m > j``): 16
children are up after five fork times. Every process reaps the children it forked before it
exits, and child 0 is the tree's subreaper, so a killed child's children are reaped too. (If
child 0 itself is killed, its children go to init - or, where this process is PID 1 of a
container, to this process, which does not reap them.)

Nothing depends on the children: a closure whose child failed, died or stalled is run here (a
real compile, so a real failure raises here as it would have), a child that reports nothing
for ``stall_s`` seconds is killed, and a batch that cannot fork, make its pipes or start its
threads compiles here. Children reset the parent's signal handlers. Linux only; not when
Triton recompiles every time (``TRITON_ALWAYS_COMPILE``), where the second run would compile
again, nor in a process over 6 GB resident (``can_fork_compile``).

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
_PID = struct.Struct("=q")  # first, each child's pid
_REPORT = struct.Struct("=cd")  # then per job: verdict, seconds the child spent on it
Job = tuple[Callable[[], Any], Future]


# A fork copies the page tables of what this process holds in memory: ~40 ms per 1.3 GB on
# the dev VM, ~50-60 ms for a tuning process on the H200 host. Past this, the five forks of a
# 16-child tree would cost more than processes gain over threads (0-0.6 s there).
MAX_RESIDENT_BYTES = 6 * 2**30
LEARN_THREAD = "costtune-learn-"  # how costtune.tune.learn names its update threads


def can_fork_compile(*, max_resident: int = MAX_RESIDENT_BYTES) -> bool:
    """True where forked children can fill Triton's disk cache for this process, safely and
    cheaply: Linux (``os.fork``), Triton's cache on (not ``TRITON_ALWAYS_COMPILE``), at most
    ``max_resident`` bytes resident (a large process - a training job holding tens of GB -
    compiles in threads instead), and no ``torch.distributed`` process group or MPI in the
    process (fork is unsafe with some RDMA transports, and the gain is small: threads), nor a
    ``learn=True`` update running in a thread (``tune.learn``: a fork copies only the forking
    thread, and a lock the other holds would stay held in the child)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    if "mpi4py" in sys.modules or _distributed() or _learning():
        return False
    try:
        from triton import knobs

        if knobs.compilation.always_compile:
            return False
        with open("/proc/self/statm") as f:
            resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return resident <= max_resident
    except Exception:
        return False


def _learning() -> bool:
    """Whether a ``learn=True`` update thread (named ``LEARN_THREAD...``) is alive."""
    return any(t.name.startswith(LEARN_THREAD) and t.is_alive() for t in threading.enumerate())


def _distributed() -> bool:
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:
        return True  # cannot tell: do not fork


class ForkCompiler(Executor):
    """An executor for one batch of compile closures: ``submit`` them all, then ``start``
    forks up to ``workers`` children, each running its share (round-robin in submission
    order, so the first submitted finish first); every future resolves with the closure's
    result run in this process after its child compiled it (or instead, when the child
    failed). Closures submitted after ``start`` run in threads here."""

    def __init__(self, workers: int, *, stall_s: float = 60.0) -> None:
        self.workers = max(1, int(workers))
        self.stall_s = float(stall_s)
        self._jobs: list[Job] = []
        self._threads: list[threading.Thread] = []
        self._started = False
        self._count = threading.Lock()
        self.forked = 0  # children that reported in
        self.compiled_in_child = 0  # closures a child ran without error
        self.ran_here = 0  # closures that compiled here (a child failed, stalled or none ran)
        self.child_seconds: list[float] = []  # each job's time in its child, as reported
        self.fork_s = 0.0  # this process's time forking

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        call = (lambda: fn(*args, **kwargs)) if args or kwargs else fn
        if self._started:
            self._spawn_thread(self._run_here, [(call, future)])
        else:
            self._jobs.append((call, future))
        return future

    def start(self) -> None:
        """Fork the children (at most one per job) and the threads that wait for them. Never
        raises: what cannot be forked or watched is compiled here."""
        if self._started:
            return
        self._started = True
        jobs, self._jobs = self._jobs, []
        n = min(self.workers, len(jobs))
        if not n:
            return
        shares = [jobs[i::n] for i in range(n)]
        start = time.perf_counter()
        pipes: list[tuple[int, int]] = []
        watched, writes_open = 0, True
        try:
            for _ in range(n):
                pipes.append(os.pipe())
            pid = _fork(lambda: _child(0, shares, pipes))  # child 0 forks the others
            writes_open = False
            for _, write_fd in pipes:
                os.close(write_fd)  # the children hold them: end of file once child j is gone
            self.fork_s = time.perf_counter() - start
            if pid is None:  # fork refused (no memory, no pids)
                raise OSError("fork refused")
            for j, (read_fd, _) in enumerate(pipes):
                self._spawn_thread(self._collect, read_fd, shares[j], pid if j == 0 else None)
                watched += 1
        except Exception:
            for j, (read_fd, write_fd) in enumerate(pipes):
                # each end closed once: a number closed twice may be another file's by then
                ends = [write_fd] if writes_open else []
                if j >= watched:
                    ends.append(read_fd)
                for fd in ends:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            for share in shares[watched:]:
                try:
                    self._spawn_thread(self._run_here, share)
                except Exception:  # no thread either: compile here, now
                    self._run_here(share)

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

    def _collect(self, fd: int, share: list[Job], direct: int | None) -> None:
        """Read child's pid, then its verdict on each of its jobs, in order; load what it
        compiled, compile here what it did not. ``direct``: the pid of this process's own
        child (reaped here; the others are reaped by the child that forked them, or by child
        0, the subreaper of the tree)."""
        done, pid, stalled = 0, None, False
        try:
            raw = _read(fd, _PID.size, self.stall_s)
            stalled = raw is _STALLED
            if isinstance(raw, bytes):
                (pid,) = _PID.unpack(raw)
                with self._count:
                    self.forked += 1
                while done < len(share):
                    raw = _read(fd, _REPORT.size, self.stall_s)
                    if not isinstance(raw, bytes):  # the child died or stalled
                        stalled = raw is _STALLED
                        break
                    verdict, seconds = _REPORT.unpack(raw)
                    with self._count:
                        self.child_seconds.append(seconds)
                        self.compiled_in_child += verdict == _OK
                    self._resolve(*share[done], in_child=verdict == _OK)
                    done += 1
        except Exception:  # whatever went wrong here, the jobs left are compiled here
            stalled = True
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
            target = pid if pid is not None else direct
            if stalled and target is not None:  # alive but silent: stop it (a dead one's
                with contextlib.suppress(OSError):  # pid may be someone else's by now)
                    os.kill(target, signal.SIGKILL)
            for job in share[done:]:
                self._resolve(*job, in_child=False)
            if direct is not None:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(direct, 0)

    def _run_here(self, jobs: list[Job]) -> None:
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


def _fork(child: Callable[[], None]) -> int | None:
    """Fork; the child runs ``child`` and exits (never returning into the caller's code, even
    on an exception or a signal); None when the fork is refused."""
    try:
        with warnings.catch_warnings():
            # Python 3.12 warns on fork in a threaded process: the child runs only compiles
            # (no CUDA, no lock of the parent's threads), and a child that stalls anyway is
            # killed and its jobs compiled here.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except (OSError, RuntimeError):
        return None
    if pid == 0:
        try:
            child()
        finally:
            os._exit(1)
    return pid


def _child(j: int, shares: list[list[Job]], pipes: list[tuple[int, int]]) -> None:
    """Child ``j``: report its pid, fork children ``j + 2**m`` (each ``2**m > j``), run share
    ``j``, report one verdict per job to pipe ``j``, reap the children it forked (child 0,
    the tree's subreaper, also any orphaned below it), exit without the parent's exit hooks
    (or flushing its output a second time)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        with contextlib.suppress(OSError, ValueError):  # the parent's handlers are not ours
            signal.signal(sig, signal.SIG_DFL)
    if j == 0:
        _become_subreaper()
    code = 0
    try:
        os.write(pipes[j][1], _PID.pack(os.getpid()))
        m = j.bit_length()
        while j + (1 << m) < len(shares):  # a refused fork: that subtree compiles there
            _fork(lambda k=j + (1 << m): _child(k, shares, pipes))
            m += 1
        for i, (read_fd, write_fd) in enumerate(pipes):
            os.close(read_fd)
            if i != j:
                os.close(write_fd)
        out = pipes[j][1]
        devnull = os.open(os.devnull, os.O_WRONLY)  # Triton prints whole PTX on a failure
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        for call, _ in shares[j]:
            start = time.perf_counter()
            try:
                call()
                verdict = _OK
            except BaseException:
                verdict = _FAILED
            os.write(out, _REPORT.pack(verdict, time.perf_counter() - start))
        os.close(out)
    except BaseException:
        code = 1
    finally:
        _reap_children()
        os._exit(code)


def _become_subreaper() -> None:
    """Orphans below child 0 (a killed child's children) become its children, so it reaps
    them (Linux ``PR_SET_CHILD_SUBREAPER``; without it they go to init)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _reap_children() -> None:
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


_STALLED, _ENDED = object(), object()


def _read(fd: int, size: int, timeout_s: float) -> bytes | object:
    """``size`` bytes from ``fd``; ``_ENDED`` at end of file (the writer is gone),
    ``_STALLED`` when ``timeout_s`` passes without them all. ``poll``, not ``select``: a
    process may hold file descriptors past 1024."""
    deadline = time.monotonic() + timeout_s
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    data = b""
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            return _STALLED
        try:
            ready = poller.poll(left * 1e3)
        except InterruptedError:
            continue
        if ready:
            chunk = os.read(fd, size - len(data))
            if not chunk:
                return _ENDED
            data += chunk
    return data
