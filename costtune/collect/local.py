"""Collection on this machine: workloads -> measured rows -> store, resumable.

The unit of work is ``collect_workload``: a plain function from one workload (and its configs)
to rows, which the Dask collector schedules too. One GPU is measured in this process; several
GPUs go through ``collect_dask`` on a local cluster of one worker per GPU (the one multi-GPU
path).

Several collectors may share one store (another process, another machine on a shared
filesystem): each claims a workload before measuring it (``Store.claim``) and **skips** a
workload another collector holds (listed in the summary's ``busy_workloads``; a later run
resumes it if the other collector did not finish it). Resume is per GPU model: configs stored
for another GPU are measured again on this one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from costtune.collect.plan import plan_workloads, still_needed
from costtune.collect.workload import collect_workload
from costtune.types import Measurement, Status, Workload


def collect(workloads: list[Workload], store, *, suite: str = "", max_configs: int | None = None,
            seed: int = 0, reps: int = 10, gpus: list[int] | None = None,
            time_budget_s: float | None = None, meta: dict | None = None,
            progress: Callable[[Workload, Measurement | None, int], None] | None = None,
            on_stored: Callable[[Workload, list[dict]], None] | None = None) -> dict[str, Any]:
    """Measure every workload not yet stored (resume), appending one part per workload.

    ``gpus``: device indices; more than one goes to ``collect_dask`` on a local cluster of one
    worker per GPU. ``time_budget_s``: start no new workload after this many seconds (so a
    lease-bounded run ends cleanly). Returns a summary dict.
    """
    if gpus and len(gpus) > 1:
        from costtune.collect.dask import collect_dask

        return collect_dask(workloads, store, suite=suite, max_configs=max_configs, seed=seed,
                            reps=reps, gpus=list(gpus), time_budget_s=time_budget_s, meta=meta,
                            progress=progress, on_stored=on_stored)
    from costtune.env import environment, require_gpu, sm_clock_mhz
    from costtune.measure.gpu import TIMING_METHOD

    require_gpu("collect")  # before any claim or store work
    t0 = time.perf_counter()
    if gpus:
        import torch

        torch.cuda.set_device(gpus[0])  # before reading the environment of "the" GPU
    env = {**environment(), "timing_method": TIMING_METHOD, **(meta or {})}
    gpu = env.get("gpu")
    todo, n_skipped = plan_workloads(workloads, store, max_configs=max_configs, seed=seed,
                                     gpu=gpu)
    summary = {"workloads": 0, "configs": 0, "ok": 0, "failed": 0, "skipped_workloads":
               n_skipped, "busy_workloads": [], "stopped_early": False, "seconds": 0.0,
               "errors": []}

    def store_rows(w: Workload, rows: list[dict], gpu_meta: dict[str, Any]) -> None:
        # gpu_meta: the measuring GPU's clocks.
        part_meta = {**env, **gpu_meta, "workload": w.id}
        store.append(rows, meta=part_meta, existing="skip")
        n_ok = sum(r["status"] == Status.OK.value for r in rows)
        summary["workloads"] += 1
        summary["configs"] += len(rows)
        summary["ok"] += n_ok
        summary["failed"] += len(rows) - n_ok
        if on_stored is not None:
            on_stored(w, rows)

    def over_budget() -> bool:
        return time_budget_s is not None and time.perf_counter() - t0 > time_budget_s

    extra = {"suite": suite}
    device = gpus[0] if gpus else None
    for w, planned in todo:
        if over_budget():
            summary["stopped_early"] = True
            break
        claim = store.claim(w.kernel, w.id, gpu=gpu)
        if claim is None:  # another collector is measuring it now
            summary["busy_workloads"].append(w.id)
            continue
        try:
            configs = still_needed(store, w, planned, gpu=gpu)
            if not configs:  # the other collector finished it meanwhile
                summary["skipped_workloads"] += 1
                continue
            cb = (lambda m, w=w, n=len(configs): progress(w, m, n)) if progress else None
            if progress:
                progress(w, None, len(configs))
            clock = sm_clock_mhz(device)
            rows = collect_workload(w, configs, reps=reps, seed=seed, extra=extra,
                                    progress=cb)
            store_rows(w, rows, {"sm_clock_start_mhz": clock,
                                 "sm_clock_end_mhz": sm_clock_mhz(device)})
        finally:
            claim.release()
    summary["seconds"] = time.perf_counter() - t0
    return summary
