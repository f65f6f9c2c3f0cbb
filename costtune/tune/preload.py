"""Load the pruning hook's model in the background from the moment a kernel is decorated.

A fresh process's first tuning call would otherwise wait for reading the model (its forest
file, ``model.compact``; without one, ``import xgboost``, which imports scikit-learn and scipy,
and the booster: ~1.6-1.9 s on the H200 host, ~2.5 s on a 2-core VM). A program decorates its
kernels at import and tunes later, after building its model and data, so a daemon thread
started by ``prune_configs_by`` does that work meanwhile; the tuning call then finds the model
in memory (``model.registry.load_noted`` holds a lock, so the two never load it twice).
Nothing heavy is imported in the caller's thread.

>>> thread = preload("h200", "gemm")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from costtune.kernels import FAMILIES

_STARTED: set[tuple] = set()
_STARTED_LOCK = threading.Lock()
_RUNNING: list[threading.Thread] = []
_STUCK: set[threading.Thread] = set()  # outlived a fork's wait
WAIT_S = 120.0  # a preload slower than this (a stalled file system) is not waited for
FORK_WAIT_S = 30.0  # a fork waits this long at most for the imports in flight


def _after_fork_in_child() -> None:
    # A forked child has no preload thread: forget it, and take fresh locks (one held by the
    # parent's thread at the fork would stay held for ever).
    global _STARTED_LOCK
    _STARTED_LOCK = threading.Lock()
    _STARTED.clear()
    _RUNNING.clear()
    _STUCK.clear()


def _before_fork() -> None:
    # A thread importing when the process forks leaves the child a module lock held for ever
    # (its next import of that module hangs) or a half-initialised module: let the imports
    # this module started finish first (a second or two; bounded, so a fork never hangs).
    me = threading.current_thread()
    with _STARTED_LOCK:
        running = [t for t in _RUNNING if t.is_alive() and t is not me and t not in _STUCK]
    deadline = time.monotonic() + FORK_WAIT_S
    for thread in running:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if thread.is_alive():  # stuck (a stalled file system): later forks do not wait on it
            _STUCK.add(thread)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def preload(model: Any, family: str | None, *, two_stage: bool = False,
            stage2_model: Any = None) -> threading.Thread | None:
    """Start loading ``model`` (and with ``two_stage`` the stage-2 model) for ``family`` in a
    daemon thread; without a family (told only at the call) it imports what every model
    needs. Models given in memory need nothing, and a multiprocessing worker (which imports the
    kernel's module too, e.g. a DataLoader worker) starts nothing. A failure is left for the
    tuning call to meet and report. Returns the thread, or None when there is nothing to do."""
    import multiprocessing

    names = [m for m in (model, stage2_model if two_stage else None)
             if isinstance(m, (str, os.PathLike))]
    if not isinstance(model, (str, os.PathLike)) or multiprocessing.parent_process():
        return None  # a model in memory; a worker process re-importing the kernel's module
    family = family if family in FAMILIES else None
    key = (tuple(os.fspath(m) for m in names), family, bool(two_stage))
    with _STARTED_LOCK:
        if key in _STARTED:
            return None
        _STARTED.add(key)

    def work() -> None:
        warm_triton_key()
        try:
            import costtune.features.static  # noqa: F401  (the hook's features)
            from costtune.model.registry import default_stage2, load_noted

            if family is None:  # which model serves the kernel is told at the call
                _import_for(model)
                return
            load_noted(model, family, compact=True)  # xgboost only without a forest file
            if two_stage:
                load_noted(stage2_model if stage2_model is not None
                           else default_stage2(model), family, compact=True)
        except Exception:  # the tuning call loads it again and warns
            pass

    return _start(work, "costtune-preload")


def warm_triton_key() -> None:
    """Compute Triton's ``triton_key()`` (a hash of Triton's own files, ~0.3-0.4 s, cached for
    the process) now: the first compile of any kernel needs it, and so do Triton's autotune
    disk cache and costtune's kept-list cache, whose hit would otherwise spend most of its
    time there."""
    try:
        from triton.runtime.cache import triton_key

        triton_key()
    except Exception:  # an older or newer triton: the call computes what it needs
        pass


def start_warm() -> threading.Thread | None:
    """``warm_triton_key`` in a daemon thread (joined by ``wait``), for a process whose
    tuning call will likely hit a disk cache and so loads no model; None in a worker."""
    import multiprocessing

    if multiprocessing.parent_process():
        return None
    return _start(warm_triton_key, "costtune-warm")


def background(target: Any, name: str) -> threading.Thread:
    """``target`` in a daemon thread that the next tuning call waits for (``wait``): work
    that must not overlap the call's own imports."""
    return _start(target, name)


def _start(target: Any, name: str) -> threading.Thread:
    """``target`` in a daemon thread that ``wait`` joins."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    with _STARTED_LOCK:
        _RUNNING[:] = [t for t in _RUNNING if t.is_alive()] + [thread]
    return thread


def _import_for(model: Any) -> None:
    """Import what scoring ``model`` will need when its family is not known yet: the compact
    path's modules when the model (or, for a shipped name, the cross-family one) has a forest
    file, else xgboost and ``CostModel``."""
    from costtune.model.files import resolve
    from costtune.model.forest import forest_path

    try:
        has_forest = forest_path(resolve(model)[0]).is_file()
    except (OSError, FileNotFoundError):
        has_forest = False
    if has_forest:
        import costtune.model.compact  # noqa: F401
    else:
        import xgboost  # noqa: F401  (imports scikit-learn and scipy when installed)

        import costtune.model.xgb  # noqa: F401


def wait() -> None:
    """Wait for the preloads still running. A tuning call does so before its own work: two
    threads importing and computing side by side convoy on the GIL (each import's file read
    hands it over and waits up to 5 ms to get it back), which cost the first call ~0.5 s on
    the 2-core VM when it came right after decorating."""
    with _STARTED_LOCK:
        running = [t for t in _RUNNING if t.is_alive()]
    for thread in running:
        if thread is not threading.current_thread():
            thread.join(timeout=WAIT_S)
