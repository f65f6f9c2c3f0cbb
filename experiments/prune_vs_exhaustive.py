"""Pruned vs exhaustive autotuning on the GPU: cold tuning time and the kernel each one picks.

For a few test-suite shapes of each family, every method tunes costtune's own kernel through
``triton.autotune`` in a fresh process with a fresh Triton cache (TRITON_CACHE_DIR and the
compiled-feature cache in new temp dirs), so each run pays every compile it causes:

- ``exhaustive``: plain ``triton.autotune`` over the family's whole space for the shape;
- ``tutorial`` (GEMM): the 8 fp16 configs of Triton's matmul tutorial;
- ``costtune``: ``costtune.autotune`` at k = 1, 4, 8 (and 16 when asked) over the whole space
  (static features), timing the kept configs as it does by default (``bench="graph"``: CUDA
  graph of launches after L2 flushes; exhaustive and tutorial keep Triton's ``do_bench``);
- ``costtune2``: the same with ``two_stage=True`` (needs a model with compiled features).

Per run: the cold wall time of the first tuned call (pruning, compiles, benchmarks, first run),
the process wall time, the configs benchmarked, the chosen config, its output error, and its
GPU-only time (CUDA-graph replay with L2 flushed, ``costtune.measure.gpu.time_graph``) beside
the torch op's in the same process. Runs are ordered by priority and skipped once the time
budget would be exceeded (``--dry-run`` prints the plan with its estimates; no GPU needed).

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 experiments/prune_vs_exhaustive.py --out-dir $OUT
    python experiments/prune_vs_exhaustive.py --dry-run

Writes prune_vs_exhaustive.{md,csv} to --out-dir (default experiments/results).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

import costtune

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("gemm", "softmax", "attention")
# Test-suite shapes with modest spaces (cold exhaustive tuning is the expensive part).
SHAPES = {
    # The third: the test suite's square nearest DESIGN.md's 4096^3 reference (300 configs).
    "gemm": [{"M": 16, "N": 6144, "K": 4096}, {"M": 512, "N": 4608, "K": 3584},
             {"M": 5120, "N": 5120, "K": 5120}],
    "softmax": [{"rows": 4096, "cols": 4096}, {"rows": 4, "cols": 32000}],
    "attention": [{"B": 1, "H": 32, "S": 512, "D": 128, "causal": 1},
                  {"B": 8, "H": 12, "S": 1024, "D": 64, "causal": 0}],
}
# Rough seconds for planning: DESIGN.md's cold autotune of 328 GEMM configs took 178 s (~0.4 s
# compile + ~0.13 s do_bench each); attention compiles took ~1-4 s per config in the dataset.
EST_START_S = 7.0  # process start to finish less the tuning (costtune runs took 7.5-11.5 s)
EST_PRUNE_S = 2.0  # first pruning call: imports xgboost (and scikit-learn), loads the model
EST_THREAD_SLOWDOWN = 1.5  # threaded compiles share the GIL for Triton's Python frontend
EST_RETIME_S = 15.0  # one shape's same-process re-timing (process start, inputs, timings)
EST_COMPILE_S = {"gemm": 0.45, "softmax": 0.3, "attention": 1.5}
LARGE_SPACE = 250  # configs: a space like DESIGN.md's 328-config GEMM reference
EST_BENCH_S = 0.13  # Triton's do_bench per config
EST_GRAPH_BENCH_S = 0.02  # costtune's graph_bench per config
# Priority, for every family before the next method: the exhaustive reference, costtune's
# default k=8 (static, then two-stage), then the variants.
METHODS = [("exhaustive", None), ("costtune", 8), ("costtune2", 8), ("costtune", 1),
           ("tutorial", None), ("costtune", 4), ("costtune2", 1), ("costtune2", 4),
           ("costtune", 16)]


@dataclass
class Run:
    family: str
    problem: dict[str, int]
    method: str
    k: int | None
    n_space: int
    est_s: float
    dtype: str = "float16"

    @property
    def label(self) -> str:
        return self.method if self.k is None else f"{self.method} k={self.k}"


def plan(families: list[str], shapes_per_family: int, *, ks: list[int], methods: list[str],
         two_stage_ok: bool, cores: int) -> tuple[list[Run], list[tuple[Run, str]]]:
    """Runs in priority order, and runs left out with the reason."""
    runs, dropped = [], []
    for i in range(shapes_per_family):
        for method, k in METHODS:
            for fam in families:
                if i >= len(SHAPES[fam]) or method not in methods or (
                        k is not None and k not in ks):
                    continue
                if method == "tutorial" and fam != "gemm":
                    continue
                problem = SHAPES[fam][i]
                n = len(costtune.get_family(fam).config_space(problem))
                run = Run(fam, problem, method, k, n, 0.0)
                run.est_s = estimate(run, cores)
                if method == "costtune2" and not two_stage_ok:
                    dropped.append((run, "stage-2 model has no compiled features"))
                    continue
                runs.append(run)
    return runs, dropped


def estimate(run: Run, cores: int) -> float:
    compile_s = EST_COMPILE_S[run.family]
    if run.method in ("exhaustive", "tutorial"):
        n = run.n_space if run.method == "exhaustive" else 8
        return EST_START_S + n * (compile_s + EST_BENCH_S)
    # Survivors compile in threads (costtune.tune.precompile), stage 2's shortlist too.
    k = min(run.k, run.n_space)
    est = EST_START_S + EST_PRUNE_S + k * EST_GRAPH_BENCH_S
    est += math.ceil(k / cores) * compile_s * EST_THREAD_SLOWDOWN
    if run.method == "costtune2":
        est += math.ceil(min(32, run.n_space) / cores) * compile_s * EST_THREAD_SLOWDOWN
    return est


def select(runs: list[Run], budget_s: float) -> tuple[list[Run], list[tuple[Run, str]]]:
    chosen, dropped, total = [], [], 0.0
    for run in runs:
        if total + run.est_s <= budget_s:
            chosen.append(run)
            total += run.est_s
        else:
            dropped.append((run, "over the time budget"))
    return chosen, dropped


# ------------------------------------------------------------------------ one run (child)
def _softmax_kernels() -> tuple[Any, Any]:
    """The family's two softmax kernels, through its public kernel_calls."""
    sm = costtune.get_family("softmax")
    x = {"x": torch.empty(1, 128, dtype=torch.float16)}
    cfg = {"ROWS_PER_PROG": 1, "num_warps": 4, "num_stages": 1}
    return (sm.kernel_calls(x, {"BLOCK_N": 128, **cfg})[0].fn,
            sm.kernel_calls(x, {"BLOCK_N": 64, **cfg})[0].fn)


