"""What one run does, in its own fresh process (GPU): tune the kernel once, cold, then check
and time the config it chose; and the same-process re-timing of a shape's chosen configs.

The run step starts these as ``python -m experiments.prune_vs_exhaustive.run --run-one ...``;
the helpers that build the kernel, its autotuner and its launch also run on CPU tensors under
``TRITON_INTERPRET=1`` (tests/test_hook.py).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

import costtune
from experiments.prune_vs_exhaustive.plan import Run


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
    from costtune.measure.gpu import make_flush_buffer, time_graph

    fam = costtune.get_family(run.family)
    configs = method_configs(fam, run)
    benched = []

    # costtune times its survivors its own way (the default bench="graph"); plain
    # triton.autotune with Triton's do_bench, as users run it today. Both counted.
    bench = costtune.graph_bench if run.method.startswith("costtune") else None

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
    chosen = costtune.Config.from_dict({k: v for k, v in tuner.best_config.all_kwargs().items()
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
        "reps": reps, "model": model, "stage2_model": stage2_model,
        "env": environment(),
    }


def retime_one(spec: dict[str, Any], *, reps: int, rounds: int) -> dict[str, Any]:
    """Time every config of ``spec["configs"]`` (the configs the methods chose for one shape)
    in this one process, interleaved: ``rounds`` passes in shuffled order, each config's
    median over its passes. Runs minutes apart drift by a few percent (clocks, heat); side by
    side they do not."""
    import random

    from costtune.env import environment
    from costtune.features import parse_config_key
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
