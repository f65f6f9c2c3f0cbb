"""``costtune.explain``: how costtune sees one autotuned launch, without running the kernel.

It runs the pruning hook the kernel would meet (its own ``costtune.prune_configs_by``, else
the default one) on the kernel's configs and this call's arguments, and reports what it read:
the kernel's kind, family, problem sizes and dtype with where each came from, how config and
launch names map onto the family's parameters, knobs the model does not learn, the grid
check, the ranking it would benchmark and every doubt (the warning the hook would give).
Nothing compiles or runs (``two_stage`` AOT-compiles its shortlist on the CPU).

>>> report = costtune.explain(softmax_kernel, y, x, x.stride(0), y.stride(0), n_rows,
...                           n_cols, grid=(n_rows,), BLOCK_SIZE=1024)  # doctest: +SKIP
>>> report.family, report.problem, report.k  # doctest: +SKIP
('softmax', {'rows': 4096, 'cols': 1000}, 8)

``explaining()`` does the same for every autotuned kernel's first launch while inside (the
``costtune explain SCRIPT`` command).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.abc
import importlib.util
import math
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from costtune.tune.decision import tie_keys
from costtune.tune.kind import KernelKind, heuristic_rules, python_function
from costtune.tune.launch import (
    Launch,
    NotApplicable,
    call_args,
    config_key,
    describe,
    launch_options,
    launch_params,
)
from costtune.types import CosttuneWarning

_SHOWN = 12  # ranked configs printed beyond the benchmarked ones


@dataclass(frozen=True)
class Ranked:
    """One config in the order the hook ranks them (1 = predicted fastest)."""

    position: int
    config: str
    score: float
    benchmarked: bool


@dataclass
class Explanation:
    """How costtune sees one launch; ``str()`` is the printed report."""

    kernel: str
    n_configs: int
    model: str
    top_k: int | float
    k: int
    kind: KernelKind | None = None
    family: str | None = None
    problem: dict[str, int] = field(default_factory=dict)
    dtype: str | None = None
    origin: dict[str, str] = field(default_factory=dict)  # size / parameter -> its source
    mapping: dict[str, str] = field(default_factory=dict)  # config name -> family parameter
    launch_params: dict[str, Any] = field(default_factory=dict)  # fixed at launch / by grid
    # Family parameters set by triton.heuristics at each launch -> their values over the configs
    set_by_rules: dict[str, list] = field(default_factory=dict)
    knobs: dict[str, list] = field(default_factory=dict)  # knob -> its values in the configs
    unknown: dict[str, list] = field(default_factory=dict)  # names costtune does not know
    ranking: list[Ranked] = field(default_factory=list)
    doubts: list[tuple[str, str]] = field(default_factory=list)  # (category, message)
    info: list[str] = field(default_factory=list)
    warning: str | None = None  # the CosttuneWarning the hook would give
    not_described: str | None = None  # why the launch reads as no family

    @property
    def benchmarked(self) -> list[str]:
        return [r.config for r in self.ranking if r.benchmarked]

    def __str__(self) -> str:
        return "\n".join(_report(self))


def explain(kernel: Any, *args: Any, grid: Any = None, prune: Any = None,
            **kwargs: Any) -> Explanation:
    """Print and return how costtune sees ``kernel[grid](*args, **kwargs)``.

    ``kernel``: a ``triton.autotune`` (or ``costtune.autotune``) kernel, maybe under
    ``triton.heuristics`` (whose values the launch passes the autotuner). ``grid``: the launch
    grid (a tuple or a callable of the meta-parameters), as in ``kernel[grid]``. ``prune``:
    the hook to explain (a ``costtune.prune_configs_by(...)`` dict); default: the kernel's
    own costtune hook, else ``prune_configs_by()``'s defaults. ``kwargs``: the kernel's own
    keyword arguments (e.g. ``BLOCK_SIZE=1024``).

    >>> import costtune
    >>> costtune.explain(matmul_kernel, a, b, c, M, N, K, *strides,  # doctest: +SKIP
    ...                  grid=lambda meta: (triton.cdiv(M, meta["BLOCK_SIZE_M"]),))
    """
    tuner = _autotuner(kernel)
    named = dict(zip(tuner.arg_names, args))
    for name, rule in heuristic_rules(kernel, stop=tuner):  # rules over the autotuner
        kwargs[name] = rule({**named, **kwargs})
    report = explain_call(tuner, args, {**kwargs, "grid": grid}, prune=prune)
    print(report)
    return report


def explain_call(tuner: Any, args: Sequence[Any], kwargs: Mapping[str, Any], *,
                 prune: Any = None) -> Explanation:
    """The explanation for ``tuner.run(*args, **kwargs)`` (kwargs may hold ``grid``)."""
    pruner = _fresh_pruner(tuner, prune)
    configs = list(tuner.configs)
    named = dict(zip(tuner.arg_names, args))
    kwargs = {k: v for k, v in kwargs.items() if not (k == "grid" and v is None)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = pruner(configs, named, **kwargs)
    decision = pruner.last
    configs = decision.configs or configs  # a user filter's own configs are what ranked
    ours = [str(w.message) for w in caught if issubclass(w.category, CosttuneWarning)]
    # What ranked: the kernel's learned model where learn=True taught it one, else the hook's.
    out = Explanation(python_function(tuner).__name__, len(configs),
                      decision.model or str(pruner.model),
                      pruner.top_k, len(kept), doubts=list(decision.notes),
                      warning=ours[0] if ours else None)
    try:
        launch = describe(pruner.spec, configs, args=call_args(named, kwargs), kernel=tuner,
                          grid=kwargs.get("grid"))
        _fill(out, launch, configs)
    except Exception as exc:  # NotApplicable, or the pruner's own error: said, not raised
        out.not_described = (str(exc) if isinstance(exc, NotApplicable)
                             else f"describing it failed ({type(exc).__name__}: {exc})")
        from costtune.tune.kind import read_kind

        out.kind = read_kind(tuner)
    out.ranking = _ranking(configs, kept, decision.scores)
    if decision.stage2:  # which kernel stage 2 compiled and which model re-ranked
        whose = ("your kernel" if decision.stage2_kernel == "yours"
                 else str(decision.stage2_kernel).replace(" (", " kernel (", 1))
        out.info.append(f"stage 2 compiled {whose} at the shortlist and re-ranked it with "
                        f"{decision.stage2_model}")
    return out


@contextlib.contextmanager
def explaining(*, prune: Any = None, out: TextIO | None = None) -> Iterator[list[Explanation]]:
    """While inside, print an explanation before each autotuned kernel's first launch per
    tuning key (then run it as usual); yields the list of explanations made. Triton is not
    imported here: a script that sets ``TRITON_INTERPRET`` before importing it (as scripts run
    on a CPU do) must be the first to import it, so the autotuner is patched once it is."""
    made: list[Explanation] = []
    seen: set[tuple] = set()
    patched: list[tuple[Any, Any]] = []

    def patch(module: Any) -> None:
        tuner_class = module.Autotuner
        original = tuner_class.run

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            named = call_args(dict(zip(self.arg_names, args)), kwargs)
            key = (id(self), *(repr(named.get(k)) for k in self.keys))
            if key not in seen and len(self.configs) > 1:
                seen.add(key)
                try:
                    made.append(explain_call(self, args, kwargs, prune=prune))
                    made[-1].info.extend(_not_this_run(self, prune))
                    print(made[-1], file=out or sys.stdout)
                except Exception as exc:  # explaining must not stop the program
                    print(f"costtune explain: {python_function(self).__name__}: not explained "
                          f"({type(exc).__name__}: {exc})", file=out or sys.stdout)
            return original(self, *args, **kwargs)

        tuner_class.run = run
        patched.append((tuner_class, original))

    with after_import("triton.runtime.autotuner", patch):
        try:
            yield made
        finally:
            for tuner_class, original in patched:
                tuner_class.run = original


@contextlib.contextmanager
def after_import(name: str, callback: Any) -> Iterator[None]:
    """While inside, call ``callback(module)`` once module ``name`` is imported (at once if it
    already is), without importing it."""
    if name in sys.modules:
        callback(sys.modules[name])
        yield
        return
    finder = _AfterImport(name, callback)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands the real spec back with a loader that calls back after the
    real one ran (the real loader, which may serve other modules, is left as it is)."""

    def __init__(self, name: str, callback: Any) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; and the lookup below must not find this finder
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _CallingBack(spec.loader, self.callback)
        return spec