_ONE_PASS, _ONLINE = _softmax_kernels()


# The softmax config picks one of two kernels; one autotuner needs one kernel, so this one
# inlines whichever the config selects (the chosen config is then timed through the family's
# own launch, as the dataset was).
@triton.heuristics({"ONE_PASS": lambda a: a["BLOCK_N"] >= a["cols"],
                    "NUM_STAGES": lambda a: a["num_stages"]})
@triton.jit
def _softmax_any(x_ptr, out_ptr, rows, cols, stride_xr, stride_xc, stride_or, stride_oc,
                 BLOCK_N: tl.constexpr, ROWS_PER_PROG: tl.constexpr, NUM_STAGES: tl.constexpr,
                 ONE_PASS: tl.constexpr):
    if ONE_PASS:
        _ONE_PASS(x_ptr, out_ptr, rows, cols, stride_xr, stride_xc, stride_or, stride_oc,
                  BLOCK_N, ROWS_PER_PROG)
    else:
        _ONLINE(x_ptr, out_ptr, rows, cols, stride_xr, stride_xc, stride_or, stride_oc,
                BLOCK_N, ROWS_PER_PROG, NUM_STAGES)


def method_configs(fam: Any, run: Run) -> list[Any]:
    if run.method == "tutorial":
        from costtune.model.baselines import TUTORIAL_FP16

        return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": 1},
                              num_warps=w, num_stages=s) for bm, bn, bk, _g, w, s in TUTORIAL_FP16]
    return fam.config_space(run.problem).to_triton()


def _buffer_config(configs: list) -> Any:
    # GEMM split-K configs add into an fp32 workspace: tune every config into one (zeroed).
    split = [c for c in configs if c.kwargs.get("SPLIT_K", 1) > 1]
    return split[0] if split else configs[0]


def kernel_fn(fam: Any, run: Run, configs: list) -> Any:
    """The kernel to tune, known before any input exists (a program imports its kernel modules,
    and so runs their autotune decorators, before it builds data): the family's main kernel,
    taken from a small CPU instance of the problem."""
    if fam.NAME == "softmax":
        return _softmax_any
    small = {k: v if k == "causal" else min(int(v), 64) for k, v in run.problem.items()}
    buffers = _buffer_config(configs)
    return fam.kernel_calls(fam.make_inputs(small, run.dtype), {
        **buffers.kwargs, "num_warps": buffers.num_warps,
        "num_stages": buffers.num_stages})[0].fn


def make_tuner(fn: Any, *, configs: list, run: Run, do_bench: Any,
               options: dict[str, Any]) -> Any:
    """The method's autotuner over ``configs`` (decorating: costtune starts loading its model)."""
    split = _buffer_config(configs).kwargs.get("SPLIT_K", 1) > 1
    reset = [fn.arg_names[2]] if split else None
    if run.method.startswith("costtune"):
        return costtune.autotune(configs, [], top_k=run.k, family=run.family,
                                 two_stage=run.method == "costtune2", do_bench=do_bench,
                                 reset_to_zero=reset, **options)(fn)
    return triton.autotune(configs, [], do_bench=do_bench, reset_to_zero=reset)(fn)


