"""Drop-in pruning for ``triton.autotune``: the cost model ranks every config in one batch
before anything compiles, and Triton benchmarks only the ``top_k`` best.

- ``prune_configs_by(...)``: the ``prune_configs_by=`` dict for ``@triton.autotune``.
- ``autotune(configs, key, ...)`` (``tune.autotune``): ``triton.autotune`` with that pruning,
  plus a parallel precompile of the surviving configs (GPU only).
- ``harvest(store_dir)``: record every autotune's timings in a Store (``tune.harvest``).

How one tuning call is decided:

1. Describe the launch (``tune.launch``): family (given, or told from the kernel's name or
   source and the config names), parameters (config or launch names as Triton's tutorials,
   Inductor and kernel libraries spell them), problem sizes (args named like the family's
   sizes, a ``problem=`` mapping, tensor and TensorDescriptor shapes), dtype (the input
   operand's). Cannot tell, or a kernel of another kind -> keep all configs.
2. Pick the model (``model.registry``; trust in ``tune.ranking``): missing, unreadable,
   another feature schema, or not trained on this family -> keep all configs.
3. Doubts: a kernel declared as a family it does not read as (or of an unknown family), another
   GPU or triton version, sizes more than ``range_margin`` octaves outside the training
   range, a dtype the family's data lacks, a launch grid unlike the family's, a model
   that needs compiled features without ``two_stage`` -> rank, but benchmark ``widen`` x k
   (``widen=None``: all).
4. Rank by static features; ties by config key. ``two_stage=True`` re-ranks a shortlist by
   compiled features (AOT compile on the CPU, cached) when the model has them.

Each fallback warns once per kernel (``CosttuneWarning``); the result is never empty and
nothing here stops tuning: an unexpected error keeps all configs, with a warning.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costtune.tune.kind import calling_tuner
from costtune.tune.launch import (
    LaunchSpec,
    NotApplicable,
    ProblemSpec,
    call_args,
    config_key,
    describe,
    family_params,
)
from costtune.tune.preload import preload as start_preload
from costtune.tune.preload import wait as wait_for_preload
from costtune.types import CosttuneWarning

__all__ = ["ConfigPruner", "CosttuneWarning", "PruneDecision", "prune_configs_by"]


@dataclass
class PruneDecision:
    """What one ``early_config_prune`` call did (``ConfigPruner.last``)."""

    n_configs: int
    k: int
    kept: list[str]  # config keys, best first
    family: str | None = None
    problem: dict[str, int] | None = None
    dtype: str | None = None
    scores: np.ndarray | None = None  # stage-1 scores, in the configs' order
    stage2: bool = False
    fallbacks: list[str] = field(default_factory=list)  # categories that applied
    notes: list[tuple[str, str]] = field(default_factory=list)  # (category, message) of each
    precompiled: tuple[int, int] | None = None  # (compiled, submitted) by costtune.autotune
    elapsed_ms: float = math.nan  # pruning
    precompile_ms: float = math.nan  # the parallel precompile after it


class ConfigPruner:
    """The ``early_config_prune`` callable; build it with ``prune_configs_by``.

    ``last`` holds the latest call's ``PruneDecision``.
    """

    def __init__(self, *, model: Any, top_k: int | float, spec: LaunchSpec, two_stage: bool,
                 shortlist: int, stage2_model: Any, widen: int | None,
                 range_margin: float | None, workers: int | None,
                 cache_dir: str | os.PathLike | None) -> None:
        if isinstance(top_k, bool) or not isinstance(top_k, (int, float)) or not top_k >= 0:
            raise ValueError(f"top_k must be a count or a fraction >= 0, got {top_k!r}")
        if int(shortlist) < 1:
            raise ValueError(f"shortlist must be >= 1, got {shortlist!r}")
        if widen is not None and int(widen) < 1:
            raise ValueError(f"widen must be >= 1 or None, got {widen!r}")
        if range_margin is not None and not range_margin >= 0:
            raise ValueError(f"range_margin must be >= 0 or None, got {range_margin!r}")
        spec.check()
        self.model, self.top_k, self.spec = model, top_k, spec
        self.two_stage, self.shortlist = bool(two_stage), int(shortlist)
        self.stage2_model = stage2_model
        self.widen = None if widen is None else int(widen)
        self.range_margin, self.workers, self.cache_dir = range_margin, workers, cache_dir
        self.last: PruneDecision | None = None
        # costtune.autotune sets this: (survivors, named_args, kwargs) -> precompile counts.
        self.after_prune: Callable[..., tuple[int, int] | None] | None = None
        # The autotuned kernel (its name and source say what it computes); None: the
        # Autotuner calling this pruner, found up the call stack.
        self.kernel: Any = None
        self._warned: set[str] = set()
        # Triton passes the same configs list on every call: keys and family params of that
        # list are computed once.
        self._configs: Sequence[Any] | None = None
        self._keys = np.zeros(0, dtype=object)
        self._params: dict[str, tuple[list[dict[str, Any]], dict[str, np.ndarray]]] = {}
        self._compiled: dict = {}

    def __call__(self, configs: Sequence[Any], named_args: Mapping[str, Any],
                 **kwargs: Any) -> list[Any]:
        start = time.perf_counter()
        notes: list[tuple[str, str]] = []
        try:
            wait_for_preload()  # a model still loading in the background: let it finish first
            decision, order = self._prune(configs, named_args, kwargs, notes)
        except Exception as exc:  # never stop tuning: benchmark everything instead
            notes.append(("error", f"pruning failed ({type(exc).__name__}: {exc})"))
            decision = PruneDecision(len(configs), len(configs), list(self.config_keys(configs)))
            order = np.arange(len(configs))
        kept = [configs[i] for i in order[: decision.k]]
        decision.fallbacks = list(dict.fromkeys(c for c, _ in notes))
        decision.notes = list(dict.fromkeys(notes))
        self._warn(notes, f"benchmarking {len(kept)} of {len(configs)} configs")
        decision.elapsed_ms = (time.perf_counter() - start) * 1e3
        if self.after_prune is not None:
            start = time.perf_counter()
            try:
                decision.precompiled = self.after_prune(kept, named_args, kwargs,
                                                        decision.family)
            except Exception:  # precompiling only saves time; Triton compiles what it lacks
                pass
            decision.precompile_ms = (time.perf_counter() - start) * 1e3
        self.last = decision
        return kept

    def config_keys(self, configs: Sequence[Any]) -> np.ndarray:
        """Canonical keys of ``configs`` (the tie-break order)."""
        if self._configs is not configs or len(self._keys) != len(configs):
            self._keys = np.array([config_key(c) for c in configs], dtype=object)
            self._configs, self._params = configs, {}
        return self._keys

    def _family_params(self, launch: Any, configs: Sequence[Any]
                       ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
        """Per config the family's parameters, and the same as feature columns; kept while
        Triton passes the same config list and the launch fixes the same parameters."""
        from costtune.features.static import config_columns

        self.config_keys(configs)
        key = (launch.family, *launch.rename.items(), *sorted(launch.meta.items()))
        if key not in self._params:
            params = family_params(launch.family, configs, rename=launch.rename,
                                   meta=launch.meta)
            self._params[key] = (params, config_columns(params))
        return self._params[key]

    def _prune(self, configs: Sequence[Any], named_args: Mapping[str, Any],
               kwargs: dict[str, Any], notes: list[tuple[str, str]]
               ) -> tuple[PruneDecision, np.ndarray]:
        from costtune.evaluate.metrics import rank_positions
        from costtune.features.static import static_features_for
        from costtune.tune.ranking import concerns, covers, load_noted, score, uses_compiled

        n = len(configs)
        keys = self.config_keys(configs)
        keep_all = (PruneDecision(n, n, list(keys)), np.arange(n))
        if n <= 1:
            return keep_all
        args = call_args(named_args, kwargs)
        try:
            launch = describe(self.spec, configs, args=args,
                              kernel=self.kernel or calling_tuner(), grid=kwargs.get("grid"))
            params, columns = self._family_params(launch, configs)
        except NotApplicable as exc:
            notes.append((exc.category, str(exc)))
            return keep_all
        try:
            model, note = load_noted(self.model, launch.family)
        except Exception as exc:
            notes.append(("model", f"no usable cost model {self.model!r} "
                          f"({type(exc).__name__}: {exc})"))
            return keep_all
        if note:
            notes.append(("model", note))
        if not covers(model, launch.family):
            notes.append(("model", f"cost model {self.model!r} was trained on "
                          f"{model.families_}, not {launch.family}"))
            return keep_all
        k = keep_count(self.top_k, n)
        doubts = [*launch.doubts, *concerns(model, launch, range_margin=self.range_margin)]
        if uses_compiled(model) and not self.two_stage:
            doubts.append(("features", f"cost model {self.model!r} needs compiled features; "
                           "without two_stage=True it ranks with them missing"))
        features = static_features_for(launch.family, launch.problem, launch.dtype, params,
                                       columns=columns)
        if doubts:
            notes.extend(doubts)
            k = n if self.widen is None else min(n, k * self.widen)
        scores = score(model, features)
        order = rank_positions(scores, keys)
        decision = PruneDecision(n, k, [], launch.family, launch.problem, launch.dtype, scores)
        if self.two_stage and k < n:
            order = self._stage2(launch, params, features, keys, order, decision, notes)
        decision.kept = [keys[i] for i in order[:k]]
        return decision, order

    def _stage2(self, launch: Any, params: list[dict], features: Any, keys: np.ndarray,
                order: np.ndarray, decision: PruneDecision,
                notes: list[tuple[str, str]]) -> np.ndarray:
        from costtune.tune.ranking import (
            compiled_table,
            default_stage2,
            load_noted,
            stage2_order,
            uses_compiled,
        )

        source = default_stage2(self.model) if self.stage2_model is None else self.stage2_model
        try:
            model = load_noted(source, launch.family)[0]
        except Exception as exc:
            notes.append(("two_stage", f"no stage-2 model {source!r} ({exc}); stage 2 skipped"))
            return order
        if not uses_compiled(model):
            notes.append(("two_stage", f"two_stage needs a model with compiled features; "
                          f"{source!r} has only static ones, stage 2 skipped"))
            return order
        short = order[: max(decision.k, self.shortlist)]
        try:
            table = compiled_table(launch, [params[i] for i in short],
                                   cache_dir=self.cache_dir, workers=self.workers,
                                   memo=self._compiled)
        except Exception as exc:  # e.g. a broken compile pool: the static ranking stands
            notes.append(("two_stage", f"compiled features failed ({type(exc).__name__}: "
                          f"{exc}); stage 2 skipped"))
            return order
        sub = stage2_order(model, features.iloc[short], table=table, keys=keys[short])
        decision.stage2 = True
        return np.concatenate([short[sub], order[len(short):]])

    def _warn(self, notes: list[tuple[str, str]], outcome: str) -> None:
        new = [(c, m) for c, m in notes if c not in self._warned]
        if new:
            self._warned.update(c for c, _ in new)
            text = "; ".join(dict.fromkeys(m for _, m in new))
            warnings.warn(f"costtune: {text} -> {outcome}", CosttuneWarning, stacklevel=4)


def keep_count(top_k: int | float, n: int) -> int:
    """Configs to keep of ``n``: a float in (0, 1] is a fraction (rounded up), else a count;
    always between 1 and ``n``.

    >>> keep_count(0.01, 50), keep_count(0, 50), keep_count(8, 5), keep_count(1.0, 50)
    (1, 1, 5, 50)
    """
    k = math.ceil(top_k * n) if isinstance(top_k, float) and top_k <= 1 else int(top_k)
    return max(1, min(n, k))


def prune_configs_by(model: Any = "h200", top_k: int | float = 8, *, family: str | None = None,
                     problem: ProblemSpec = None, params: Mapping[str, str] | None = None,
                     dtype: str | None = None, two_stage: bool = False, shortlist: int = 32,
                     stage2_model: Any = None, widen: int | None = 4,
                     range_margin: float | None = 1.0, workers: int | None = None,
                     cache_dir: str | os.PathLike | None = None,
                     preload: bool = True, trust_family: bool = False) -> dict[str, Any]:
    """``prune_configs_by=`` for ``@triton.autotune``: Triton benchmarks the ``top_k`` configs
    the cost model ranks fastest (a float <= 1 is a fraction of the list; never fewer than 1).

    ``model``: a shipped model name, a saved model's path or a ``CostModel``. ``family``:
    "gemm", "softmax", "attention" or None (told from the kernel and the config names); a
    kernel whose name or source reads as another kind (a layer norm declared as softmax) is
    ranked with ``widen`` x k unless ``trust_family=True``. ``problem``:
    ``{family size: arg name | (tensor arg, dim) | int}`` or ``callable(args) -> dict``;
    default: args named like the family's sizes, else tensor shapes. ``params``: config (or
    launch kwarg) names to family names, e.g. ``{"BLK_M": "BLOCK_M"}``, for names none of the
    known spellings (``kernels.base.PARAM_NAMES``) match; absent family params take their
    neutral value (SPLIT_K=1, ROWS_PER_PROG=1). ``dtype``: default, the input operand's.
    ``two_stage``: re-rank the best ``shortlist`` by compiled features (AOT compile on the
    CPU, cached in ``cache_dir``, ``workers`` threads) with ``stage2_model`` (default:
    ``<model>_compiled`` for a shipped name such as "h200", else ``model``). ``widen``: k
    multiplier when the model may not apply here (None: keep all); ``range_margin``: octaves
    beyond the training sizes still trusted (None: no check). ``preload``: start loading the
    model now, in a background thread, so the first tuning call does not wait ~1.5-3 s for
    xgboost's imports and the booster (``tune.preload``).

    >>> import triton, costtune
    >>> @triton.autotune(configs=[triton.Config({"BLOCK_M": 64, "BLOCK_N": 64,
    ...                                          "BLOCK_K": 32})], key=["M", "N", "K"],
    ...                  prune_configs_by=costtune.prune_configs_by(top_k=4, family="gemm"))
    ... @triton.jit
    ... def matmul(a, b, c, M, N, K, BLOCK_M: triton.language.constexpr,
    ...            BLOCK_N: triton.language.constexpr, BLOCK_K: triton.language.constexpr):
    ...     pass
    """
    spec = LaunchSpec(family=family, problem=problem, params=dict(params or {}), dtype=dtype,
                      trust_family=trust_family)
    pruner = ConfigPruner(model=model, top_k=top_k, spec=spec, two_stage=two_stage,
                          shortlist=shortlist, stage2_model=stage2_model, widen=widen,
                          range_margin=range_margin, workers=workers, cache_dir=cache_dir)
    if preload:
        start_preload(model, family, two_stage=two_stage, stage2_model=stage2_model)
    return {"early_config_prune": pruner}
