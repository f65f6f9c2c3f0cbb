"""GPU runner: compile in parallel, check every config against the reference, time GPU-only.

Compiles run in a process pool while this process times the configs already compiled, in the
order they were submitted; the GPU waits only for a config whose compile is not done yet.

Timing: each config's launch is captured ``reps`` times in one CUDA graph, each rep preceded by an
L2 flush (zeroing a buffer twice the L2 size) and bracketed by external events, so host launch
overhead is gone and every rep starts with a cold L2. The torch equivalent (cuBLAS, torch.softmax,
SDPA flash) is timed the same way in the same run: the model learns speed relative to the
workload's best, and the reference op anchors runs made on different days.
"""

from __future__ import annotations

import functools
import random
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from costtune.build.errors import CompileResult, classify_error, error_text
from costtune.build.workload import submit_compiles
from costtune.kernels import get_implementation, relative_error
from costtune.kernels.base import poisoned_scratch
from costtune.types import Config, Measurement, Status, Workload

TIMING_METHOD = "cuda-graph replay, L2 flushed before each rep, external events per rep"


class ContextLost(RuntimeError):
    """The CUDA context is unusable (e.g. an illegal address): this process can't measure on."""


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo, hi = int(pos), min(int(pos) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def make_flush_buffer(device: Any = None):
    import torch

    l2 = torch.cuda.get_device_properties(device).L2_cache_size or 64 * 2**20
    return torch.empty(max(2 * l2, 64 * 2**20), dtype=torch.int8, device=device)


def time_graph(fn: Callable[[], Any], *, reps: int, flush, stream: Any = None
               ) -> tuple[list[float], str]:
    """Per-rep GPU times (ms) of ``fn`` from one CUDA graph; falls back to eager launches with
    the same flush and events when ``fn`` can't be captured. Returns (times, method).
    ``stream``: where ``fn`` is warmed up before capture (default: a stream from torch's pool)."""
    import torch

    side = stream if stream is not None else torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # lazy init and allocator warm-up must happen outside capture
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(reps)]
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for s, e in zip(starts, ends):
                flush.zero_()
                s.record()
                fn()
                e.record()
        graph.replay()  # first replay uploads the graph and warms clocks
        graph.replay()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        del graph
        return times, "graph"
    except Exception:
        torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)], "eager"


def settle_memory(device: Any) -> Any:
    """Make a workload's GPU buffers land in the same places whatever this process ran before.

    The caching allocator hands a workload the blocks the previous workloads freed, so without
    this a buffer's address depends on what the process measured before (which a Dask
    worker's share of the queue decides). Runs that split the queue alike agree better than
    runs that don't, by ~1% of a config's time, and this does not remove that (measured:
    experiments/NOTES.md, sixth session): the buffers' placement is not what carries it.
    The first call sets up the libraries' persistent workspaces (cuBLAS on the default, the
    warm-up and the graph-capture streams) in a fixed order; every call then returns all
    cached blocks to the driver. Returns the warm-up stream for ``time_graph``."""
    import torch

    side = _primed_stream(torch.device(device).index)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return side


@functools.cache  # once per process and device
def _primed_stream(index: int) -> Any:
    import torch

    side = torch.cuda.Stream(device=index)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        a = torch.ones(64, 64, dtype=dtype, device=index)
        a @ a
        side.wait_stream(torch.cuda.current_stream(index))
        with torch.cuda.stream(side):
            a @ a
        torch.cuda.current_stream(index).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            a @ a
        del graph
    torch.cuda.synchronize(index)
    return side


def _context_alive() -> bool:
    import torch

    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
        return True
    except Exception:
        return False


def check_and_time(family, inputs, ref, config: Config, *, reps: int, flush, tol: float,
                   stream: Any = None) -> dict[str, Any]:
    """Run one config once against the reference, then time it if correct.

    Returns the Measurement fields as a dict; raises ContextLost when the launch broke CUDA.
    """
    import torch

    # Poison the allocator block the output will likely reuse, so an unwritten output can't
    # pass the check with a previous config's result.
    poison = torch.full(ref.shape, float("nan"), dtype=inputs[next(iter(inputs))].dtype,
                        device=ref.device)
    del poison
    t0 = time.perf_counter()
    try:
        with poisoned_scratch():  # an unwritten workspace reads NaN, not a previous config's
            out = family.launch(inputs, config)  # loads the kernel from Triton's cache
        torch.cuda.synchronize()
    except Exception as exc:
        if not _context_alive():
            raise ContextLost(error_text(exc)) from exc
        status = classify_error(exc)
        if status is Status.COMPILE_ERROR:
            status = Status.LAUNCH_ERROR
        return {"status": status, "error": error_text(exc)}
    load_s = time.perf_counter() - t0
    err = relative_error(out, ref)
    del out
    if not err <= tol:
        return {"status": Status.WRONG_RESULT, "rel_err": err, "extra": {"load_s": load_s},
                "error": f"relative error {err:.3g} > tolerance {tol:.3g}"}
    t1 = time.perf_counter()
    times, method = time_graph(lambda: family.launch(inputs, config), reps=reps, flush=flush,
                               stream=stream)
    return {"status": Status.OK, "rel_err": err, "time_ms": statistics.median(times),
            "time_p20_ms": _quantile(times, 0.2), "time_p80_ms": _quantile(times, 0.8),
            "extra": {"timing": method, "load_s": load_s,
                      "timing_s": time.perf_counter() - t1}}