def tuned_launch(fam: Any, inputs: dict, tuner: Any, *, configs: list, run: Run) -> Any:
    """launch(): ``tuner`` called on ``inputs`` as the family's own launch would."""
    names = fam.config_space().names
    tuned = {k for c in configs for k in c.kwargs}
    buffers = _buffer_config(configs)
    call = fam.kernel_calls(inputs, {**buffers.kwargs, "num_warps": buffers.num_warps,
                                     "num_stages": buffers.num_stages})[0]
    fixed = {k: v for k, v in call.kwargs.items() if k not in tuned and k != "NUM_STAGES"}

    def grid(meta: dict) -> tuple[int, ...]:
        cfg = {"num_warps": 4, "num_stages": 1, **{p: meta[p] for p in names if p in meta}}
        return tuple(fam.grid(run.problem, cfg))

    return lambda: tuner[grid](*call.args, **fixed)


def run_one(run: Run, *, model: str, stage2_model: str | None, reps: int) -> dict[str, Any]:
    """Tune once, cold, in this process; check and time what was chosen (GPU only)."""
    from triton.runtime import driver

    from costtune.env import environment
    from costtune.kernels import relative_error
    from costtune.measure.bench import graph_bench
    from costtune.measure.gpu import make_flush_buffer, time_graph
    from costtune.types import Config

    fam = costtune.get_family(run.family)
    configs = method_configs(fam, run)
    benched = []

    # costtune times its survivors its own way (the default bench="graph"); plain
    # triton.autotune with Triton's do_bench, as users run it today. Both counted.
    bench = graph_bench if run.method.startswith("costtune") else None

    def do_bench(fn, quantiles):
        benched.append(1)
        return (bench or driver.active.get_benchmarker())(fn, quantiles=quantiles)

    # As a program does: kernels decorated first (costtune starts loading its model then),
    # inputs built after, then the first call tunes.
    options = {"model": model, **({"stage2_model": stage2_model} if stage2_model else {})}
    tuner = make_tuner(kernel_fn(fam, run, configs), configs=configs, run=run,
                       do_bench=do_bench, options=options)
    inputs = fam.make_inputs(run.problem, run.dtype, device="cuda")
    ref = fam.reference(inputs)
    launch = tuned_launch(fam, inputs, tuner, configs=configs, run=run)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        launch()
        torch.cuda.synchronize()
        tune_s = time.perf_counter() - start
    names = fam.config_space().names
    chosen = Config.from_dict({k: v for k, v in tuner.best_config.all_kwargs().items()
                               if k in names})
    err = relative_error(fam.launch(inputs, chosen), ref)
    flush = make_flush_buffer()
    kernel, timing = time_graph(lambda: fam.launch(inputs, chosen), reps=reps, flush=flush)
    torch_times, _ = time_graph(lambda: fam.torch_op(inputs), reps=reps, flush=flush)
    last = getattr(getattr(tuner, "early_config_prune", None), "last", None)
    return {
        "tune_s": tune_s, "n_benchmarked": len(benched), "n_configs": len(configs),
        "bench": "graph" if bench else "triton",
        "chosen": chosen.key, "rel_err": err, "correct": err <= fam.TOLERANCE[run.dtype],
        "kernel_ms": float(np.median(kernel)), "kernel_p20_ms": float(np.percentile(kernel, 20)),
        "kernel_p80_ms": float(np.percentile(kernel, 80)), "timing": timing,
        "torch_ms": float(np.median(torch_times)),
        "prune_ms": getattr(last, "elapsed_ms", None),
        "precompiled": list(last.precompiled) if last and last.precompiled else None,
        "precompile_ms": getattr(last, "precompile_ms", None),
        "stage2": getattr(last, "stage2", None),
        "warnings": [str(w.message) for w in caught
                     if issubclass(w.category, costtune.CosttuneWarning)],
        "env": environment(),
    }