class _CallingBack(importlib.abc.Loader):
    """``loader``, then ``callback(module)`` once the module ran."""

    def __init__(self, loader: Any, callback: Any) -> None:
        self.loader, self.callback = loader, callback

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        self.callback(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_code, is_package, ...
        return getattr(self.loader, name)


def _not_this_run(tuner: Any, prune: Any) -> list[str]:
    """A note where the explanation's hook is not the one this run's launch uses."""
    from costtune.tune.pruner import ConfigPruner

    if not isinstance(tuner.early_config_prune, ConfigPruner):
        return [f"this run has no costtune hook on this kernel: it benchmarks all "
                f"{len(tuner.configs)} configs (or what its own early_config_prune keeps); "
                "shown is what costtune's hook would keep"]
    if prune is not None:
        return ["shown with the options given; this run tunes with the kernel's own hook"]
    return []


def _autotuner(kernel: Any) -> Any:
    from triton.runtime.autotuner import Autotuner

    fn = kernel
    for _ in range(8):
        if isinstance(fn, Autotuner):
            return fn
        fn = getattr(fn, "fn", None)
    raise ValueError(f"explain needs a triton.autotune (or costtune.autotune) kernel, got "
                     f"{type(kernel).__name__}")


def _fresh_pruner(tuner: Any, prune: Any) -> Any:
    """A copy of the hook to explain, with its own warn-once memory and no precompile."""
    from costtune.tune.pruner import ConfigPruner, prune_configs_by

    if isinstance(prune, Mapping):
        prune = prune.get("early_config_prune")
    if prune is None and isinstance(tuner.early_config_prune, ConfigPruner):
        prune = tuner.early_config_prune
    if prune is None:
        prune = prune_configs_by(preload=False)["early_config_prune"]
    if not isinstance(prune, ConfigPruner):
        raise ValueError(f"prune must be costtune.prune_configs_by(...), got "
                         f"{type(prune).__name__}")
    clone = copy.copy(prune)
    clone._warned = {}
    clone.after_prune = None
    clone.precompile = False
    clone.kernel = tuner
    clone.last = None
    learner = getattr(tuner, "learner", None)  # learn=True: rank as its launch will, with
    if (prune is tuner.early_config_prune and learner is not None and learner.learns
            and getattr(clone, "kernel_dir", None) is None):  # the kernel's learned model
        clone.kernel_dir = learner.folder()
    return clone


def _fill(out: Explanation, launch: Launch, configs: Sequence[Any]) -> None:
    out.kind, out.family, out.problem, out.dtype = (launch.kind, launch.family,
                                                    launch.problem, launch.dtype)
    out.origin, out.mapping = dict(launch.origin), dict(launch.rename)
    out.launch_params, out.info = dict(launch.meta), list(launch.info)
    if launch.by_rule:
        params = launch_params(launch, configs)
        out.set_by_rules = {p: sorted({d[p] for d in params if d[p] is not None})
                            for p in launch.by_rule}
    out.knobs = {n: _values(configs, n) for n in launch.knobs}
    out.unknown = {n: _values(configs, n) for n in launch.unknown}
    for option, neutral in (("num_ctas", 1), ("maxnreg", None), ("ir_override", None)):
        values = sorted({launch_options(c).get(option, neutral) for c in configs}, key=repr)
        if len(values) > 1:
            out.knobs[option] = values


def _values(configs: Sequence[Any], name: str) -> list:
    return sorted({c.kwargs[name] for c in configs if name in c.kwargs}, key=repr)


def _ranking(configs: Sequence[Any], kept: Sequence[Any], scores: Any) -> list[Ranked]:
    import numpy as np

    from costtune.evaluate.metrics import rank_positions

    position = {id(c): i for i, c in enumerate(configs)}
    first = [position[id(c)] for c in kept]
    taken = set(first)
    rest = [i for i in range(len(configs)) if i not in taken]
    if scores is not None:
        rest = [rest[j] for j in rank_positions(np.array([scores[i] for i in rest]),
                                                tie_keys([configs[i] for i in rest]))]
    return [Ranked(n + 1, config_key(configs[i]),
                   math.nan if scores is None else float(scores[i]), n < len(first))
            for n, i in enumerate(first + rest)]


def _report(e: Explanation) -> list[str]:
    lines = [f"costtune.explain: {e.kernel} ({e.n_configs} configs; model {e.model!r}, "
             f"top_k={e.top_k})"]
    kind = f"{e.kind.what} ({e.kind.reason})" if e.kind else "not read (no name or source)"
    lines.append(f"  kind      {kind}")
    if e.family is None:
        lines.append(f"  family    none: {e.not_described}")
    else:
        lines.append(f"  family    {e.family} ({e.origin.get('family', '')})")
        lines.append("  sizes     " + ", ".join(f"{k}={v} ({e.origin.get(k, '?')})"
                                               for k, v in e.problem.items()))
        lines.append(f"  dtype     {e.dtype} ({e.origin.get('dtype', '?')})")
        params = [f"{name} -> {p}" for name, p in e.mapping.items()]
        params += [f"{p} = {v} ({e.origin.get(p, '')})" for p, v in e.launch_params.items()]
        params += [f"{p} in {v} ({e.origin.get(p, '')}, per config)"
                   for p, v in e.set_by_rules.items()]
        lines.append("  params    " + ("; ".join(params) or "none (neutral values)"))
    for title, names in (("knobs", e.knobs), ("unknown", e.unknown)):
        if names:
            lines.append(f"  {title:<9} " + "; ".join(f"{n} in {v}" for n, v in names.items())
                         + ("  (not learned by the model; passed to Triton as they are)"
                            if title == "knobs" else "  (names costtune does not know)"))
    lines += [f"  note      {note}" for note in e.info]
    lines.append(f"  ranking   benchmarks {e.k} of {e.n_configs}"
                 + ("" if e.ranking and not math.isnan(e.ranking[0].score)
                    else " (not ranked: all kept)"))
    for r in e.ranking[: e.k + _SHOWN]:
        score = "" if math.isnan(r.score) else f"  score {r.score:+.4f}"
        lines.append(f"    {r.position:>4} {'*' if r.benchmarked else ' '} {r.config}{score}")
    if len(e.ranking) > e.k + _SHOWN:
        lines.append(f"    ... {len(e.ranking) - e.k - _SHOWN} more")
    lines.append("  doubts    " + ("none" if not e.doubts else ""))
    lines += [f"    [{c}] {m}" for c, m in e.doubts]
    if e.warning:
        lines.append(f"  warning   {e.warning}")
    return lines