def measure_workload(workload: Workload, configs: list[Config], *, reps: int = 10,
                     retime_fraction: float = 0.05, seed: int = 0, workers: int | None = None,
                     extra: dict[str, Any] | None = None,
                     progress: Callable[[Measurement], None] | None = None,
                     settle: bool = True) -> list[Measurement]:
    """Measure every config of one workload in one uninterrupted run on the current GPU.

    Compiles in parallel (timing each config once its compile is done, while the later ones
    still compile), checks each config's output, times the correct ones, re-times a
    random ``retime_fraction`` of them in a second pass (``retime_ms``), and times the torch
    equivalent (``ref_time_ms``). Failures come back as Measurements with a status.
    ``settle`` (default): start from ``settle_memory``, so the workload's buffers land in the
    same places whatever this process measured before; False keeps the allocator's cache.
    """
    import torch

    family = get_implementation(workload.implementation)
    t_setup = time.perf_counter()
    device = torch.device("cuda", torch.cuda.current_device())
    stream = settle_memory(device) if settle else None
    inputs = family.make_inputs(workload.sizes, workload.dtype, seed=seed, device=device)
    order = list(configs)
    random.Random(seed).shuffle(order)  # spread slow drift (clocks, heat) over the space
    # Compiles start now, in the order the configs are timed: the reference output, the
    # flush buffer and then each config's check and timing overlap the compiles still running.
    t_submit = time.perf_counter()
    pending = submit_compiles(workload, order, inputs, workers=workers)
    inline_compile = time.perf_counter() - t_submit if workers == 0 else 0.0  # no pool
    try:
        ref = family.reference(inputs)
        tol = family.TOLERANCE[workload.dtype]
        flush = make_flush_buffer(device)
        common = {"run_id": uuid.uuid4().hex[:12], "n_reps": reps,
                  "gpu": torch.cuda.get_device_name(device), **(extra or {})}
        t0 = time.perf_counter()
        setup_wall = t0 - t_setup - inline_compile  # inputs, reference output, flush buffer
        ref_times, _ = time_graph(lambda: family.torch_op(inputs), reps=reps, flush=flush,
                                  stream=stream)
        common["ref_time_ms"] = statistics.median(ref_times)

        waited = 0.0  # this process waiting for a config's compile (the GPU idle)
        results: dict[str, Measurement] = {}
        for config in order:
            t_wait = time.perf_counter()
            comp: CompileResult = pending.get(config)
            waited += time.perf_counter() - t_wait
            if comp.status is not Status.OK:
                m = Measurement(workload, config, comp.status, compile_s=comp.seconds,
                                error=comp.error, extra=dict(common))
            else:
                fields = check_and_time(family, inputs, ref, config, reps=reps, flush=flush,
                                        tol=tol, stream=stream)
                m = Measurement(workload, config, fields.pop("status"), compile_s=comp.seconds,
                                extra={**common, **fields.pop("extra", {})}, **fields)
            results[config.key] = m
            if progress is not None:
                progress(m)
    except BaseException:
        pending.cancel()  # the rest of this workload's compiles would hold the pool
        raise

    measure_wall = time.perf_counter() - t0 - waited
    ok = [k for k, m in results.items() if m.status is Status.OK]
    rng = random.Random(seed + 1)
    n_retime = round(retime_fraction * len(ok))
    if retime_fraction > 0:
        n_retime = max(1, n_retime)  # every workload gets at least one noise sample
    for key in rng.sample(ok, min(len(ok), n_retime)):
        times, _ = time_graph(lambda c=results[key].config: family.launch(inputs, c), reps=reps,
                              flush=flush, stream=stream)
        results[key].extra["retime_ms"] = statistics.median(times)
    wall = time.perf_counter() - t0
    for m in results.values():
        m.extra.setdefault("retime_ms", float("nan"))
        m.extra["workload_wall_s"] = wall  # after setup: waits, measure, second (re-time) pass
        m.extra["workload_setup_wall_s"] = setup_wall
        m.extra["workload_compile_wall_s"] = inline_compile + waited
        m.extra["workload_measure_wall_s"] = measure_wall
    torch.cuda.empty_cache()
    return [results[c.key] for c in configs]


class GpuRunner:
    """Runner interface over the GPU (same ``measure`` as ``ReplayRunner``)."""

    def __init__(self, *, reps: int = 10, workers: int | None = None, seed: int = 0) -> None:
        from costtune.env import require_gpu

        require_gpu("GpuRunner")
        self.reps = reps
        self.workers = workers
        self.seed = seed
        self.n_measured = 0

    def measure(self, workload: Workload, configs: list[Config]) -> list[Measurement]:
        self.n_measured += len(configs)
        return measure_workload(workload, configs, reps=self.reps, workers=self.workers,
                                seed=self.seed, retime_fraction=0.0)
