"""Collection on a Dask cluster: one task per workload, one GPU per worker.

Each task (``costtune.collect.dask_task.measure_task``, a plain function) returns a
workload's rows and its worker's environment; this process appends them as tasks complete,
so a dying worker loses only the workload it was measuring. This process claims each workload
as it submits it (``Store.claim``) and skips one another collector holds (the summary's
``busy_workloads``), so two collections on one store never measure a workload twice. Resume is
per GPU model: the workers' (``gpu``, or asked from the workers; the replay runner resumes on
any GPU's rows). Every deployment needs: one GPU
per worker (``CUDA_VISIBLE_DEVICES``, ``--resources GPU=1``) and non-daemonic workers
(``DASK_DISTRIBUTED__WORKER__DAEMON=False``) so the precompile pool can start; a daemonic
worker compiles serially and the summary warns.
"""

from __future__ import annotations

import copy
import functools
import os
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from costtune.build.errors import error_text
from costtune.collect.dask_task import GPU_RESOURCE, RUNNERS, ShutdownCompilePool, measure_task
from costtune.collect.plan import plan_workloads, spread_order, still_needed
from costtune.types import Measurement, Status, Workload

ORDERS = ("spread", "given")



def collect_dask(workloads: list[Workload], store, *, scheduler: Any = None,
                 runner: str = "gpu",
                 replay_dataset: pd.DataFrame | str | os.PathLike | None = None,
                 suite: str = "", max_configs: int | None = None, seed: int = 0, reps: int = 10,
                 retries: int = 1, gpus: int | list[int] | None = None,
                 compile_workers: int | None = None, worker_env: dict[str, str] | None = None,
                 time_budget_s: float | None = None, replay_delay_s: float = 0.0,
                 meta: dict[str, Any] | None = None, order: str = "spread",
                 gpu: str | None = None,
                 progress: Callable[[Workload, Measurement | None, int], None] | None = None,
                 on_stored: Callable[[Workload, list[dict]], None] | None = None
                 ) -> dict[str, Any]:
    """Measure every workload not yet stored, one Dask task per workload; returns a summary.

    ``scheduler``: None (a LocalCluster of one single-threaded worker process per GPU in
    ``gpus``, default all visible, each pinned by CUDA_VISIBLE_DEVICES), an address
    ("tcp://host:8786"), a Cluster or a Client. Tasks need the worker resource ``GPU=1``.
    A failed task is retried ``retries`` times by Dask, then reported in ``failed_workloads``;
    the next call resumes it. ``runner="replay"`` measures from ``replay_dataset`` (a path or
    DataFrame) instead of a GPU; ``replay_delay_s`` (replay only) sleeps in each task.
    ``time_budget_s``: submit no new workload after this many seconds. ``order``: "spread"
    (biggest first, kernels in turn: ``costtune.collect.plan.spread_order``) or "given" (the
    order of ``workloads``; one worker measures them in exactly that order). ``gpu``: the GPU
    model the workers measure on, for resume (default: asked from the workers; they must agree);
    with ``runner="replay"``, the GPU model whose rows to replay (needed where the dataset holds
    a workload from several).

    >>> import costtune, tempfile
    >>> from costtune.store.dataset import Store
    >>> w = Workload("softmax", {"rows": 4096, "cols": 4096}, "float16")
    >>> s = collect_dask([w], Store(tempfile.mkdtemp()), runner="replay", gpus=1,
    ...                  replay_dataset="datasets/h200")  # doctest: +SKIP
    >>> s["workloads"], s["configs"], s["failed_workloads"]  # doctest: +SKIP
    (1, 92, [])
    """
    _check_options(runner=runner, order=order, replay_dataset=replay_dataset,
                   replay_delay_s=replay_delay_s, scheduler=scheduler, gpus=gpus,
                   worker_env=worker_env)
    t0 = time.perf_counter()
    summary: dict[str, Any] = {
        "workloads": 0, "configs": 0, "ok": 0, "failed": 0, "skipped_workloads": 0,
        "busy_workloads": [], "stopped_early": False, "seconds": 0.0, "startup_s": 0.0,
        "errors": [], "failed_workloads": [], "not_measured": 0, "workers": {}, "warnings": []}
    plan = functools.partial(plan_workloads, workloads, store, max_configs=max_configs,
                             seed=seed)
    ask_workers = runner == "gpu" and gpu is None
    todo, summary["skipped_workloads"] = plan(gpu=gpu) if not ask_workers else ([None], 0)
    if not todo:
        summary["seconds"] = time.perf_counter() - t0
        return summary
    task_kw = {"runner": runner, "reps": reps, "seed": seed, "replay_delay_s": replay_delay_s,
               "extra": {"suite": suite}, "compile_workers": compile_workers}
    devices = _local_devices(gpus, runner) if scheduler is None else []
    if scheduler is None and compile_workers is None and runner == "gpu":
        task_kw["compile_workers"] = max(1, len(os.sched_getaffinity(0)) // len(devices))
    source = {"replay_source": "DataFrame" if isinstance(replay_dataset, pd.DataFrame)
              else str(replay_dataset)} if runner == "replay" else {}
    store_rows = functools.partial(_store_rows, store=store, summary=summary, by_gpu={},
                                   meta={**(meta or {}), **source}, progress=progress,
                                   on_stored=on_stored)
    t_start = time.perf_counter()
    with _connect(scheduler, devices=devices, worker_env=worker_env, retries=retries) as client:
        summary["startup_s"] = time.perf_counter() - t_start
        if ask_workers:
            gpu = _worker_gpu(client)
            todo, summary["skipped_workloads"] = plan(gpu=gpu)
        if todo:
            replay_rows = (_replay_rows(replay_dataset, todo, gpu) if runner == "replay"
                           else {})
            if runner == "gpu":
                client.register_plugin(ShutdownCompilePool(), name="costtune-compile-pool")
            claims = _Claims(store, gpu=gpu if runner == "gpu" else None, summary=summary)
            try:
                _run(client, todo if order == "given" else spread_order(todo), task_kw,
                     replay_rows, retries=retries, t0=t0, time_budget_s=time_budget_s,
                     store_rows=store_rows, summary=summary, claims=claims)
            finally:
                claims.release_all()
    summary["seconds"] = time.perf_counter() - t0
    return summary


class _Claims:
    """The workloads this collection holds (``Store.claim``): taken at submission, released
    once the workload's rows are stored or its task failed."""

    def __init__(self, store, *, gpu: str | None, summary: dict[str, Any]) -> None:
        self.store, self.gpu, self.summary = store, gpu, summary
        self.held: dict[str, Any] = {}

    def take(self, w: Workload, configs: list) -> list | None:
        """The configs still to measure once ``w`` is claimed; None when another collector
        holds it (reported busy) or stored it meanwhile (counted skipped)."""
        lock = self.store.claim(w.kernel, w.id, gpu=self.gpu)
        if lock is None:
            self.summary["busy_workloads"].append(w.id)
            return None
        configs = still_needed(self.store, w, configs, gpu=self.gpu)
        if not configs:
            lock.release()
            self.summary["skipped_workloads"] += 1
            return None
        self.held[w.id] = lock
        return configs

    def release(self, w: Workload) -> None:
        lock = self.held.pop(w.id, None)
        if lock is not None:
            lock.release()

    def release_all(self) -> None:
        for wid in list(self.held):
            self.held.pop(wid).release()


def _worker_gpu(client) -> str | None:
    """The GPU model of the cluster's workers (None when none sees a GPU: their tasks fail
    and say why); ValueError when they differ (one collection resumes one GPU model)."""
    names = {n for n in client.run(_visible_gpu_name).values() if n}
    if len(names) > 1:
        raise ValueError(f"the workers measure on different GPU models {sorted(names)}; run one "
                         "collection per model (or pass gpu=)")
    return names.pop() if names else None


def _visible_gpu_name() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def _check_options(*, runner: str, order: str, replay_dataset: Any, replay_delay_s: float,
                   scheduler: Any, gpus: Any, worker_env: Any) -> None:
    if runner not in RUNNERS:
        raise ValueError(f"runner must be one of {RUNNERS}, got {runner!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if (runner == "replay") != (replay_dataset is not None):
        raise ValueError("replay_dataset is required with runner='replay' and only then")
    if replay_delay_s and runner != "replay":
        raise ValueError("replay_delay_s applies to runner='replay' only")
    if scheduler is not None and (gpus is not None or worker_env):
        raise ValueError("gpus and worker_env shape the local cluster; a given scheduler's "
                         "workers are started (one GPU each, their env set) where they run")


def _store_rows(w: Workload, out: dict[str, Any], address: str, *, store, summary: dict,
                by_gpu: dict, meta: dict[str, Any], progress, on_stored) -> None:
    """Append one finished task's rows (this process is the store's one writer) and count
    them in ``summary``."""
    rows, part_meta = out["rows"], out["meta"]
    note = f"{part_meta.get('compile_note')}: start workers with " \
           "DASK_DISTRIBUTED__WORKER__DAEMON=False"
    if "compile_note" in part_meta and note not in summary["warnings"]:
        summary["warnings"].append(note)
    if out["not_measured"]:
        summary["not_measured"] += out["not_measured"]
        summary["errors"].append(f"{w.id}: {out['not_measured']} configs not in the replay"
                                 " dataset (not stored)")
    _check_shared_gpu(by_gpu, w, out, summary)
    if not rows:
        return
    store.append(rows, meta={**part_meta, **meta, "workload": w.id, "collector": "dask",
                             "dask_scheduler": address}, existing="skip")
    n_ok = sum(r["status"] == Status.OK.value for r in rows)
    summary["workloads"] += 1
    summary["configs"] += len(rows)
    summary["ok"] += n_ok
    summary["failed"] += len(rows) - n_ok
    worker = str(part_meta.get("dask_worker_name") or part_meta.get("dask_worker"))
    summary["workers"][worker] = summary["workers"].get(worker, 0) + 1
    if progress is not None:
        progress(w, None, -len(rows))
    if on_stored is not None:
        on_stored(w, rows)


def _run(client, todo, task_kw, replay_rows, *, retries, t0, time_budget_s, store_rows,
         summary, claims: _Claims) -> None:
    from distributed import as_completed

    _gpu_slots(client, check=True)
    address = client.scheduler.address
    pending = list(todo)  # in the order to measure
    futures: dict[Any, Workload] = {}
    done = as_completed()

    def submit_next() -> None:
        while pending:  # the next workload no other collector holds
            priority = len(pending)  # Dask runs higher priorities first: earlier is higher
            w, configs = pending.pop(0)
            configs = claims.take(w, configs)
            if configs is None:
                continue
            rows = replay_rows.get(w.id) if task_kw["runner"] == "replay" else None
            fut = client.submit(measure_task, w, configs, **task_kw, replay_rows=rows,
                                key=f"costtune-{w.id}-{uuid.uuid4().hex[:8]}",
                                resources={GPU_RESOURCE: 1}, retries=retries,
                                priority=priority, pure=False)
            futures[fut] = w
            done.add(fut)
            return

    def over_budget() -> bool:
        return time_budget_s is not None and time.perf_counter() - t0 > time_budget_s

    # Without a budget the scheduler holds the queue (adaptive clusters see all the work); with
    # one, only as many workloads are in flight as there are GPUs, so the budget can stop us.
    window = len(pending) if time_budget_s is None else max(1, _gpu_slots(client))
    while pending and len(futures) < window:
        submit_next()
    for fut in done:
        w = futures.pop(fut)
        if fut.status == "finished":
            store_rows(w, fut.result(), address)
        else:
            err = fut.exception() if fut.status == "error" else f"task {fut.status}"
            err = error_text(err) if isinstance(err, BaseException) else err
            summary["failed_workloads"].append(w.id)
            summary["errors"].append(f"{w.id}: {err} (retries={retries}; rerun to resume)")
        claims.release(w)
        fut.release()
        if pending and over_budget():
            summary["stopped_early"] = True
            pending.clear()
        elif pending:
            submit_next()


def _replay_rows(dataset, todo, gpu: str | None) -> dict[str, pd.DataFrame]:
    """Each workload's recorded rows (GPU model ``gpu``'s where given): a task carries its own
    slice, so workers need no copy of the dataset. Workloads the dataset lacks get an empty
    frame (their configs come back NOT_MEASURED and are not stored)."""
    from costtune.measure.replay import rows_of_gpu
    from costtune.store.dataset import REQUIRED_COLUMNS, load_dataset

    wanted = {w.id for w, _ in todo}
    if isinstance(dataset, pd.DataFrame):
        one_gpu = gpu is not None and "gpu" in dataset.columns  # else: one model's rows
        frames = [rows_of_gpu(dataset, gpu) if one_gpu else dataset]
    else:
        frames = [load_dataset(Path(dataset), kernel=k, gpu=gpu)
                  for k in sorted({w.kernel for w, _ in todo})]
    out: dict[str, pd.DataFrame] = {}
    for df in frames:
        df = df[df["workload"].isin(wanted)]
        for wid, part in df.groupby("workload", sort=False):
            out[str(wid)] = part.reset_index(drop=True)
    empty = pd.DataFrame({c: pd.Series(dtype=object) for c in REQUIRED_COLUMNS})
    return {wid: out.get(wid, empty) for wid in wanted}


@contextmanager
def _connect(scheduler: Any, *, devices: list[str], worker_env: dict[str, str] | None,
             retries: int):
    """A Client for ``scheduler``; closes only what it opened."""
    import dask
    from distributed import Client

    if isinstance(scheduler, Client):
        yield scheduler
        return
    if scheduler is not None:
        with Client(scheduler) as client:
            yield client
        return
    # The nanny reads these when it (re)starts a worker process, so they hold for the whole run.
    with dask.config.set({"distributed.worker.daemon": False,
                          "distributed.scheduler.allowed-failures": max(retries, 1)}):
        cluster = _local_gpu_cluster(devices, worker_env=worker_env)
        try:
            with Client(cluster) as client:
                client.wait_for_workers(len(devices), timeout=120)
                yield client
        finally:
            cluster.close()


def _local_gpu_cluster(devices: list[str], *, worker_env: dict[str, str] | None):
    from distributed import LocalCluster

    cluster = LocalCluster(n_workers=0, threads_per_worker=1, processes=True,
                           dashboard_address=None, resources={GPU_RESOURCE: 1})
    for dev in devices:  # the nanny sets env before the worker process starts (and restarts)
        spec = copy.deepcopy(cluster.new_spec)
        env = {**(worker_env or {}), "CUDA_VISIBLE_DEVICES": dev}
        spec["options"]["env"] = {**spec["options"].get("env", {}), **env}
        cluster.worker_spec[f"gpu{dev}"] = spec
    cluster.scale(len(devices))
    return cluster


def _local_devices(gpus: int | list[int] | None, runner: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES of each local worker (our indices, mapped through our own)."""
    gpus = list(range(gpus)) if isinstance(gpus, int) else gpus
    if gpus is None:
        import torch

        gpus = list(range(torch.cuda.device_count()))
        if not gpus:
            if runner == "gpu":
                raise ValueError("no CUDA GPU visible for a local cluster; pass scheduler=")
            gpus = [0, 1]  # replay on a CPU machine: two workers exercise the plumbing
    if not gpus:
        raise ValueError("gpus is empty")
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    if visible and max(gpus) >= len(visible):
        raise ValueError(f"gpus {gpus} exceed CUDA_VISIBLE_DEVICES={visible}")
    return [visible[g] if visible else str(g) for g in gpus]


def _gpu_slots(client, *, check: bool = False) -> int:
    """GPU slots the cluster offers now; ``check`` raises when workers offer none."""
    workers = client.scheduler_info()["workers"]
    slots = sum(int(w.get("resources", {}).get(GPU_RESOURCE, 0)) for w in workers.values())
    if check and workers and not slots:
        raise ValueError(f"none of the {len(workers)} workers at {client.scheduler.address} "
                         f"offers the resource {GPU_RESOURCE}; start each worker on one GPU: "
                         f"CUDA_VISIBLE_DEVICES=<i> dask worker ADDRESS --nthreads 1 "
                         f"--resources {GPU_RESOURCE}=1")
    return slots


def _check_shared_gpu(by_gpu: dict, w: Workload, out: dict[str, Any], summary) -> None:
    """Warn when two workloads ran at the same time on one physical GPU: a worker that is not
    pinned to its own device makes timings interfere."""
    if out["meta"].get("runner") == "gpu" and out["meta"].get("gpu_uuid"):
        key = f"{out['meta']['gpu_uuid']} on {out['meta'].get('hostname')}"
        summary["warnings"] += [f"{w.id} and {other} ran at the same time on {key}: pin one "
                                "worker per GPU (CUDA_VISIBLE_DEVICES)"
                                for t0, t1, other in by_gpu.get(key, [])
                                if out["t0"] < t1 and t0 < out["t1"]]
        by_gpu.setdefault(key, []).append((out["t0"], out["t1"], w.id))
