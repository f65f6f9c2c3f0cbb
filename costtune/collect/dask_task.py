"""The Dask task of ``costtune.collect.dask``: what a worker runs for one workload.

``measure_task`` is a plain function (it runs anywhere, Dask or not); ``ShutdownCompilePool``
is the worker plugin that stops the compile pool as a worker closes.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import socket
import threading
import time
from typing import Any

import pandas as pd
from distributed import WorkerPlugin

from costtune.types import Config, Status, Workload

RUNNERS = ("gpu", "replay")
GPU_RESOURCE = "GPU"


def measure_task(workload: Workload, configs: list[Config], *, runner: str = "gpu",
                 reps: int = 10, seed: int = 0, extra: dict[str, Any] | None = None,
                 replay_rows: pd.DataFrame | None = None, replay_delay_s: float = 0.0,
                 compile_workers: int | None = None) -> dict[str, Any]:
    """Measure one workload on this worker: ``{"rows", "meta", "not_measured", "t0", "t1"}``.

    ``runner="gpu"`` times on this process's GPU (``costtune.collect.workload.collect_workload``);
    ``runner="replay"`` answers from ``replay_rows`` (the workload's recorded rows) after
    sleeping ``replay_delay_s``, so the plumbing runs on CPU. Runs anywhere, Dask or not:

    >>> w = Workload("softmax", {"rows": 4096, "cols": 1024}, "float16")
    >>> c = Config({"ROWS_PER_PROG": 2}, num_warps=4, num_stages=1)
    >>> rows = pd.DataFrame([{"kernel": "softmax", "workload": w.id, "dtype": "float16",
    ...     "rows": 4096, "cols": 1024, **c.as_dict(), "config": c.key, "status": "ok",
    ...     "time_ms": 0.012}])
    >>> measure_task(w, [c], runner="replay", replay_rows=rows)["rows"][0]["time_ms"]
    0.012
    """
    t0 = time.time()
    info = _worker_info()
    if runner == "replay":
        from costtune.measure.replay import ReplayRunner

        if replay_rows is None:
            raise ValueError("runner='replay' needs replay_rows")
        if replay_delay_s > 0:
            time.sleep(replay_delay_s)  # stands in for GPU time; plumbing checks only
        ms = ReplayRunner(replay_rows).measure(workload, configs)
        rows = [m.as_row() for m in ms if m.status is not Status.NOT_MEASURED]
        meta = {"runner": "replay"}
    elif runner == "gpu":
        rows, meta = _measure_on_gpu(workload, configs, reps=reps, seed=seed, extra=extra,
                                     compile_workers=compile_workers)
    else:
        raise ValueError(f"runner must be one of {RUNNERS}, got {runner!r}")
    t1 = time.time()
    # task_wall_s: the whole task on the worker (setup, environment reads, compile, timing);
    # the rows' workload_*_wall_s cover compile and timing only.
    return {"rows": rows, "meta": {**meta, **info, "task_wall_s": round(t1 - t0, 3)},
            "not_measured": len(configs) - len(rows), "t0": t0, "t1": t1}


def _measure_on_gpu(workload: Workload, configs: list[Config], *, reps: int, seed: int,
                    extra: dict[str, Any] | None, compile_workers: int | None
                    ) -> tuple[list[dict], dict[str, Any]]:
    import torch

    from costtune.collect.workload import collect_workload
    from costtune.env import environment, sm_clock_reader
    from costtune.measure.gpu import TIMING_METHOD, ContextLost

    if not torch.cuda.is_available():
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise RuntimeError(f"no CUDA GPU visible on {socket.gethostname()} "
                           f"(CUDA_VISIBLE_DEVICES={cvd!r}); give each worker one GPU")
    clock_start = sm_clock_reader()
    t0 = time.perf_counter()
    daemonic = mp.current_process().daemon  # a daemonic process may not start the compile pool
    workers = 0 if daemonic else (compile_workers or _default_compile_workers())
    if workers:  # torch's own CPU threads (inputs) stay within this worker's share of cores
        torch.set_num_threads(max(1, min(torch.get_num_threads(), workers)))
    env = environment(sm_clock=False)  # versions and driver: read once per worker process
    meta = {**env, "timing_method": TIMING_METHOD, "runner": "gpu",
            "compile_workers": workers, "task_env_s": round(time.perf_counter() - t0, 3)}
    try:
        rows = collect_workload(workload, configs, reps=reps, seed=seed, workers=workers,
                                extra=extra)
    except ContextLost:
        # This process's CUDA context is gone for good: leave once the error is reported, so
        # the nanny starts a fresh process and the retry does not land on a broken context.
        threading.Timer(1.0, os._exit, args=(70,)).start()
        raise
    finally:
        start_mhz = clock_start()
    t1 = time.perf_counter()
    meta["sm_clock_start_mhz"] = meta["sm_clock_mhz"] = start_mhz
    meta["sm_clock_end_mhz"] = sm_clock_reader()()
    meta["task_clock_wait_s"] = round(time.perf_counter() - t1, 3)
    if daemonic:
        meta["compile_note"] = "serial compile: daemonic Dask worker"
    return rows, meta


def _worker_info() -> dict[str, Any]:
    try:
        from distributed import get_worker

        worker = get_worker()
        address, name = worker.address, str(worker.name)
    except (ImportError, ValueError):  # called outside a Dask worker
        address = name = None
    return {"dask_worker": address, "dask_worker_name": name, "hostname": socket.gethostname(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


@functools.cache  # per worker process: GPUs and cores do not change under it
def _default_compile_workers() -> int:
    """This worker's share of the host's cores: usable cores / GPUs on the host."""
    from costtune.env import gpu_count

    return max(1, len(os.sched_getaffinity(0)) // max(1, gpu_count() or 1))


class ShutdownCompilePool(WorkerPlugin):
    """Worker plugin: shut the precompile pool down, waited, as the worker closes."""

    idempotent = True

    def teardown(self, worker) -> None:
        from costtune.build.pool import shutdown_pool

        shutdown_pool(wait=True)
