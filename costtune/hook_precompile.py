"""Precompile the configs that survive pruning, in parallel, before Triton benchmarks them.

Triton compiles configs one after another while it benchmarks; here pool workers call the
kernel's ``warmup`` for every surviving config at once, which fills Triton's on-disk cache, so
the benchmark loop then loads each kernel. Workers rebuild the tensor arguments as empty CPU
tensors of the same shapes, strides and dtypes (as ``costtune.compile`` does for the collector)
and import the kernel by module and name. GPU only: the interpreter compiles nothing.

>>> precompile(tuner, survivors, named_args=named_args, kwargs=kwargs)  # doctest: +SKIP
(8, 8)
"""

from __future__ import annotations

import importlib
import pickle
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from costtune.compile import error_text, rebuild_inputs, tensor_specs
from costtune.hook_kernel import call_args


def can_precompile() -> bool:
    """True on a CUDA machine outside Triton's interpreter."""
    from triton import knobs

    if knobs.runtime.interpret:
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# A cold spawn pool costs ~6 s before its first compile on the H200 host (workers import torch
# and triton): costtune k=4 tuned GEMM in 8.0 s with one, while Triton's own serial compiles of
# the tutorial's 8 configs took 5.2 s in all. Plain triton.autotune spent per config (compile +
# benchmark): GEMM 0.41 s, softmax 0.36-0.40 s, attention 0.92-1.4 s
# (experiments/results/prune_vs_exhaustive.md). A cold pool is started only from the number of
# survivors whose serial compiles would take longer than its start; a running pool is always
# used.
MIN_COLD_POOL = {"gemm": 16, "softmax": 16, "attention": 5}
MIN_COLD_POOL_OTHER = 16


def precompile(tuner: Any, configs: Sequence[Any], *, named_args: Mapping[str, Any],
               kwargs: Mapping[str, Any], workers: int | None = None,
               timeout_s: float = 600.0, min_cold: int | None = None,
               family: str | None = None) -> tuple[int, int] | None:
    """Compile ``configs`` of ``tuner`` (a triton Autotuner) for this call's arguments in the
    compile pool; (compiled, submitted), or None when skipped (no GPU, the interpreter, fewer
    than two configs, fewer than ``min_cold`` with no pool running yet -- by default
    ``MIN_COLD_POOL`` of ``family`` --, arguments a worker cannot receive)."""
    if len(configs) < 2 or not can_precompile():
        return None
    from costtune.compile import run_in_pool, running_pool  # the collector's long-lived pool

    if min_cold is None:
        min_cold = MIN_COLD_POOL.get(family or "", MIN_COLD_POOL_OTHER)
    if running_pool() is None and len(configs) < min_cold:
        return None  # Triton's serial compiles finish before a cold pool would start

    base = tuner.base_fn
    args = tensor_specs({n: named_args[n] for n in tuner.arg_names if n in named_args})
    extra = tensor_specs(call_args({}, kwargs))
    jobs = [{"module": base.__module__, "name": base.__name__, "arg_specs": args,
             "kwarg_specs": extra, "meta": c.all_kwargs()} for c in configs]
    try:
        pickle.dumps(jobs)
    except Exception:  # e.g. a tensor descriptor argument: let Triton compile as usual
        return None
    # A timeout or a dead worker comes back as an exception: Triton compiles that config itself.
    results = run_in_pool([partial(warmup_config, **job) for job in jobs], workers=workers,
                          timeout_s=timeout_s, reuse_running=True)
    return sum(r == "" for r in results), len(jobs)


def warmup_config(module: str, name: str, *, arg_specs: dict[str, Any],
                  kwarg_specs: dict[str, Any], meta: dict[str, Any]) -> str:
    """Compile one config in a pool worker (fills Triton's disk cache); "" or the error."""
    from triton.runtime.autotuner import Heuristics
    from triton.runtime.jit import JITFunction

    try:
        fn = getattr(importlib.import_module(module), name)
        args = rebuild_inputs(arg_specs)
        kw = {**rebuild_inputs(kwarg_specs), **meta}
        # Autotuner and Heuristics wrap the JIT function; heuristics add kwargs the compile
        # needs, in the order their run() would.
        while not isinstance(fn, JITFunction):
            if isinstance(fn, Heuristics):
                for arg, rule in fn.values.items():
                    kw[arg] = rule({**args, **kw})
            fn = fn.fn
        fn.warmup(*args.values(), grid=(1,), **kw)
    except Exception as exc:  # the benchmark loop meets (and reports) the same failure
        return error_text(exc)
    return ""
