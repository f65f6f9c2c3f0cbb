"""``SafeAutotuner``: Triton's ``Autotuner`` whose tuning never ends on a config that fails.

Triton 3.6 benchmarks the pruned list in ``run`` and turns OutOfResources, compile-time
assertions and ptxas errors into infinite times (``Autotuner._bench``); if the fastest of them
is infinite it launches it anyway and the error reaches the user. Here ``prune_configs``
(called by ``run`` once per new tuning key) benchmarks the kept configs itself, in rank order:

- a kept config that fails to compile, does not fit (the parallel precompile reads its
  shared memory before any launch), benchmarks as infinite or raises (a compiler pass that
  fails for this config; exhaustive tuning would stop there) is replaced by the next-ranked
  config (``PruneDecision.ranked``), until ``k`` configs ran or none are left;
- with ``check``, each config that ran is launched once more on the call's inputs and its
  outputs compared (``tune.guard``); a wrong one cannot win and is replaced the same way;
- ``run`` then "benchmarks" only the configs that ran and were right, reading back the times
  measured here, so Triton picks among them as usual (``configs_timings``, ``best_config``).

With an adaptive budget (``budget=`` on ``costtune.autotune``, ``tune.adaptive``) the configs
are benchmarked one at a time in the pruner's order, stopping when the model is confident and
extending along the measured best's neighbours when the measurements disagree with it, up to
the cap; failing configs are replaced the same way. With ``learn=True`` each tuning updates the
kernel's own model (``tune.learn``), which the pruner ranks with from then on.

If nothing can run, the kept list is returned unchanged and Triton fails exactly as exhaustive
tuning would (the same error reaches the user). ``warmup`` keeps Triton's behaviour. With
``cache_results=True`` Triton's disk cache is keyed by the pruner's kept list (the same in every
process: rank order, ties by config key) and looked up before anything is benchmarked; a hit
benchmarks nothing. Before that, the kept list itself is looked up on disk (``tune.kept_cache``,
keyed by everything that decides it); a hit skips the pruner (no model load, no ranking) and
``kept_from_cache`` says so. If Triton's timings are then missing, the kept configs are
benchmarked without replacements (there is no ranking to take them from). ``ranks="rank0"``:
rank 0 tunes, the other ranks take its choice (``tune.ranks``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from triton.runtime.autotuner import Autotuner

from costtune.tune.decision import config_key, tuning_report, warn
from costtune.tune.feasibility import shown, vote_key
from costtune.tune.guard import CheckSpec, OutputGuard
from costtune.tune.ranks import check_ranks, choice, config_from, tuning_key, world
from costtune.tune.trying import Trying

__all__ = ["SafeAutotuner"]

_NOT_ARGS = ("grid", "warmup")


class SafeAutotuner(Trying, Autotuner):
    """``Autotuner`` with replacement of failing configs and the optional output check;
    built by ``costtune.autotune``. ``rejected`` maps a config's text to why it was not
    eligible in the latest tuning call."""

    def __init__(self, *args: Any, check: CheckSpec | None = None,
                 precompile_threads: int | None | bool = True, budget: Any = None,
                 learner: Any = None, ranks: str = "each", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if getattr(self.early_config_prune, "kernel", False) is None:  # its own pruner
            self.early_config_prune.kernel = self  # known also when called directly
        self.check, self.precompile_threads = check, precompile_threads
        self.budget, self.learner = budget, learner
        self.ranks = check_ranks(ranks)
        self._kwargs: dict | None = None  # the tuning call's kwargs, for check_disk_cache
        self._from_disk = False
        self.adaptive: Any = None  # the latest adaptive loop's AdaptiveResult
        self.rejected: dict[str, str] = {}
        self._tuning = False
        # cache_results: whether the latest tuning's kept list came from disk
        # (``tune.kept_cache``); None when that cache was not used.
        self.kept_from_cache: bool | None = None
        self._kept_hit = False
        self._timed: dict[int, Any] = {}
        self._warned: set[str] = set()
        self._tune_s = 0.0  # seconds the latest _tune took, added to Triton's bench_time

    @property
    def bench_time(self) -> float:
        """Seconds the latest tuning benchmarked (Triton's log line, a harvest's ``bench_s``):
        Triton times its read-back of ``_tune``'s times, to which ``_tune``'s own is added."""
        return self._bench_time

    @bench_time.setter
    def bench_time(self, value: float) -> None:
        self._bench_time, self._tune_s = float(value) + self._tune_s, 0.0

    def run(self, *args: Any, **kwargs: Any) -> Any:
        dist = world() if self.ranks == "rank0" and len(self.configs) > 1 else None
        if dist is not None:
            key = tuning_key(self.arg_names, self.keys, args, kwargs)
            if key not in self.cache:
                return self._run_rank0(dist, key, args, kwargs)
        return self._run(*args, **kwargs)

    def _run_rank0(self, dist: Any, key: tuple, args: tuple, kwargs: dict) -> Any:
        """Rank 0 tunes ``key`` and broadcasts its choice; the other ranks launch it."""
        box: list[Any] = [None]
        if dist.get_rank() == 0:
            try:
                return self._run(*args, **kwargs)
            finally:  # also when tuning failed: the other ranks must not wait forever
                box[0] = choice(self.cache.get(key), self.configs)
                dist.broadcast_object_list(box, src=0)
        dist.broadcast_object_list(box, src=0)
        if box[0] is None:
            raise RuntimeError(f"costtune: rank 0 chose no config for key {key} (its tuning "
                               "failed; see rank 0's error)")
        self.cache[key] = config_from(box[0], self.configs)
        return self._run(*args, **kwargs)  # a cache hit: launches without benchmarking

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        self._tuning, self._from_disk = True, False
        before = getattr(self, "configs_timings", None)
        if self.learner is not None and getattr(self.early_config_prune, "kernel_dir",
                                                 None) is None and self.learner.learns:
            self.early_config_prune.kernel_dir = self.learner.folder()
        try:
            out = super().run(*args, **kwargs)
        finally:  # a tuning that raised leaves no time for the next one's bench_time
            self._tuning, self._timed, self._kwargs, self._tune_s = False, {}, None, 0.0
        timings = getattr(self, "configs_timings", None)
        if (self.learner is not None and timings is not None and timings is not before
                and not self._from_disk):
            self.learner.record(self, args, kwargs)
        return out

    def _bench(self, *args: Any, config: Any, **meta: Any) -> Any:
        timed = self._timed.get(id(config))
        return timed if timed is not None else super()._bench(*args, config=config, **meta)

    def prune_configs(self, kwargs: dict) -> list[Any]:
        if not self._tuning or getattr(self, "nargs", None) is None:
            return super().prune_configs(kwargs)  # warmup(): compile what is kept, as Triton
        self.kept_from_cache, self._kept_hit = None, False
        if self.cache_results:  # tuned in check_disk_cache, on a miss only
            self._kwargs = kwargs
            return list(self._cached_prune(kwargs))
        return self._tune(super().prune_configs(kwargs), kwargs)

    def _cached_prune(self, kwargs: dict) -> list[Any]:
        """The kept list from disk (``tune.kept_cache``: the pruner does not run, no model
        loads), else the pruner's, then stored for later processes."""
        from costtune.tune import kept_cache

        key = kept_cache.key_for(self, kwargs)
        if key is None:
            return super().prune_configs(kwargs)
        kept = kept_cache.lookup(self, key)
        self.kept_from_cache = kept is not None
        if kept is not None:
            self._kept_hit = True
            self.early_config_prune.last = None  # no decision for this key: none was made
            return kept
        kept = super().prune_configs(kwargs)
        decision = self._decision()
        if decision is not None and "error" not in decision.fallbacks:
            kept_cache.store(self, key, kept)  # a failed pruning is not stored
        return kept

    def check_disk_cache(self, tuning_key: Any, configs: list[Any], bench_fn: Any) -> bool:
        """Triton's disk cache, keyed by the pruned list (``configs``, the pruner's kept
        configs in rank order: the same in every process); on a miss the kept configs are
        tuned here (replacements, check) and ``configs`` becomes the list that ran, which
        Triton's ``bench_fn`` then reads the times of."""
        kwargs = self._kwargs if self._kwargs is not None else {}

        def tune_then_bench() -> None:
            configs[:] = self._tune(list(configs), kwargs)
            bench_fn()

        self._from_disk = super().check_disk_cache(tuning_key, configs, tune_then_bench)
        if self._from_disk and self.check is not None:
            self._check_cached(tuning_key, kwargs)
        return self._from_disk

    def _check_cached(self, tuning_key: Any, kwargs: dict) -> None:
        """Times read from Triton's disk cache may come from a process that did not check:
        with ``check``, each config they hold is launched once and judged, and the fastest
        right one is chosen (nothing is benchmarked again)."""
        timings = dict(self.configs_timings)
        args = tuple(self.nargs.values())
        guard = OutputGuard(self.check, {**self.nargs, **{k: v for k, v in kwargs.items()
                                                          if k not in _NOT_ARGS}})
        try:
            for config in timings:
                self._judge(guard, config, args, kwargs, quiet=True)
        finally:
            guard.restore()
        wrong = guard.judge()
        good = {c: t for c, t in timings.items() if vote_key(c) not in wrong}
        self._report(list(timings), {}, wrong, list(good), guard.undecided())
        if good:
            self.configs_timings = good
            self.cache[tuning_key] = min(good, key=good.get)

    def _decision(self) -> Any:
        """The pruner's decision for the key being tuned; None after a kept-list cache hit
        (the pruner did not run: the kept configs are tuned without replacements)."""
        if self._kept_hit:
            return None
        return getattr(self.early_config_prune, "last", None)

    def _reserve(self, kept: Sequence[Any]) -> list[Any]:
        """Configs to replace failing ones with, best first: the pruner's ranking of every
        config that can launch, without those kept."""
        decision = self._decision()
        ranked = getattr(decision, "ranked", None) or []
        pool = getattr(decision, "configs", None) or self.configs
        ids = {id(c) for c in kept}
        return [pool[i] for i in ranked if id(pool[i]) not in ids]

    def _tune(self, kept: list[Any], kwargs: dict) -> list[Any]:
        start = time.perf_counter()
        self._errors = {}  # failed configs by error, this call (``Trying._same_error``)
        try:
            return self._tune_kept(kept, kwargs)
        finally:
            self._tune_s = time.perf_counter() - start

    def _tune_kept(self, kept: list[Any], kwargs: dict) -> list[Any]:
        args = tuple(self.nargs.values())
        call = {**self.nargs, **{k: v for k, v in kwargs.items() if k not in _NOT_ARGS}}
        guard = OutputGuard(self.check, call) if self.check is not None else None
        reserve, pending = self._reserve(kept), list(kept)
        ran: list[Any] = []
        failed: dict[str, str] = {}
        first = True
        adaptive = (self.budget is not None
                    and getattr(self._decision(), "scores", None) is not None)
        try:
            if adaptive:  # its cap may hold every config: voters come from the whole ranking
                voters = self._reserve([])
                self._adapt(kept, args, kwargs, ran=ran, failed=failed, guard=guard,
                            reserve=voters)
                if guard is not None:
                    self._vote(guard, voters, args, kwargs)
                pending = []
            while pending:
                self._try(pending, args, kwargs, ran=ran, failed=failed, guard=guard,
                          first=first)
                first = False
                if guard is not None:
                    self._vote(guard, reserve, args, kwargs)
                wrong = guard.judge() if guard is not None else {}
                missing = len(kept) - sum(vote_key(c) not in wrong for c in ran)
                pending, reserve = reserve[:max(0, missing)], reserve[max(0, missing):]
        finally:
            if guard is not None:
                guard.restore()
        wrong = guard.judge() if guard is not None else {}
        good = [c for c in ran if vote_key(c) not in wrong]
        self._report(ran if adaptive and ran else kept, failed, wrong, good,
                     guard.undecided() if guard is not None else "")
        decision = self._decision()
        if good and self.rejected and not adaptive and decision is not None:
            pool = decision.configs or self.configs  # what stood, in rank order
            rank = {id(pool[i]): r for r, i in enumerate(decision.ranked)}
            decision.kept = [config_key(c) for c in sorted(good, key=lambda c: rank.get(
                id(c), len(rank)))]
            decision.k = len(good)
        finite = [c for c in ran if guard is not None and guard.records.get(vote_key(c))]
        return good or finite or ran or kept

    def _report(self, kept: list[Any], failed: dict[str, str], wrong: dict[str, str],
                good: list[Any], undecided: str = "") -> None:
        wrong = {shown(k): why for k, why in wrong.items()}  # as the user reads the config
        self.rejected = {**failed, **{k: f"wrong output: {v}" for k, v in wrong.items()}}
        decision = self._decision()
        if decision is not None:
            decision.replaced = dict(self.rejected)
        text = tuning_report(len(kept), failed, wrong, len(good), undecided)
        # Rejected or undecided outputs are said every time; failures once per kernel.
        if text and (wrong or undecided or "failed" not in self._warned):
            self._warned.add("failed")
            if decision is not None:
                decision.warnings.append(text)
            warn(text)
