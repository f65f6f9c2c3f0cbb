"""Locks of a store, on a local disk or a shared filesystem.

- The writer lock: one per kernel folder (``<root>/<kernel>/.lock``), held by ``append`` while it
  checks the keys already stored and writes its part, so two writers of the same keys cannot both
  succeed.
- Claims: a collector holds ``<root>/<kernel>/.claims/<workload>@<gpu>.lock`` while it measures
  that workload on that GPU model; a second collector on the same store finds the claim taken
  and skips the workload instead of measuring it again.

Both are ``flock`` locks through ``filelock``: the operating system releases them when their
process dies (``kill -9`` included), so a dead writer or collector never leaves one behind. NFS
clients (v4, or v3 with a lock manager) honour them across machines. On a filesystem that
refuses ``flock`` (``ENOSYS``: some FUSE and Lustre mounts without ``-o flock``) a lock falls back
to a lock *file* (``filelock.SoftFileLock``), which a killed process does leave; one older than
``stale_s`` is removed (a writer holds its lock for one part's write; a claim for one workload).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

from filelock import BaseFileLock, FileLock, SoftFileLock, Timeout

__all__ = ["Timeout", "acquire", "claim_path", "try_acquire"]

CLAIMS_DIR = ".claims"
WRITER_LOCK = ".lock"


def acquire(path: Path, *, timeout: float, stale_s: float) -> BaseFileLock:
    """The lock at ``path``, acquired (wait up to ``timeout`` seconds; ``filelock.Timeout``
    after that). The caller releases it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock: BaseFileLock = FileLock(str(path), timeout=timeout)
    try:
        lock.acquire()
        return lock
    except NotImplementedError:  # filelock: "FileSystem does not appear to support flock"
        soft = SoftFileLock(str(path) + ".soft", timeout=timeout)
        _remove_if_stale(Path(soft.lock_file), stale_s)
        soft.acquire()
        return soft


def try_acquire(path: Path, *, stale_s: float) -> BaseFileLock | None:
    """The lock at ``path`` if nobody holds it now, else None (no waiting)."""
    try:
        return acquire(path, timeout=0, stale_s=stale_s)
    except Timeout:
        return None


def claim_path(root: Path, kernel: str, workload: str, gpu: str | None) -> Path:
    """Where the claim of (workload, GPU model) lives: one file per pair, named readably."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", gpu or "any-gpu").strip("-") or "any-gpu"
    return root / kernel / CLAIMS_DIR / f"{workload}@{slug}.lock"


def _remove_if_stale(path: Path, stale_s: float) -> None:
    with contextlib.suppress(OSError):
        if time.time() - os.stat(path).st_mtime > stale_s:
            path.unlink()