def retime_one(spec: dict[str, Any], *, reps: int, rounds: int) -> dict[str, Any]:
    """Time every config of ``spec["configs"]`` (the configs the methods chose for one shape)
    in this one process, interleaved: ``rounds`` passes in shuffled order, each config's
    median over its passes. Runs minutes apart drift by a few percent (clocks, heat); side by
    side they do not."""
    import random

    from costtune.env import environment
    from costtune.features.static import parse_config_key
    from costtune.measure.gpu import make_flush_buffer, time_graph

    fam = costtune.get_family(spec["family"])
    inputs = fam.make_inputs(spec["problem"], spec["dtype"], device="cuda")
    configs = [parse_config_key(k) for k in spec["configs"]]
    for c in configs:  # compile and load every one before any timing
        fam.launch(inputs, c)
    torch.cuda.synchronize()
    flush = make_flush_buffer()
    times: dict[str, list[float]] = {c.key: [] for c in configs}
    torch_times = []
    rng = random.Random(0)
    for _ in range(rounds):
        for c in rng.sample(configs, len(configs)):
            t, _ = time_graph(lambda c=c: fam.launch(inputs, c), reps=reps, flush=flush)
            times[c.key].append(float(np.median(t)))
        t, _ = time_graph(lambda: fam.torch_op(inputs), reps=reps, flush=flush)
        torch_times.append(float(np.median(t)))
    return {"kernel_ms": {k: float(np.median(v)) for k, v in times.items()},
            "spread": {k: float((max(v) - min(v)) / np.median(v)) for k, v in times.items()},
            "torch_ms": float(np.median(torch_times)), "rounds": rounds, "reps": reps,
            "env": environment()}


