"""One cold tuning, timed by phase, in this (fresh) process; or one same-process re-timing of
a shape's chosen configs. Started by ``run`` as ``python -m experiments.cold_tune.child``.

Phases of the first call (seconds, wall clock):

- ``model_s``: the call waiting for the cost model (the background preload still running, or
  loading it) - ``rank_s``: the rest of pruning (launch reading, features, scores);
- ``compile_s``: the parallel precompile of the kept configs, plus every compile Triton makes
  inside its benchmark loop (its compilation listener's times: one at a time there);
- ``bench_s``: time inside ``do_bench`` less those compiles;
- ``launch_s``: the rest (Triton's autotuner bookkeeping, the tuned launch, the sync).

``import_s`` (torch + triton + costtune + the kernel module, before the call) and
``preload_s`` (the background model load, overlapping the program's own setup) are reported
beside them, not in the first call.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
import warnings
from typing import Any

_T0 = time.perf_counter()
if "--cpu" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
import torch  # noqa: E402
import triton  # noqa: E402

import costtune  # noqa: E402
from experiments.cold_tune.cases import CASES, parse_method  # noqa: E402

_T_IMPORT = time.perf_counter() - _T0


class Clock:
    """Phase timers installed around costtune's and Triton's calls (this process only)."""

    def __init__(self) -> None:
        self.model_main = 0.0  # model waits/loads on the tuning thread
        self.model_bg = 0.0  # loads in the preload thread
        self.in_bench = False
        self.bench_wall = 0.0
        self.compile_in_bench = 0.0
        self.compiles = 0
        self.compile_cpu = 0.0
        self.benched = 0
        self.forks: list[Any] = []  # costtune's forked-compile batches (build.forked)

    def install(self) -> None:
        import costtune.tune.pruner as pruner
        import costtune.tune.ranking as ranking

        load, wait = ranking.load_noted, pruner.wait_for_preload

        def timed_load(*a: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return load(*a, **kw)
            finally:
                self._model(time.perf_counter() - start)

        def timed_wait() -> None:
            start = time.perf_counter()
            wait()
            self._model(time.perf_counter() - start)

        ranking.load_noted, pruner.wait_for_preload = timed_load, timed_wait
        import costtune.model.registry as registry

        registry.load_noted = timed_load  # the preload thread imports it when it runs

        def listener(*, src: Any, metadata: Any, metadata_group: Any, times: Any,
                     cache_hit: bool) -> None:
            seconds = times.total / 1e6
            self.compiles += 1
            self.compile_cpu += seconds
            # Only a compile on the benchmarking thread holds the benchmark up; costtune's
            # precompile threads compile beside it (overlapped, already in compile_s).
            if self.in_bench and threading.current_thread() is threading.main_thread():
                self.compile_in_bench += seconds

        triton.knobs.compilation.listener = listener
        from costtune.build.forked import ForkCompiler

        start_batch = ForkCompiler.start

        def noted_start(pool: Any) -> None:
            if all(p is not pool for p in self.forks):  # shutdown starts it again: a no-op
                self.forks.append(pool)
            start_batch(pool)

        ForkCompiler.start = noted_start

    def _model(self, seconds: float) -> None:
        if threading.current_thread().name == "costtune-preload":
            self.model_bg += seconds
        else:
            self.model_main += seconds

    def bench(self, inner: Any) -> Any:
        def do_bench(fn: Any, quantiles: Any = None, **kw: Any) -> Any:
            self.benched += 1
            self.in_bench, start = True, time.perf_counter()
            try:
                return inner(fn, quantiles=quantiles, **kw)
            finally:
                self.bench_wall += time.perf_counter() - start
                self.in_bench = False

        return do_bench


def make_tuner(case: Any, method: str, clock: Clock, *, cpu: bool) -> Any:
    kind, k, cached, precompile = parse_method(method)
    style = case.style()
    configs = case.configs() if not cpu else style.configs("cpu")
    if cpu:
        def inner(fn: Any, quantiles: Any = None, **_: Any) -> Any:  # host clock
            start = time.perf_counter()
            fn()
            ms = (time.perf_counter() - start) * 1e3
            return [ms] * len(quantiles) if quantiles else ms
    elif kind == "costtune.autotune":
        inner = costtune.graph_bench  # its default timing
    else:
        inner = triton.runtime.driver.active.get_benchmarker()  # as users run it
    do_bench = clock.bench(inner)
    extra = {"cache_results": True} if cached else {}
    mode = {"precompile": precompile} if precompile else {}  # else costtune's default
    if kind == "costtune.autotune":
        return costtune.autotune(configs, key=list(style.key), top_k=k, do_bench=do_bench,
                                 **mode, **extra)(style.kernel), configs
    hook = ({"prune_configs_by": costtune.prune_configs_by(top_k=k, **mode)}
            if kind == "hook" else {})
    return triton.autotune(configs, key=list(style.key), do_bench=do_bench, **hook,
                           **extra)(style.kernel), configs


def run_one(case_name: str, shape: int, method: str, *, cpu: bool = False) -> dict[str, Any]:
    """Decorate (costtune starts loading its model), build inputs, time the first call."""
    from user_kernels import relative_error

    case = CASES[case_name]
    style = case.style()
    clock = Clock()
    clock.install()
    start = time.perf_counter()
    tuner, configs = make_tuner(case, method, clock, cpu=cpu)
    decorate_s = time.perf_counter() - start
    problem = style.cpu_problem if cpu else case.shapes[shape]
    device, dtype = ("cpu", style.cpu_dtype) if cpu else ("cuda", style.gpu_dtype)
    inputs = style.make_inputs(problem, device=device, dtype=dtype)
    ref = style.reference(inputs)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        out = style.launch(tuner, inputs)
        sync()
        first = time.perf_counter() - start
    err = relative_error(out, ref)
    prune = getattr(tuner, "early_config_prune", None)
    last = getattr(prune, "last", None)
    pruned_s = (last.elapsed_ms / 1e3) if last is not None else 0.0
    precompile_s = (last.precompile_ms / 1e3
                    if last is not None and last.precompile_ms == last.precompile_ms else 0.0)
    model_s = min(clock.model_main, pruned_s)
    phases = {"model_s": model_s, "rank_s": max(0.0, pruned_s - model_s),
              "compile_s": precompile_s + clock.compile_in_bench,
              "bench_s": max(0.0, clock.bench_wall - clock.compile_in_bench),
              "launch_s": max(0.0, first - pruned_s - precompile_s - clock.bench_wall)}
    return {
        "case": case_name, "shape": problem, "method": method, "first_call_s": first,
        **phases, "import_s": _T_IMPORT, "decorate_s": decorate_s,
        "preload_s": clock.model_bg, "compiles": clock.compiles,
        "compile_cpu_s": clock.compile_cpu, "n_configs": len(configs),
        "n_benchmarked": clock.benched, "kept": getattr(last, "k", None),
        "kept_from_cache": getattr(tuner, "kept_from_cache", None),
        "chosen": str(tuner.best_config), "rel_err": err, "correct": err <= style.tolerance,
        "family_read": getattr(last, "family", None),
        "notes": [list(n) for n in getattr(last, "notes", [])],
        "precompiled": list(last.precompiled) if last and last.precompiled else None,
        "warnings": [str(w.message)[:300] for w in caught
                     if issubclass(w.category, costtune.CosttuneWarning)],
        # What the tuner measured, per config (ms; exhaustive: the whole list): data on a
        # kernel no model was trained on.
        "timings": {str(c): _ms(t) for c, t in (getattr(tuner, "configs_timings", None)
                                               or {}).items()},
        # Forked compiles: children started, jobs they compiled, jobs compiled here instead,
        # and each job's seconds in its child.
        "forked": [{"children": p.forked, "in_child": p.compiled_in_child,
                    "here": p.ran_here, "child_s": p.child_seconds, "fork_s": p.fork_s}
                   for p in clock.forks],
    }


def _ms(timing: Any) -> float | None:
    value = timing[0] if isinstance(timing, (list, tuple)) else timing
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def retime(case_name: str, shape: int, chosen: list[str], *, rounds: int, reps: int
           ) -> dict[str, Any]:
    """Every chosen config (by ``str(config)``) timed side by side in this process beside the
    torch op: ``rounds`` shuffled passes of ``costtune.graph_bench`` (CUDA-graph replay, L2
    flushed), each config's median over the passes, in ms."""
    case = CASES[case_name]
    style = case.style()
    by_text = {str(c): c for c in case.configs()}
    inputs = style.make_inputs(case.shapes[shape], device="cuda", dtype=style.gpu_dtype)
    calls = {}
    for text in chosen:
        single = triton.autotune([by_text[text]], key=[])(style.kernel)
        calls[text] = (lambda s=single: style.launch(s, inputs))
        calls[text]()  # compile and load before any timing
    calls["torch"] = lambda: style.torch_op(inputs)
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {k: [] for k in calls}
    rng = random.Random(0)
    for _ in range(rounds):
        for key in rng.sample(list(calls), len(calls)):
            times[key].append(float(costtune.graph_bench(calls[key], reps=reps)))
    return {"ms": {k: statistics.median(v) for k, v in times.items()},
            "spread": {k: (max(v) - min(v)) / statistics.median(v) for k, v in times.items()},
            "rounds": rounds, "reps": reps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--shape", type=int, default=0)
    ap.add_argument("--method", default=None)
    ap.add_argument("--retime", default=None, help="JSON list of chosen configs")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cpu", action="store_true", help="tiny shape under TRITON_INTERPRET=1")
    args = ap.parse_args(argv)
    if args.retime is not None:
        out = retime(args.case, args.shape, json.loads(args.retime), rounds=args.rounds,
                     reps=args.reps)
    elif args.method:
        out = run_one(args.case, args.shape, args.method, cpu=args.cpu)
    else:
        ap.error("give --method or --retime")
    print("RESULT " + json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
