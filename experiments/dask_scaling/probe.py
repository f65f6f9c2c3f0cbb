"""The host's CPU throughput with k busy processes at once (contention), measured before the
runs. Its processes are spawned: they import this module, so it stays light."""

from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd


def _ready(barrier) -> int:
    barrier.wait(timeout=120)  # returns once all k processes hold one task each
    return os.getpid()


def _spin(start_at: float, seconds: float) -> float:
    """Pure-Python work from ``start_at`` for ``seconds`` (wall); returns loops per second."""
    while time.time() < start_at:
        time.sleep(0.001)
    n, x, end = 0, 0, start_at + seconds
    while time.time() < end:
        for i in range(1000):
            x ^= i * i
        n += 1
    return n / seconds


def cpu_probe(levels: list[int], seconds: float = 3.0) -> pd.DataFrame:
    """The host's CPU throughput with 1, ..., k busy processes at once: each level runs k
    spawned processes of the same pure-Python loop for ``seconds``, started together. A
    process's rate falling with k is the contention (shared cores, another tenant) that slows
    every CPU-side part of a task when more GPU workers and their compile pools run. The first
    level runs again at the end (``repeat``) and rates are relative to the mean of its two
    runs, so a drifting host shows as two different baselines."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    out = []
    ctx = multiprocessing.get_context("spawn")
    for i, k in enumerate([*levels, levels[0]]):
        with ctx.Manager() as manager, ProcessPoolExecutor(k, mp_context=ctx) as pool:
            # every process up, this module imported, before the clock starts
            pids = set(pool.map(_ready, [manager.Barrier(k)] * k))
            if len(pids) != k:
                raise RuntimeError(f"cpu_probe: {len(pids)} of {k} processes came up")
            start_at = time.time() + 0.5
            rates = list(pool.map(_spin, [start_at] * k, [seconds] * k))
        out.append({"processes": k, "repeat": i == len(levels),
                    "per_process": float(np.mean(rates)), "slowest": float(np.min(rates))})
    df = pd.DataFrame(out)
    base = df["per_process"].iloc[[0, -1]].mean()
    return df.assign(per_process_vs_first=df["per_process"] / base,
                     slowest_vs_first=df["slowest"] / base,
                     total_vs_first=df["per_process"] * df["processes"] / base)
