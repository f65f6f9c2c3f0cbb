"""Collection: workloads -> measured rows -> store, resumable, one worker process per GPU.

The unit of work is ``collect_workload``: a plain function from one workload (and its configs)
to rows, so a cluster engine can schedule it. The store keeps a single writer: this process.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from costtune.kernels import get_family
from costtune.types import Config, Measurement, Status, Workload


def suite_problems(kernel: str, suite: str) -> list[dict[str, Any]]:
    """Problems of a named suite ("train", "test") or of a JSON file holding a list of dicts."""
    family = get_family(kernel)
    if suite in ("train", "test"):
        return [dict(p) for p in (family.TRAIN_SHAPES if suite == "train" else family.TEST_SHAPES)]
    path = Path(suite)
    if not path.is_file():
        raise ValueError(f"--suite must be 'train', 'test' or a JSON file; {suite!r} is neither")
    problems = json.loads(path.read_text())
    if not isinstance(problems, list) or not all(isinstance(p, dict) for p in problems):
        raise ValueError(f"{path}: expected a JSON list of problem dicts")
    for p in problems:
        missing = set(family.PROBLEM_KEYS) - set(p)
        if missing:
            raise ValueError(f"{path}: problem {p} lacks {sorted(missing)}")
    return problems


def bf16_subset(kernel: str, problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The shapes also measured in bf16: the family's BF16_SUBSET, else every 4th shape."""
    subset = getattr(get_family(kernel), "BF16_SUBSET", None)
    if subset is not None:
        keys = {tuple(sorted(p.items())) for p in subset}
        return [p for p in problems if tuple(sorted(p.items())) in keys]
    return problems[::4]


def suite_workloads(kernel: str, suite: str, dtypes: Iterable[str] | None = None
                    ) -> list[Workload]:
    """Workloads of a suite. ``dtypes=None`` means fp16 for every shape and bf16 on a subset."""
    family = get_family(kernel)
    problems = suite_problems(kernel, suite)
    if dtypes is None:
        pairs = [(p, "float16") for p in problems]
        pairs += [(p, "bfloat16") for p in bf16_subset(kernel, problems)]
    else:
        dtypes = list(dtypes)
        bad = [d for d in dtypes if d not in family.DTYPES]
        if bad:
            raise ValueError(f"dtype(s) {bad} not supported by {kernel}; use {family.DTYPES}")
        pairs = [(p, d) for d in dtypes for p in problems]
    return [Workload(kernel, {k: p[k] for k in family.PROBLEM_KEYS}, d) for p, d in pairs]


def workload_configs(workload: Workload, *, max_configs: int | None = None,
                     seed: int = 0) -> list[Config]:
    space = get_family(workload.kernel).config_space(workload.sizes)
    return space.sample(max_configs, seed=seed) if max_configs else space.configs()


def plan_workloads(workloads: list[Workload], store, *, max_configs: int | None = None,
                   seed: int = 0) -> tuple[list[tuple[Workload, list[Config]]], int]:
    """(workload, configs not yet stored) for each workload with work left, and how many had
    none (resume). Duplicate workloads count once."""
    unique = list(dict.fromkeys(workloads))
    kernel_done: dict[str, set] = {}
    todo = []
    for w in unique:
        done = kernel_done.setdefault(w.kernel, store.measured_keys(w.kernel))
        configs = [c for c in workload_configs(w, max_configs=max_configs, seed=seed)
                   if (w.id, c.key) not in done]
        if configs:
            todo.append((w, configs))
    return todo, len(unique) - len(todo)


def spread_order(todo: list[tuple[Workload, list[Config]]]
                 ) -> list[tuple[Workload, list[Config]]]:
    """The order to hand workloads to several GPUs: biggest first within each (kernel, dtype),
    taking from the groups in turn. Workloads of one group share compiled kernels (same
    kernel, same specialization, overlapping configs); two GPUs measuring neighbours of one
    group at once would both compile the kernels neither has cached yet."""
    groups: dict[tuple[str, str], list] = {}
    for item in sorted(todo, key=lambda wc: -len(wc[1])):
        groups.setdefault((item[0].kernel, item[0].dtype), []).append(item)
    queues = list(groups.values())
    out = []
    while queues:
        out += [q.pop(0) for q in queues]
        queues = [q for q in queues if q]
    return out


def collect_workload(workload: Workload, configs: list[Config], *, reps: int = 10,
                     seed: int = 0, workers: int | None = None, extra: dict | None = None,
                     progress: Callable[[Measurement], None] | None = None) -> list[dict]:
    """Measure one workload on this process's GPU and return its rows (the unit of work)."""
    from costtune.measure.gpu import measure_workload

    ms = measure_workload(workload, configs, reps=reps, seed=seed, workers=workers,
                          extra=extra, progress=progress)
    return [m.as_row() for m in ms]


