"""How ``costtune.autotune`` times the configs it keeps: the dataset's own method.

Triton's default ``do_bench`` runs each config for ~125 ms of launches (25 ms warm-up, 100 ms
measured) with the host launching every rep: about a second for eight configs, and for
kernels of a few microseconds the launch overhead it measures can outweigh the kernel.
``graph_bench`` captures ``reps`` launches, each after an L2 flush and between two events, in
one CUDA graph and replays it twice (the first replay uploads the graph and warms clocks); the
times come from the second. That is how the benchmark runner timed every row of the dataset
the model learned from, so the configs are chosen by the same measure the model ranks.

>>> import costtune
>>> # @costtune.autotune(configs, key=[...])              # graph_bench (default)
>>> # @costtune.autotune(configs, key=[...], bench="triton")  # Triton's own do_bench
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

GRAPH_REPS = 20
HOST_REPS = 3  # without CUDA: interpreted runs are slow, and their times say little
BENCH_CHOICES = ("graph", "triton")
_FLUSH: dict[int, Any] = {}  # one L2 flush buffer per device, kept for the process


def graph_bench(fn: Callable[[], Any], quantiles: Sequence[float] | None = None, *,
                reps: int = GRAPH_REPS, **_: Any) -> float | list[float]:
    """``do_bench`` for ``triton.autotune``: the median time (ms) of ``fn``, or its
    ``quantiles`` when asked (the autotuner asks for 0.5, 0.2, 0.8 and compares the lists).
    Without CUDA (Triton's interpreter on CPU, where Triton has no active driver to time
    with) ``fn`` is timed on the host clock: one warm-up run, then ``HOST_REPS``."""
    import torch

    if not torch.cuda.is_available():
        return summarize(host_times(fn, reps=HOST_REPS), quantiles)
    from costtune.measure.gpu import make_flush_buffer, time_graph

    device = torch.cuda.current_device()
    if device not in _FLUSH:
        _FLUSH[device] = make_flush_buffer(device)
    times, _ = time_graph(fn, reps=reps, flush=_FLUSH[device])
    return summarize(times, quantiles)


def host_times(fn: Callable[[], Any], *, reps: int) -> list[float]:
    """Milliseconds each of ``reps`` runs of ``fn`` took on the host clock, after one
    warm-up run: a CPU-only stand-in (the interpreter), not a GPU measure."""
    import time

    fn()
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def summarize(times: Sequence[float], quantiles: Sequence[float] | None) -> float | list[float]:
    """The median of ``times``, or their ``quantiles`` (linear interpolation, as Triton's
    do_bench computes them)."""
    import numpy as np

    if len(times) == 0:
        raise ValueError("no times to summarize")
    if quantiles is None:
        return statistics.median(times)
    return [float(v) for v in np.quantile(np.asarray(times, dtype=float), list(quantiles))]