def child_env(**extra: str) -> dict[str, str]:
    """Environment of a child run: this checkout importable, compiling for the GPU (never the
    interpreter), plus ``extra``."""
    env = {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TRITON_INTERPRET", None)
    return env


def retime_specs(results: list[tuple[Run, dict]]) -> list[dict[str, Any]]:
    """One spec per shape that has an exhaustive run: every distinct config chosen there."""
    by_shape: dict[tuple, dict[str, Any]] = {}
    for run, res in results:
        if res.get("status") != "ok":
            continue
        spec = by_shape.setdefault(run_id(run)[:2] + (run.dtype,), {
            "family": run.family, "problem": run.problem, "dtype": run.dtype,
            "configs": set(), "exhaustive": False})
        spec["configs"].add(res["chosen"])
        spec["exhaustive"] |= run.method == "exhaustive"
    return [{**spec, "configs": sorted(spec["configs"])} for spec in by_shape.values()
            if spec["exhaustive"] and len(spec["configs"]) > 1]


def retime_key(spec: dict[str, Any]) -> str:
    return json.dumps([spec["family"], spec["problem"], spec["dtype"], spec["configs"]],
                      sort_keys=True)


def run_retimes(results: list[tuple[Run, dict]], args: argparse.Namespace, *,
                deadline: float) -> None:
    """Re-time each shape's chosen configs side by side (one process per shape), appending to
    prune_vs_exhaustive_retime.jsonl; shapes whose chosen set was already re-timed are kept."""
    path = args.out_dir / "prune_vs_exhaustive_retime.jsonl"
    done = {retime_key(rec["spec"]) for rec in load_retimes(path)}
    for spec in retime_specs(results):
        if retime_key(spec) in done:
            continue
        if time.perf_counter() + EST_RETIME_S > deadline:
            print(f"retime {spec['family']} {spec['problem']}: skipped, deadline")
            continue
        env = child_env()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--retime-one", json.dumps(spec),
               "--reps", str(args.reps), "--rounds", str(args.rounds)]
        try:
            res = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                 timeout=max(30.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            print(f"retime {spec['family']} {spec['problem']}: timeout")
            continue
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
        if res.returncode != 0 or not lines:
            print(f"retime {spec['family']} {spec['problem']}: failed "
                  f"{(res.stderr or res.stdout)[-400:]}")
            continue
        out = json.loads(lines[-1][len("RESULT "):])
        with path.open("a") as f:
            f.write(json.dumps({"spec": spec, "result": out}, default=str) + "\n")
        print(f"retime {spec['family']} {spec['problem']}: " + ", ".join(
            f"{k} {v * 1e3:.2f} us" for k, v in out["kernel_ms"].items()), flush=True)


def load_retimes(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------- driver (parent)
def run_in_subprocess(run: Run, args: argparse.Namespace, *, timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ct-prune-") as tmp:
        env = child_env(TRITON_CACHE_DIR=f"{tmp}/triton", COSTTUNE_CACHE=f"{tmp}/features")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--run-one",
               json.dumps(asdict(run)), "--model", args.model, "--reps", str(args.reps)]
        if args.stage2_model:
            cmd += ["--stage2-model", args.stage2_model]
        start = time.perf_counter()
        try:
            res = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                 timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "process_s": time.perf_counter() - start}
        out = {"process_s": time.perf_counter() - start}
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
        if res.returncode != 0 or not lines:
            return {**out, "status": "failed", "error": (res.stderr or res.stdout)[-800:]}
        return {**out, "status": "ok", **json.loads(lines[-1][len("RESULT "):])}


def check_models(args: argparse.Namespace) -> tuple[str | None, bool, str]:
    """(why the model cannot load or None, stage-2 model has compiled features, note). The
    costtune runs would only measure the hook's keep-everything fallback without a model
    (the device image, for one, lacks xgboost unless a wheel is carried)."""
    from costtune.model import CostModel

    try:
        CostModel.load(args.model)
    except Exception as exc:
        return f"cannot load model {args.model!r}: {type(exc).__name__}: {exc}", False, ""
    try:
        stage2 = CostModel.load(stage2_name(args))
    except Exception as exc:
        return None, False, f"stage-2 model: {type(exc).__name__}: {exc}"
    return None, stage2.features != "static", f"stage-2 feature set {stage2.features!r}"


def stage2_name(args: argparse.Namespace) -> str:
    """--stage2-model, else the hook's default for --model."""
    from costtune.tune.ranking import default_stage2

    return args.stage2_model or default_stage2(args.model)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    ap.add_argument("--budget-s", type=float, default=450.0, help="planned GPU seconds")
    ap.add_argument("--deadline-s", type=float, default=560.0,
                    help="no run may end later than this (the report is written after)")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--shapes-per-family", type=int, default=2)
    ap.add_argument("--ks", default="1,4,8")
    ap.add_argument("--methods", default="exhaustive,costtune,costtune2,tutorial")
    ap.add_argument("--model", default="h200")
    ap.add_argument("--stage2-model", default=None,
                    help="default: <model>_compiled for a shipped name, else --model")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the report from <out-dir>/prune_vs_exhaustive.jsonl (no GPU)")
    ap.add_argument("--before", type=Path, default=None,
                    help="a log of the same runs under earlier code, compared in the report")
    ap.add_argument("--resume", action="store_true",
                    help="keep the runs already in <out-dir>/prune_vs_exhaustive.jsonl")
    ap.add_argument("--reps", type=int, default=20, help="graph replays for final timings")
    ap.add_argument("--rounds", type=int, default=5,
                    help="interleaved passes of the same-process re-timing")
    ap.add_argument("--no-retime", action="store_true",
                    help="skip re-timing each shape's chosen configs side by side")
    ap.add_argument("--retime-only", action="store_true",
                    help="only re-time the chosen configs of the runs in the log (GPU)")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "experiments" / "results")
    ap.add_argument("--run-one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--retime-one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.retime_one:
        print("RESULT " + json.dumps(retime_one(json.loads(args.retime_one), reps=args.reps,
                                                rounds=args.rounds), default=str), flush=True)
        return 0
    if args.retime_only:
        if not torch.cuda.is_available():
            ap.error("--retime-only needs a CUDA GPU")
        done = [(r, res) for r, res in load_log(args.out_dir / "prune_vs_exhaustive.jsonl")
                if res.get("status") == "ok"]
        run_retimes(done, args, deadline=time.perf_counter() + args.deadline_s)
        write_report(done, [], args=args, wall_s=math.nan)
        return 0

    if args.run_one:
        run = Run(**json.loads(args.run_one))
        print("RESULT " + json.dumps(run_one(run, model=args.model,
                                                stage2_model=args.stage2_model,
                                                reps=args.reps), default=str), flush=True)
        return 0
    if args.report_only:
        done = load_log(args.out_dir / "prune_vs_exhaustive.jsonl")
        if not done:
            ap.error(f"no runs in {args.out_dir / 'prune_vs_exhaustive.jsonl'}")
        write_report([(r, res) for r, res in done if res.get("status") == "ok"], [],
                     args=args, wall_s=math.nan)
        return 0
    families = [f for f in args.families.split(",") if f]
    methods = [m for m in args.methods.split(",") if m]
    bad = sorted(set(families) - set(FAMILIES)) + sorted(
        set(methods) - {m for m, _ in METHODS})
    if bad:
        ap.error(f"unknown families/methods {bad}")
    ks = [int(k) for k in args.ks.split(",") if k]
    broken, two_ok, why = check_models(args)
    if broken and any(m.startswith("costtune") for m in methods):
        if not args.dry_run:
            ap.error(broken)
        print(f"WARNING: {broken}")
    cores = os.cpu_count() or 1
    runs, dropped = plan(families, args.shapes_per_family, ks=ks, methods=methods,
                         two_stage_ok=two_ok, cores=cores)
    log = args.out_dir / "prune_vs_exhaustive.jsonl"
    done = load_log(log) if args.resume else []
    done_ids = {run_id(r) for r, res in done if res.get("status") == "ok"}
    runs = [r for r in runs if run_id(r) not in done_ids]
    if done:
        print(f"resuming: {len(done_ids)} runs already in {log}")
    chosen, over = select(runs, args.budget_s)
    dropped += over
    print(f"plan: {len(chosen)} runs, ~{sum(r.est_s for r in chosen):.0f} s estimated of "
          f"{args.budget_s:.0f} s budget; {why}")
    for run in chosen:
        print(f"  {run.family:9s} {run.problem} {run.label:14s} space {run.n_space:4d} "
              f"~{run.est_s:5.0f} s")
    for run, reason in dropped:
        print(f"  skip {run.family} {run.problem} {run.label}: {reason}")
    if args.dry_run:
        return 0
    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU (use --dry-run to see the plan)")

    results = [(r, res) for r, res in done if res.get("status") == "ok"]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if not args.resume:
        log.unlink(missing_ok=True)
    start = time.perf_counter()
    for run in chosen:
        left = args.deadline_s - (time.perf_counter() - start)
        if run.est_s > left:
            dropped.append((run, "deadline reached before it started"))
            continue
        timeout = min(max(90.0, 4 * run.est_s), left)
        res = run_in_subprocess(run, args, timeout_s=timeout)
        results.append((run, res))
        print(f"{run.family} {run.problem} {run.label}: {res['status']}, tune "
              f"{res.get('tune_s', math.nan):.1f} s (est {run.est_s:.0f}), "
              f"{res.get('n_benchmarked')} benchmarked, kernel {res.get('kernel_ms')} ms "
              f"{res.get('error', '')}", flush=True)
        with log.open("a") as f:  # a call cut short keeps every finished run
            f.write(json.dumps({"run": asdict(run), "result": res}, default=str) + "\n")
        write_report(results, dropped, args=args, wall_s=time.perf_counter() - start)
    if not args.no_retime:
        run_retimes(results, args, deadline=start + args.deadline_s)
    write_report(results, dropped, args=args, wall_s=time.perf_counter() - start)
    return 0


def before_after(before: list[tuple[Run, dict]], after: list[tuple[Run, dict]],
                 path: Path) -> list[str]:
    """The same runs measured under earlier code (e.g. before a change to the hook)."""
    now = {run_id(r): res for r, res in after}
    rows = []
    for run, old in before:
        new = now.get(run_id(run))
        if old.get("status") != "ok":
            continue
        if new is None:  # not re-measured after the change
            rows.append(f"| {run.family} {run.problem} | {run.label} | "
                        f"{(old.get('env') or {}).get('costtune_commit')} | "
                        f"{old['tune_s']:.1f} | {old.get('precompiled')} | not re-measured | "
                        f"| | {old['kernel_ms'] * 1e3:.1f} / |")
            continue
        rows.append(f"| {run.family} {run.problem} | {run.label} | "
                    f"{(old.get('env') or {}).get('costtune_commit')} | {old['tune_s']:.1f} | "
                    f"{old.get('precompiled')} | {(new.get('env') or {}).get('costtune_commit')} "
                    f"| {new['tune_s']:.1f} | {new.get('precompiled')} | "
                    f"{old['kernel_ms'] * 1e3:.1f} / {new['kernel_ms'] * 1e3:.1f} |")
    if not rows:
        return []
    return [f"## Same runs under earlier code (`{path.name}`)", "",
            f"Before: the runs in `{path.name}` (their commits are named per row); after: the "
            "runs of this report.",
            "", "| shape | run | commit before | tune_s before | precompiled before | "
            "commit after | tune_s after | precompiled after | kernel µs before / after |",
            "|---|---|---|---|---|---|---|---|---|", *rows]


def run_id(run: Run) -> tuple:
    return (run.family, json.dumps(run.problem, sort_keys=True), run.method, run.k, run.dtype)


def load_log(path: Path) -> list[tuple[Run, dict[str, Any]]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            out.append((Run(**rec["run"]), rec["result"]))
    return out


# ------------------------------------------------------------------------------ report
def result_table(results: list[tuple[Run, dict]], retimes: list[dict] | None = None) -> Any:
    """One row per run; with ``retimes`` (prune_vs_exhaustive_retime.jsonl), each chosen
    config's same-process time and the speed ratio taken from those side-by-side timings."""
    import pandas as pd

    from costtune.types import Workload

    rows = []
    for run, res in results:
        rows.append({"family": run.family, "workload": Workload(run.family, run.problem,
                                                                run.dtype).id,
                     "method": run.method, "k": run.k, "n_space": run.n_space,
                     "est_s": round(run.est_s, 1),
                     "commit": (res.get("env") or {}).get("costtune_commit"),
                     **{k: v for k, v in res.items() if k != "env"}})
    df = pd.DataFrame(rows)
    for col in ("tune_s", "kernel_ms", "torch_ms", "n_benchmarked", "process_s", "bench"):
        if col not in df:
            df[col] = math.nan
    # Runs logged before the bench was recorded all timed with Triton's do_bench.
    df["bench"] = df["bench"].fillna("triton")
    exh = df[(df["method"] == "exhaustive") & (df["status"] == "ok")].set_index("workload")
    df["speed_vs_exhaustive"] = df["workload"].map(exh["kernel_ms"]) / df["kernel_ms"]
    df["tune_speedup_vs_exhaustive"] = df["workload"].map(exh["tune_s"]) / df["tune_s"]
    df["speed_vs_torch"] = df["torch_ms"] / df["kernel_ms"]
    same: dict[tuple[str, str], float] = {}
    for rec in retimes or []:  # later records of a shape win
        spec = rec["spec"]
        wid = Workload(spec["family"], spec["problem"], spec["dtype"]).id
        same.update({(wid, key): ms for key, ms in rec["result"]["kernel_ms"].items()})
    pairs = list(zip(df["workload"], df["chosen"]))
    df["retimed_ms"] = [same.get(p, math.nan) for p in pairs]
    exh_same = {w: same.get((w, c), math.nan) for w, c in exh["chosen"].items()}
    df["speed_same_process"] = df["workload"].map(exh_same) / df["retimed_ms"]
    # The very config exhaustive chose is exactly as fast (nothing to re-time side by side).
    df.loc[df["chosen"] == df["workload"].map(exh["chosen"]), "speed_same_process"] = 1.0
    best = dataset_best(df["workload"].unique())
    # Across runs only ratios hold (DESIGN.md): compare kernel/torch with the dataset's.
    df["speed_vs_dataset_best"] = df["workload"].map(best) / (df["kernel_ms"] / df["torch_ms"])
    return df


def dataset_best(workloads: Any) -> dict[str, float]:
    """Per workload: best OK time / torch time in datasets/h200 (same kernel, same timing)."""
    best = _dataset_best_all()
    return {w: best[w] for w in workloads if w in best}


@functools.cache  # the report is rewritten after every run: read the dataset once
def _dataset_best_all() -> dict[str, float]:
    out = {}
    for fam in FAMILIES:
        try:
            df = costtune.load_dataset(ROOT / "datasets" / "h200", kernel=fam)
        except FileNotFoundError:
            continue
        for w, g in df[df["status"] == "ok"].groupby("workload"):
            i = g["time_ms"].idxmin()
            out[w] = float(g.loc[i, "time_ms"] / g.loc[i, "ref_time_ms"])
    return out


def goal_lines(ok: Any) -> list[str]:
    """Per pruned method and k, over the shapes that also have an exhaustive run. Kernel speed
    is the same-process re-timing where there is one (else the runs' own timings)."""
    out = []
    ok = ok.assign(speed=ok["speed_same_process"].fillna(ok["speed_vs_exhaustive"]))
    ok = ok.assign(hit=(ok["tune_speedup_vs_exhaustive"] >= 35) & (ok["speed"] >= 0.99))
    paired = ok[ok["speed"].notna() & (ok["method"] != "exhaustive")]
    for (method, k), g in paired.groupby(["method", "k"], dropna=False):
        label = method if k != k else f"{method} k={int(k)}"
        met = g["hit"].all()
        up = g["tune_speedup_vs_exhaustive"]
        n_same = int(g["speed_same_process"].notna().sum())
        out.append(f"- {label} ({len(g)} shapes, {n_same} re-timed side by side): tune time "
                   f"{up.min():.1f}-{up.max():.1f}x less, kernel speed "
                   f"{g['speed'].min():.3f}-{g['speed'].max():.3f} of exhaustive: "
                   f"**{'met' if met else 'NOT met'}**")
        for _, r in g.iterrows():
            out.append(f"  - {r['workload']}: {r['tune_speedup_vs_exhaustive']:.1f}x, "
                       f"speed {r['speed']:.3f}{' (met)' if r['hit'] else ''}")
    large = paired[paired["n_space"] >= LARGE_SPACE]
    if len(large):
        out += ["", f"On large spaces only (>= {LARGE_SPACE} configs, the kind of DESIGN.md's "
                "reference: 178 s for one 4096^3 GEMM over 328 configs):", ""]
        for (method, k), g in large.groupby(["method", "k"], dropna=False):
            label = method if k != k else f"{method} k={int(k)}"
            out.append(f"- {label}: met on {int(g['hit'].sum())}/{len(g)} shapes "
                       f"({', '.join(g['workload'])}) -> "
                       f"**{'met' if g['hit'].all() else 'NOT met'}**")
    small = ok[(ok["n_space"] < LARGE_SPACE) & (ok["method"] == "exhaustive")]
    pruned = paired[(paired["n_space"] < LARGE_SPACE)
                    & paired["method"].str.startswith("costtune")]
    if len(small) and len(pruned):
        out += ["", f"On smaller spaces ({int(small['n_space'].min())}-"
                f"{int(small['n_space'].max())} configs) exhaustive tuning took "
                f"{small['tune_s'].min():.0f}-{small['tune_s'].max():.0f} s: 35x less would "
                f"need a cold tune of {small['tune_s'].min() / 35:.1f}-"
                f"{small['tune_s'].max() / 35:.1f} s, while costtune's fastest run on them took "
                f"{pruned['tune_s'].min():.1f} s (the model's load and at least one "
                "compile)."]
    return out


def geomean(values: Any) -> float:
    v = np.asarray([x for x in values if x == x and x > 0], dtype=float)
    return float(np.exp(np.log(v).mean())) if len(v) else math.nan


def write_report(results: list[tuple[Run, dict]], dropped: list[tuple[Run, str]], *,
                 args: argparse.Namespace, wall_s: float) -> None:
    from costtune.env import environment

    args.out_dir.mkdir(parents=True, exist_ok=True)
    retimes = load_retimes(args.out_dir / "prune_vs_exhaustive_retime.jsonl")
    df = result_table(results, retimes)
    df.to_csv(args.out_dir / "prune_vs_exhaustive.csv", index=False)
    env = next((res["env"] for _, res in results if "env" in res), environment())
    ok = df[df["status"] == "ok"]
    summary = ok.groupby(["method", "k"], dropna=False).agg(
        runs=("workload", "size"), benchmarked=("n_benchmarked", "median"),
        median_tune_s=("tune_s", "median"),
        speed_vs_exhaustive=("speed_vs_exhaustive", geomean),
        speed_same_process=("speed_same_process", geomean),
        tune_speedup=("tune_speedup_vs_exhaustive", geomean),
        speed_vs_dataset_best=("speed_vs_dataset_best", geomean),
        all_correct=("correct", "all")).reset_index()
    cols = ["workload", "method", "k", "n_space", "n_benchmarked", "bench", "tune_s",
            "process_s", "prune_ms", "precompile_ms", "precompiled", "commit", "chosen",
            "kernel_ms", "speed_vs_exhaustive", "retimed_ms", "speed_same_process",
            "speed_vs_torch", "speed_vs_dataset_best", "correct", "status"]
    lines = [
        "# Pruned vs exhaustive autotuning (GPU)", "",
        "Each run tunes costtune's own kernel in a fresh process with a fresh Triton cache and "
        "a fresh compiled-feature cache. `tune_s`: cold wall time of the first tuned call "
        "(pruning, compiles, benchmarks, first launch); `process_s`: the whole process. "
        "Kernel times: GPU-only, CUDA-graph replay with L2 flushed before each of "
        f"{args.reps} reps, median, the torch op timed beside it in the same process. "
        "`speed_vs_exhaustive`: exhaustive's kernel time / this one (same shape, runs minutes "
        "apart); `retimed_ms` / `speed_same_process`: the chosen configs of a shape timed side "
        f"by side in one process ({args.rounds} interleaved passes, median; "
        "prune_vs_exhaustive_retime.jsonl), which the goal uses where present; "
        "`speed_vs_dataset_best`: (dataset best / its torch) / (this / its torch), "
        "against datasets/h200. GEMM tunes into one fp32 split-K workspace (zeroed before "
        "each benchmark); the chosen config is then timed through the family's own launch.",
        "", "## Summary (geomeans over shapes)", "",
        summary.to_markdown(index=False, floatfmt=".3g"), "",
        "## Goal: >= 35x less cold tuning time than exhaustive at >= 0.99 of its kernel speed",
        "", *goal_lines(ok), "",
        "## Runs", "", df[[c for c in cols if c in df]].to_markdown(index=False,
                                                                      floatfmt=".4g"), "",
        "## Provenance", "",
        "- per run (date, commit): the `date`/`costtune_commit` of each run's environment "
        "in prune_vs_exhaustive.jsonl",
        f"- GPU {env.get('gpu')} ({env.get('sm_count')} SMs, driver {env.get('driver')}, "
        f"CUDA {env.get('cuda')}), torch {env.get('torch')}, triton {env.get('triton')}, "
        f"host {env.get('hostname')}, {env.get('date')}",
        f"- costtune commit {env.get('costtune_commit') or 'unknown'}"
        f"{' (uncommitted changes)' if env.get('costtune_dirty') else ''}; model "
        f"`{args.model}`, stage-2 model `{stage2_name(args)}`",
        (f"- command: `{' '.join(sys.argv)}`: report rewritten from the run log; "
         if wall_s != wall_s else
         f"- command: `{' '.join(sys.argv)}`; budget {args.budget_s:.0f} s, driver wall "
         f"{wall_s:.0f} s, {os.cpu_count()} CPU cores; ")
        + "the runs were made on the device calls logged in experiments/results/logs/"
        "prune*_call*.log (16-core H200 host, one run per fresh process)",
    ]
    if dropped:
        lines += ["", "## Not run", ""] + [f"- {r.family} {r.problem} {r.label}: {why}"
                                            for r, why in dropped]
    if args.before is not None and args.before.exists():
        lines += ["", *before_after(load_log(args.before), results, args.before)]
    notes = sorted({w for _, res in results for w in res.get("warnings", [])})
    if notes:
        lines += ["", "## costtune warnings", ""] + [f"- {w}" for w in notes]
    (args.out_dir / "prune_vs_exhaustive.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out_dir / 'prune_vs_exhaustive.md'} and .csv")


if __name__ == "__main__":
    sys.exit(main())