def _gpu_worker(gpu: int, tasks, results, kwargs: dict) -> None:
    """One process per GPU: measure workloads from ``tasks`` until a None arrives. Each result
    carries this GPU's identity and clocks for the part's metadata."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)  # before torch initialises CUDA
    from costtune.compile import error_text, shutdown_pool
    from costtune.env import sm_clock_mhz
    from costtune.measure.gpu import ContextLost

    identity: dict[str, Any] | None = None
    try:
        while (item := tasks.get()) is not None:
            idx, workload, configs = item
            try:
                start = sm_clock_mhz()
                rows = collect_workload(workload, configs, **kwargs)
                identity = identity or _gpu_identity()
                results.put((idx, rows, "", {**identity, "sm_clock_start_mhz": start,
                                             "sm_clock_end_mhz": sm_clock_mhz()}))
            except ContextLost as exc:  # this process can't use its GPU any more
                results.put((idx, None, f"GPU {gpu}: {error_text(exc)}", {}))
                break
            except Exception as exc:
                results.put((idx, None, f"GPU {gpu}: {error_text(exc)}", {}))
    finally:
        # An explicit, waited shutdown: a nested pool left to interpreter exit can hang it.
        shutdown_pool(wait=True)


_GPU_FIELDS = ("gpu", "gpu_uuid", "sm_count", "compute_capability", "driver")


def _gpu_identity() -> dict[str, Any]:
    """The GPU fields of ``environment()`` for this process's current device."""
    from costtune.env import environment

    env = environment()
    return {**{k: env.get(k) for k in _GPU_FIELDS},
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def _collect_multi(todo, gpus: list[int], kwargs: dict, store_rows, over_budget, summary) -> None:
    import multiprocessing as mp
    import queue as queue_mod

    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_gpu_worker, args=(g, tasks, results, kwargs), daemon=False)
             for g in gpus]
    for p in procs:
        p.start()
    order = {id(item): i for i, item in enumerate(todo)}
    pending = [(order[id(item)], item) for item in spread_order(todo)][::-1]
    running = 0
    for _ in gpus:  # one workload in flight per GPU; the rest wait here, so a budget can stop
        if pending:
            idx, (w, cs) = pending.pop()
            tasks.put((idx, w, cs))
            running += 1
    while running:
        try:
            idx, rows, err, gpu_meta = results.get(timeout=10)
        except queue_mod.Empty:
            if not any(p.is_alive() for p in procs):
                summary["errors"].append("every GPU worker died")
                break
            continue
        running -= 1
        w = todo[idx][0]
        if err:
            summary["errors"].append(f"{w.id}: {err}")
        else:
            store_rows(w, rows, gpu_meta)
        if pending and not over_budget():
            idx, (w, cs) = pending.pop()
            tasks.put((idx, w, cs))
            running += 1
        elif pending:
            summary["stopped_early"] = True
    for _ in procs:
        tasks.put(None)
    for p in procs:
        p.join(timeout=60)
        if p.is_alive():
            p.terminate()


def collect(workloads: list[Workload], store, *, suite: str = "", max_configs: int | None = None,
            seed: int = 0, reps: int = 10, gpus: list[int] | None = None,
            time_budget_s: float | None = None, meta: dict | None = None,
            progress: Callable[[Workload, Measurement | None, int], None] | None = None,
            on_stored: Callable[[Workload, list[dict]], None] | None = None) -> dict[str, Any]:
    """Measure every workload not yet stored (resume), appending one part per workload.

    ``gpus``: device indices; more than one runs a worker process per GPU. ``time_budget_s``:
    start no new workload after this many seconds (so a lease-bounded run ends cleanly).
    Returns a summary dict.
    """
    from costtune.env import environment, sm_clock_mhz

    t0 = time.perf_counter()
    todo, n_skipped = plan_workloads(workloads, store, max_configs=max_configs, seed=seed)
    summary = {"workloads": 0, "configs": 0, "ok": 0, "failed": 0, "skipped_workloads":
               n_skipped, "stopped_early": False, "seconds": 0.0, "errors": []}
    from costtune.measure.gpu import TIMING_METHOD

    if gpus and len(gpus) == 1:
        import torch

        torch.cuda.set_device(gpus[0])  # before reading the environment of "the" GPU
    env = {**environment(), "timing_method": TIMING_METHOD, **(meta or {})}

    def store_rows(w: Workload, rows: list[dict], gpu_meta: dict[str, Any]) -> None:
        # gpu_meta: the measuring GPU's identity (a worker of the multi-GPU path) and clocks.
        part_meta = {**env, **gpu_meta, "workload": w.id}
        store.append(rows, meta=part_meta)
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
    if not gpus or len(gpus) == 1:
        device = gpus[0] if gpus else None
        for w, configs in todo:
            if over_budget():
                summary["stopped_early"] = True
                break
            cb = (lambda m, w=w, n=len(configs): progress(w, m, n)) if progress else None
            if progress:
                progress(w, None, len(configs))
            clock = sm_clock_mhz(device)
            rows = collect_workload(w, configs, reps=reps, seed=seed, extra=extra, progress=cb)
            store_rows(w, rows, {"sm_clock_start_mhz": clock,
                                 "sm_clock_end_mhz": sm_clock_mhz(device)})
    else:
        cores = max(1, (os.cpu_count() or 1) // len(gpus))
        _collect_multi(todo, gpus, {"reps": reps, "seed": seed, "workers": cores,
                                    "extra": extra}, store_rows, over_budget, summary)
    summary["seconds"] = time.perf_counter() - t0
    return summary

