"""``costtune.autotune``: ``triton.autotune`` with costtune's pruning, a parallel precompile of
the kept configs, GPU-only timing, replacement of kept configs that fail and an optional
output check (``tune.tuner``)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

from costtune.tune.launch import ProblemSpec
from costtune.tune.pruner import prune_configs_by

__all__ = ["autotune"]

_PRUNE_OPTIONS = frozenset(inspect.signature(prune_configs_by).parameters)


def autotune(configs: Sequence[Any], key: Sequence[str], *, top_k: int | float | None = None,
             model: Any = "h200", family: str | None = None, problem: ProblemSpec = None,
             precompile: bool | int | str = True, bench: str = "graph", check: Any = None,
             budget: Any = None, learn: bool = False, ranks: str = "each",
             **options: Any) -> Callable[[Any], Any]:
    """``triton.autotune`` that benchmarks only the ``top_k`` configs the cost model ranks
    best and, on a GPU, first compiles them in parallel (``tune.precompile``; skipped under
    the interpreter). ``precompile``: True (forked processes on Linux, else threads; one per
    usable core, at most one per config), "processes", "threads", an int (that many
    threads) or False (Triton compiles them one by one while it benchmarks). ``bench``:
    "graph" times each kept config as the dataset was timed (CUDA graph of launches after L2
    flushes, ``measure.bench.graph_bench``), "triton" leaves Triton's ``do_bench``;
    ``do_bench`` (or Triton's ``warmup``/``rep``/``use_cuda_graph``) passed in options wins
    over both. ``options``: ``prune_configs_by`` options and ``triton.autotune`` arguments.

    Never worse than exhaustive tuning: a kept config that fails to compile, does not fit or
    fails to launch is replaced by the next-ranked one (an error configs across the list's
    values share, none having run, is raised: the kernel's), so ``top_k`` configs that run are
    benchmarked. An empty list runs Triton's default config, as Triton does. ``check``: True or
    ``{"outputs": [arg names], "reference": fn(args), "rtol": .., "atol": ..}`` also
    launches each benchmarked config once on the call's inputs and compares the outputs
    (with each other, or with the reference); a config that disagrees cannot win and is
    named in a warning (``tune.guard``). ``tuner.rejected`` says what was set aside.

    ``top_k`` defaults to 8. ``budget``: instead of a fixed ``top_k``, ``"adaptive"`` or
    ``costtune.Adaptive(max_configs=16, ...)`` benchmarks in model order, stops when the
    model is confident (a margin calibrated by replay, ``tune.adaptive``), extends along the
    measured best's neighbours when the measurements disagree, up to ``max_configs``
    (``tune.adaptive.Adaptive``); ``tuner.adaptive`` says what it did. ``learn``: True
    updates the kernel's own model in the user's cache with what each tuning measured, in a
    thread the process's exit waits for (a ``multiprocessing.Pool`` task: call
    ``kernel.learner.wait()``), and ranks with it from then on (``tune.learn``).

    ``cache_results=True`` (Triton's option) stores each tuning's timings on disk; a later
    process with the same key, configs and model benchmarks nothing, and costtune stores its
    kept list beside them (``tune.kept_cache``: kernel, tuning key, configs, pruner options,
    model files), so such a process does not prune either: no model loads (nor, once a kept
    list of the kernel was stored, is it preloaded); ``tuner.kept_from_cache`` says so.
    ``ranks``: under ``torch.distributed``, ``"rank0"`` makes rank 0 tune each new key and
    broadcast its choice, which every other rank launches (each must make the same tuning
    calls in the same order); ``"each"`` (default) lets every rank tune on its own.

    >>> import triton, costtune
    >>> @costtune.autotune(configs=[triton.Config({"BLOCK_N": 1024})], key=["rows", "cols"],
    ...                    top_k=4, family="softmax")
    ... @triton.jit
    ... def softmax(x, y, rows, cols, BLOCK_N: triton.language.constexpr):
    ...     pass
    """
    prune_kw, triton_kw = _split(options, configs, precompile=precompile, bench=bench,
                                 ranks=ranks)
    adaptive, top_k = _budget(budget, top_k=top_k, learn=learn, model=model)
    prune_configs_by(model, top_k, family=family, problem=problem,
                     **{**prune_kw, "preload": False})  # checks now; the kernel's call preloads
    from costtune.tune.guard import check_spec

    spec = check_spec(check)

    def decorator(fn: Any) -> Any:
        from costtune.tune.learn import Learner
        from costtune.tune.preload import start_warm
        from costtune.tune.tuner import SafeAutotuner

        _check_key(key, fn)
        # One pruner per kernel: its warnings and caches belong to that kernel.
        kw = prune_kw
        if "preload" not in kw and not learn and _kept_list_stored(fn, triton_kw):
            kw = {**kw, "preload": False}  # a kept-list cache hit loads no model
            start_warm()  # but needs Triton's key of its own files: computed meanwhile
        prune = prune_configs_by(model, top_k, family=family, problem=problem, **kw)
        prune["early_config_prune"].adaptive = adaptive is not None  # its warnings say "up to"
        rest = {k: v for k, v in triton_kw.items() if k not in ("reset_to_zero", "restore_value")}
        return SafeAutotuner(fn, fn.arg_names, configs, key, triton_kw.get("reset_to_zero"),
                             triton_kw.get("restore_value"), prune_configs_by=prune,
                             check=spec, precompile_threads=precompile, budget=adaptive,
                             learner=Learner(fn, model=model) if learn else None,
                             ranks=ranks, **rest)

    return decorator


def _check_key(key: Any, fn: Any) -> None:
    """A ValueError naming what is wrong with ``key`` for ``fn`` (a name no argument has)."""
    from costtune.tune.decision import key_problem

    wrong = key_problem(key, getattr(fn, "arg_names", ()))
    if wrong:
        raise ValueError(wrong)


def _kept_list_stored(fn: Any, triton_kw: dict[str, Any]) -> bool:
    """With ``cache_results``, whether a kept list of ``fn`` was stored before
    (``tune.kept_cache.seen``): a later call likely finds its list on disk, and a model
    loading in the background meanwhile would only slow that call (the GIL)."""
    from triton import knobs

    from costtune.tune.kept_cache import seen

    return bool(triton_kw.get("cache_results") or knobs.autotuning.cache) and seen(fn)


def _split(options: dict[str, Any], configs: Sequence[Any], *, precompile: Any, bench: Any,
           ranks: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pruner's options, triton.autotune's, with the timing ``bench`` asks for);
    ValueError on no configs, an unknown option or a bad ``precompile``, ``bench`` or
    ``ranks``."""
    import triton

    from costtune.measure.bench import BENCH_CHOICES, graph_bench
    from costtune.tune.precompile import parse_precompile
    from costtune.tune.ranks import check_ranks

    triton_names = set(inspect.signature(triton.autotune).parameters) - {
        "configs", "key", "prune_configs_by"}
    if "prune_configs_by" in options:
        given = options.pop("prune_configs_by") or {}
        other = sorted(set(given) - {"early_config_prune"})
        if other:
            raise ValueError(f"costtune.autotune ranks with its cost model: prune_configs_by "
                             f"may hold only your 'early_config_prune' (it runs first), not "
                             f"{other}; pass top_k= for how many configs to benchmark")
        fn = given.get("early_config_prune")
        if fn is not None and hasattr(fn, "spec") and hasattr(fn, "top_k"):
            raise ValueError("costtune.autotune prunes with its cost model: pass "
                             "costtune.prune_configs_by(...) to triton.autotune instead, or "
                             "top_k= here")
        if fn is not None:
            options["early_config_prune"] = fn
    unknown = sorted(set(options) - _PRUNE_OPTIONS - triton_names)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; costtune.autotune takes "
                         f"{sorted(_PRUNE_OPTIONS)} and triton.autotune's {sorted(triton_names)}")
    check_ranks(ranks)
    parse_precompile(precompile)
    if bench not in BENCH_CHOICES:
        raise ValueError(f"unknown bench {bench!r}; use one of {list(BENCH_CHOICES)}")
    prune_kw = {k: v for k, v in options.items() if k in _PRUNE_OPTIONS}
    triton_kw = {k: v for k, v in options.items() if k in triton_names}
    tritons_timing = ("do_bench", "warmup", "rep", "use_cuda_graph")
    if bench == "graph" and not any(triton_kw.get(k) for k in tritons_timing):
        triton_kw["do_bench"] = graph_bench  # Triton's own timing when the user set it up
    return prune_kw, triton_kw


def _budget(budget: Any, *, top_k: int | float | None, learn: Any, model: Any
            ) -> tuple[Any, int | float]:
    """(the adaptive budget or None, the k the pruner keeps); ValueError on bad options."""
    from costtune.tune.adaptive import parse_budget

    adaptive = parse_budget(budget)
    if adaptive is not None and top_k is not None:
        raise ValueError("top_k and budget= exclude each other; the adaptive budget's cap "
                         "is max_configs")
    if not isinstance(learn, bool):
        raise ValueError(f"learn must be True or False, got {learn!r}")
    if learn and not isinstance(model, str | os.PathLike):
        raise ValueError("learn=True needs the model as a name or path (its files are what "
                         f"the kernel's own model is trained from), got {type(model).__name__}")
    return adaptive, (adaptive.max_configs if adaptive is not None
                      else 8 if top_k is None else top_k)
