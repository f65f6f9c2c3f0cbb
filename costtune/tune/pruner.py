"""Drop-in pruning for ``triton.autotune``: the cost model ranks every config in one batch
before anything compiles, and Triton benchmarks only the ``top_k`` best.

- ``prune_configs_by(...)``: the ``prune_configs_by=`` dict for ``@triton.autotune``.
- ``autotune(configs, key, ...)`` (``tune.autotune``): ``triton.autotune`` with that pruning,
  plus a parallel precompile of the surviving configs (GPU only).
- ``harvest(store_dir)``: record every autotune's timings in a Store (``tune.harvest``).

How one tuning call is decided:

0. Feasibility (``tune.feasibility``): configs whose launch options Triton or the GPU refuse
   (num_warps not a power of two, over 1,024 threads, bools or fractions) are dropped, and,
   once the family is known, those whose tile sizes are not positive integers or whose
   shared-memory lower bound exceeds the GPU's limit. Nothing that can launch is dropped.
1. Describe the launch (``tune.launch``): family (given, or told from the kernel's name or
   source and the config names), parameters (config or launch names as Triton's tutorials,
   Inductor and kernel libraries spell them), problem sizes (args named like the family's
   sizes, a ``problem=`` mapping, tensor and TensorDescriptor shapes), dtype (the input
   operand's). Cannot tell, or a kernel of another kind -> keep all configs.
2. Pick the model (``model.registry``; trust in ``tune.ranking``): missing, unreadable,
   another feature schema, or not trained on this family -> keep all configs.
3. Doubts: a kernel declared as a family it does not read as (or of an unknown family),
   another GPU or triton version, sizes more than ``range_margin`` octaves outside the
   training range, an unseen dtype, an unfamiliar grid, a model needing compiled features
   without ``two_stage``, a kernel source a static+src model cannot read -> rank, benchmark
   ``widen`` x k (None: all). Untrained config values (``tune.trained``) doubt those configs
   only: the k best-ranked trained ones are kept, plus each untrained one above them.
4. Rank by static (and source) features; ties by config key. Configs differing only in
   knobs the model does not know take one slot each while distinct ones remain
   (``tune.knobs``). ``two_stage=True`` re-ranks a shortlist by compiled features.

Each fallback warns once per kernel (``CosttuneWarning``), after the decision is made and
where a filter that turns warnings into errors (``python -W error``) cannot escape: such a
warning goes to the ``costtune`` logger instead. The result is never empty and nothing here
stops tuning: an unexpected error keeps all configs that can launch, with a warning.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from costtune.evaluate.metrics import rank_positions
from costtune.features.pipelining import dot_stages
from costtune.hardware import current
from costtune.tune import feasibility
from costtune.tune.decision import (
    PruneDecision,
    check_options,
    config_key,
    distinct,
    keep_count,
    keep_launchable,
    key_notes,
    tie_keys,
    warn_once,
    with_hooks,
)
from costtune.tune.kind import calling_tuner
from costtune.tune.knobs import knob_message, knob_split, spread_order
from costtune.tune.launch import (
    LaunchSpec,
    NotApplicable,
    ProblemSpec,
    call_args,
    describe,
    launched_values,
    rule_values,
    values_key,
)
from costtune.tune.launchable import after_prune
from costtune.tune.precompile import parse_precompile
from costtune.tune.preload import preload as start_preload
from costtune.tune.preload import wait as wait_for_preload
from costtune.tune.user_filter import user_filtered
from costtune.types import CosttuneWarning

__all__ = ["ConfigPruner", "CosttuneWarning", "PruneDecision", "keep_count",
           "prune_configs_by"]


class ConfigPruner:
    """The ``early_config_prune`` callable; build it with ``prune_configs_by``.

    ``last`` holds the latest call's ``PruneDecision``.
    """

    def __init__(self, *, model: Any, top_k: int | float, spec: LaunchSpec, two_stage: bool,
                 shortlist: int, stage2_model: Any, widen: int | None,
                 range_margin: float | None, workers: int | None,
                 cache_dir: str | os.PathLike | None, precompile: bool | int | str = True,
                 stage1_weight: float | None = None,
                 early_config_prune: Callable[..., Any] | None = None) -> None:
        check_options(top_k=top_k, shortlist=shortlist, widen=widen, range_margin=range_margin,
                      stage1_weight=stage1_weight, early_config_prune=early_config_prune)
        parse_precompile(precompile)
        spec.check()
        # The user's own filter (tutorial 06 drops BLOCK_M > N_CTX): run first, as Triton
        # would, on every call; the model ranks only what it keeps.
        self.user_prune = early_config_prune
        self.model, self.top_k, self.spec = model, top_k, spec
        self.two_stage, self.shortlist = bool(two_stage), int(shortlist)
        self.stage2_model, self.stage1_weight = stage2_model, stage1_weight
        self.widen = None if widen is None else int(widen)
        self.range_margin, self.workers, self.cache_dir = range_margin, workers, cache_dir
        self.last: PruneDecision | None = None
        # (survivors, named_args, kwargs, family) -> precompile counts, run after pruning;
        # None: under plain triton.autotune the survivors are precompiled (``precompile``).
        self.after_prune: Callable[..., tuple[int, int] | None] | None = None
        self.precompile = precompile
        # The autotuned kernel (its name and source say what it computes); None: the
        # Autotuner calling this pruner, found up the call stack.
        self.kernel: Any = None
        # costtune.autotune(learn=True) sets this: the kernel's own model folder, preferred
        # when it holds a model learned from ``model`` (``model.learned``).
        self.kernel_dir: Any = None
        self.adaptive = False  # costtune.autotune's adaptive budget: warnings say "up to"
        self._warned: dict[int, set[str]] = {}  # per kernel: one dict may serve several
        # Triton passes the same configs list on every call: keys and family params of that
        # list are computed once.
        self._configs: Sequence[Any] | None = None
        self._keys = self._ties = np.zeros(0, dtype=object)
        self._dedupe: list[str] = []
        self._params: dict[str, tuple] = {}
        self._refused: dict[int, str] = {}
        self._traits: dict[str, np.ndarray] = {}
        self._compiled: dict = {}
        self._tuned: Any = None  # the kernel of the latest call (its source is described)
        self._args: dict[str, Any] = {}  # the latest call's arguments (stage 2 compiles them)

    def __call__(self, configs: Sequence[Any], named_args: Mapping[str, Any],
                 **kwargs: Any) -> list[Any]:
        start = time.perf_counter()
        tuner = self.kernel or calling_tuner()
        notes: list[tuple[str, str]] = key_notes(tuner)
        self._launch_keys: list[str] = []  # set where triton.heuristics change configs
        given, barred = configs, set()
        if self.user_prune is not None:
            configs, barred = user_filtered(self.user_prune, configs, named_args, kwargs)
            self._configs = None  # it may have changed configs in place: keys read afresh
        try:
            wait_for_preload()  # a model still loading in the background: let it finish first
            decision, order = self._prune(configs, named_args, kwargs, notes, barred)
        except Exception as exc:  # never stop tuning: benchmark all that can launch instead
            notes.append(("error", f"pruning failed ({type(exc).__name__}: {exc})"))
            decision, order = keep_launchable(configs, notes, barred=barred)
        decision.filtered = max(0, len(barred) + len(given) - len(configs))
        decision.configs = configs if configs is not given else None
        same = self._launch_keys if len(self._launch_keys) == len(configs) else None
        self.config_keys(configs)  # (the user's filter may have changed the list)
        order, decision.duplicates = distinct(order, with_hooks(same, configs) if same
                                              else self._dedupe)
        if decision.duplicates:  # a repeated config takes one slot, not several
            decision.k = min(decision.k, len(order))
            decision.kept = [self._keys[i] for i in order[: decision.k]]
        kept = [configs[i] for i in order[: decision.k]]
        decision.ranked = [int(i) for i in order]
        decision.fallbacks = list(dict.fromkeys(c for c, _ in notes))
        decision.notes = list(dict.fromkeys(notes))
        upto = "up to " if self.adaptive else ""  # the loop may stop early
        # Once per kernel and reason: one prune_configs_by(...) dict may serve several kernels.
        warned = self._warned.setdefault(id(tuner), set())
        decision.warnings = warn_once(warned, notes,
                                      f"benchmarking {upto}{len(kept)} of {len(configs)} configs")
        decision.elapsed_ms = (time.perf_counter() - start) * 1e3
        kept = after_prune(self, configs, order, kept, decision, named_args, kwargs)
        self.last = decision
        return kept

    def config_keys(self, configs: Sequence[Any]) -> np.ndarray:
        """Canonical keys of ``configs``; with them, once per list, the tie-break keys
        (``decision.tie_keys``) and the keys that tell duplicates (``decision.with_hooks``)."""
        if self._configs is not configs or len(self._keys) != len(configs):
            self._keys = np.array([config_key(c) for c in configs], dtype=object)
            self._ties = tie_keys(configs)
            self._dedupe = with_hooks(self._keys, configs)
            self._configs, self._params = configs, {}
            self._refused = feasibility.refuse_options(configs)
            self._traits = feasibility.launch_traits(configs)
        return self._keys

    def _family_params(self, launch: Any, configs: Sequence[Any]
                       ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray], dict[int, str]]:
        """``feasibility.family_table`` of the configs, kept while Triton passes the same
        config list and the launch fixes (and its rules set) the same parameters."""
        self.config_keys(configs)
        ruled = rule_values(launch, configs) if launch.rules else None
        key = (launch.family, *launch.rename.items(), *sorted(launch.meta.items()),
               *(() if ruled is None else map(repr, ruled[0])))
        if key not in self._params:
            self._params[key] = feasibility.family_table(launch, configs, self._refused,
                                                         ruled=ruled)
        return self._params[key]

    def _prune(self, configs: Sequence[Any], named_args: Mapping[str, Any],
               kwargs: dict[str, Any], notes: list[tuple[str, str]], barred: set[int]
               ) -> tuple[PruneDecision, np.ndarray]:
        from costtune.tune.ranking import concerns, covers, load_noted, uses_compiled

        n = len(configs)
        keys = self.config_keys(configs)
        allowed = np.array([i for i in range(n) if i not in barred], dtype=int)

        def keep_allowed() -> tuple[PruneDecision, np.ndarray]:
            return PruneDecision(n, len(allowed), [keys[i] for i in allowed]), allowed

        refused = {i: why for i, why in self._refused.items() if i not in barred}
        alive = np.array([i for i in allowed if i not in refused], dtype=int)
        if not len(alive):
            notes.append(("infeasible", "no config's launch options can run ("
                          f"{feasibility.summary(configs, refused)}); keeping them all"))
            return keep_allowed()

        def keep_alive() -> tuple[PruneDecision, np.ndarray]:
            decision = PruneDecision(n, len(alive), [keys[i] for i in alive])
            decision.dropped = feasibility.dropped(configs, refused)
            return decision, alive

        if refused:
            notes.append(("infeasible", feasibility.summary(configs, refused)))
        if len(alive) <= 1:
            return keep_alive()
        args = self._args = call_args(named_args, kwargs)
        try:
            self._tuned = self.kernel or calling_tuner()
            launch = describe(self.spec, [configs[i] for i in alive], args=args,
                              kernel=self._tuned, grid=kwargs.get("grid"))
            params, columns, invalid = self._family_params(launch, configs)
        except NotApplicable as exc:
            notes.append((exc.category, str(exc)))
            return keep_alive()
        live = set(alive.tolist())
        more = {i: why for i, why in invalid.items() if i in live}
        ok = np.array([i for i in alive if i not in invalid], dtype=int)
        traits = (self._traits if not launch.rules else  # rules may set warp_specialize
                  feasibility.launch_traits(configs, launched_values(launch, configs)))
        more.update(feasibility.over_limit_at(launch, columns, ok, args=args, traits=traits,
                                              target=current(), stages=dot_stages(self._tuned)))
        if more:
            refused.update(more)
            if len(refused) == len(allowed):
                notes.append(("infeasible", "every config looks unable to launch ("
                              f"{feasibility.summary(configs, refused)}); keeping them all"))
                return keep_allowed()
            alive = np.array([i for i in alive if i not in refused], dtype=int)
            notes.append(("infeasible", feasibility.summary(configs, refused)))
        try:
            model, note = load_noted(self.model, launch.family, kernel_dir=self.kernel_dir,
                                     compact=True)
        except Exception as exc:
            notes.append(("model", f"no usable cost model {self.model!r} "
                          f"({type(exc).__name__}: {exc})"))
            return keep_alive()
        if note:
            notes.append(("model", note))
        if not covers(model, launch.family):
            notes.append(("model", f"cost model {self.model!r} was trained on "
                          f"{model.families_}, not {launch.family}"))
            return keep_alive()
        doubts = [*launch.doubts, *concerns(model, launch, range_margin=self.range_margin)]
        if uses_compiled(model) and not self.two_stage:
            doubts.append(("features", f"cost model {self.model!r} needs compiled features; "
                           "without two_stage=True it ranks with them missing"))
        decision, order = self._rank(model, launch, configs, alive, params, columns, doubts,
                                     refused, notes)
        decision.model = getattr(model, "learned_path_", None) or str(self.model)[:80]
        return decision, order

    def _rank(self, model: Any, launch: Any, configs: Sequence[Any], alive: np.ndarray,
              params: list[dict],
              columns: dict[str, np.ndarray], doubts: list[tuple[str, str]],
              refused: dict[int, str], notes: list[tuple[str, str]]
              ) -> tuple[PruneDecision, np.ndarray]:
        """Score the configs that can launch, widen k on doubts, spread untold knobs."""
        from costtune.features.source import attach_source
        from costtune.features.static import static_features_for
        from costtune.tune.ranking import score, uses_source
        from costtune.tune.trained import hook_order

        n, keys = len(configs), self.config_keys(configs)
        live = [params[i] for i in alive]
        features = static_features_for(launch.family, launch.problem, launch.dtype, live,
                                       columns={c: v[alive] for c, v in columns.items()},
                                       programs_cap=launch.programs_cap)
        if uses_source(model):  # what the kernel's source does (features.source)
            features, unread = attach_source(features, self._tuned)
            doubts = [*doubts, *unread]
        live_scores = score(model, features)
        sub_order = rank_positions(live_scores, self._ties[alive])
        launched = launched_values(launch, configs)  # what rules leave of config values
        if launched is not None:  # configs that launch alike are benchmarked once
            self._launch_keys = [values_key(v) for v in launched]
        # Per call: the parameters seen (fixed by the launch, set by rules) may change.
        known, unknown, knobs = knob_split(configs, params, values=launched)
        if knobs:
            sub_order = spread_order(sub_order, known_keys=[known[i] for i in alive],
                                     unknown_keys=[unknown[i] for i in alive])
            notes.append(("knobs", knob_message(knobs)))
        k0 = min(keep_count(self.top_k, n), len(alive))
        cap = len(alive) if self.widen is None else min(len(alive), k0 * self.widen)
        k = cap if doubts else k0  # a doubt on the whole launch widens every slot
        notes.extend(doubts)

        def untrained(order: np.ndarray) -> tuple[np.ndarray, int, list[tuple[str, str]]]:
            if self.range_margin is None:  # config values never trained on
                return order, k0, []
            return hook_order(launch.family, {c: v[alive] for c, v in columns.items()},
                              features["elems_per_thread"].to_numpy(), order, k=k0, cap=cap,
                              problem=launch.problem, waves=features["waves"].to_numpy())

        sub_order, grown, doubt = untrained(sub_order)
        k = max(k, grown)
        notes.extend(doubt)
        order = alive[sub_order]
        scores = np.full(n, np.nan)
        scores[alive] = live_scores
        decision = PruneDecision(n, k, [], launch.family, launch.problem, launch.dtype, scores)
        decision.dropped = feasibility.dropped(configs, refused)
        decision.knobs = knobs
        if self.two_stage and k < len(alive):
            from costtune.tune.stage2 import rerank

            sub_order = rerank(self, launch, live, features, self._ties[alive], sub_order,
                               decision, notes, live_scores, [configs[i] for i in alive])
            if knobs:  # stage 2 scores variants alike too
                sub_order = spread_order(sub_order, known_keys=[known[i] for i in alive],
                                         unknown_keys=[unknown[i] for i in alive])
            sub_order, grown, _ = untrained(sub_order)
            order = alive[sub_order]
            k = decision.k = max(k, grown)  # the new order's trusted k
        decision.kept = [keys[i] for i in order[:k]]
        return decision, order


def prune_configs_by(model: Any = "h200", top_k: int | float = 8, *, family: str | None = None,
                     problem: ProblemSpec = None, params: Mapping[str, str] | None = None,
                     dtype: str | None = None, two_stage: bool = False, shortlist: int = 32,
                     stage2_model: Any = None, stage1_weight: float | None = None,
                     widen: int | None = 4,
                     range_margin: float | None = 1.0, workers: int | None = None,
                     cache_dir: str | os.PathLike | None = None,
                     preload: bool = True, trust_family: bool = False,
                     precompile: bool | int | str = True,
                     early_config_prune: Callable[..., Any] | None = None) -> dict[str, Any]:
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
    beyond the training sizes still trusted (None: no check, of sizes or of config values).
    Configs that cannot launch are dropped before ranking (``tune.feasibility``); replacing a
    kept config that fails anyway, and ``check=``, need ``costtune.autotune``, which owns the
    benchmark loop. ``preload``: load the model from now, in a thread (``tune.preload``).
    ``precompile``: under plain ``triton.autotune``, compile the kept configs in parallel
    before Triton benchmarks them (GPU only; a ``pre_hook`` runs first, on copied
    descriptors): True (forked processes on Linux, else threads, one per core),
    "processes", "threads", an int (that many threads) or False (one by one as Triton does).
    ``early_config_prune``: your own filter, ``fn(configs, named_args, **kwargs) -> configs``
    as Triton's ``prune_configs_by`` takes it (tutorial 06 drops BLOCK_M > N_CTX); it runs
    first on every call and the model ranks only the configs it keeps.

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
                          shortlist=shortlist, stage2_model=stage2_model,
                          stage1_weight=stage1_weight, widen=widen,
                          range_margin=range_margin, workers=workers, cache_dir=cache_dir,
                          precompile=precompile, early_config_prune=early_config_prune)
    if preload:
        start_preload(model, family, two_stage=two_stage, stage2_model=stage2_model)
    return {"early_config_prune": pruner}
