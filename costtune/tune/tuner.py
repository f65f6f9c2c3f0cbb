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
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from triton.runtime.autotuner import Autotuner

from costtune.tune.decision import config_key, tuning_report, warn
from costtune.tune.feasibility import config_text, finite_time
from costtune.tune.guard import MIN_VOTERS, CheckError, CheckSpec, OutputGuard
from costtune.tune.ranks import check_ranks, choice, config_from, tuning_key, world

__all__ = ["SafeAutotuner"]

_NOT_ARGS = ("grid", "warmup")


class SafeAutotuner(Autotuner):
    """``Autotuner`` with replacement of failing configs and the optional output check;
    built by ``costtune.autotune``. ``rejected`` maps a config's text to why it was not
    eligible in the latest tuning call."""

    def __init__(self, *args: Any, check: CheckSpec | None = None,
                 precompile_threads: int | None | bool = True, budget: Any = None,
                 learner: Any = None, ranks: str = "each", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
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
                box[0] = choice(self.cache.get(key))
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
        good = {c: t for c, t in timings.items() if config_text(c) not in wrong}
        self._report(list(timings), {}, wrong, list(good))
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
            if adaptive:
                self._adapt(kept, args, kwargs, ran=ran, failed=failed, guard=guard)
                if guard is not None:
                    self._vote(guard, reserve, args, kwargs)
                pending = []
            while pending:
                self._try(pending, args, kwargs, ran=ran, failed=failed, guard=guard,
                          first=first)
                first = False
                if guard is not None:
                    self._vote(guard, reserve, args, kwargs)
                wrong = guard.judge() if guard is not None else {}
                missing = len(kept) - sum(config_text(c) not in wrong for c in ran)
                pending, reserve = reserve[:max(0, missing)], reserve[max(0, missing):]
        finally:
            if guard is not None:
                guard.restore()
        wrong = guard.judge() if guard is not None else {}
        good = [c for c in ran if config_text(c) not in wrong]
        self._report(ran if adaptive and ran else kept, failed, wrong, good)
        finite = [c for c in ran if guard is not None and guard.records.get(config_text(c))]
        return good or finite or ran or kept

    def _adapt(self, kept: list[Any], args: tuple, kwargs: dict, *, ran: list[Any],
               failed: dict[str, str], guard: OutputGuard | None) -> None:
        """The adaptive loop (``tune.adaptive.search``) over every config the pruner ranked,
        capped at the ``k`` it kept (``max_configs``, widened under doubts, where the model's
        confidence is not trusted and all ``k`` run)."""
        from costtune.tune.adaptive import margin_for, neighbour_finder, search

        decision = self._decision()
        pool = decision.configs or self.configs
        order = [pool[i] for i in decision.ranked]
        scores = [float(decision.scores[i]) for i in decision.ranked]
        values = [{**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}
                  for c in order]
        doubted = any(cat not in ("infeasible", "knobs") for cat, _ in decision.notes)
        margin = None if doubted else margin_for(self.budget, decision.family)
        cap = max(1, len(kept))
        budget = replace(self.budget, max_configs=cap,
                         min_configs=min(self.budget.min_configs, cap))

        def measure(j: int) -> float:
            config = order[j]
            self._try([config], args, kwargs, ran=ran, failed=failed, guard=guard,
                      first=not ran and not failed)
            timing = self._timed.get(id(config))
            if timing is None:
                return float("inf")
            return float(timing[0] if isinstance(timing, (list, tuple)) else timing)

        self.adaptive = search(scores, measure, budget=budget, margin=margin,
                               neighbours=neighbour_finder(values))
        decision.k = len(self.adaptive.measured)
        decision.kept = [config_key(order[j]) for j in self.adaptive.measured]

    def _try(self, pending: list[Any], args: tuple, kwargs: dict, *, ran: list[Any],
             failed: dict[str, str], guard: OutputGuard | None, first: bool) -> None:
        """Benchmark ``pending``, each as soon as the parallel precompile has it (while the
        others still compile: in completion order, which the choice does not depend on)."""
        for config, outcome in self._compiled(pending, kwargs, first=first):
            text = config_text(config)
            if outcome in ("failed", "too_big"):
                failed[text] = ("does not fit in shared memory" if outcome == "too_big"
                                else "failed to compile")
                continue
            try:
                timing = Autotuner._bench(self, *args, config=config, **kwargs)
            except Exception as exc:  # e.g. a compiler pass that fails for this config only
                failed[text] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
                continue
            if not finite_time(timing):
                failed[text] = "failed to compile or launch (OutOfResources or a compile error)"
                continue
            self._timed[id(config)] = timing
            ran.append(config)
            if guard is not None and text not in guard.records:
                self._judge(guard, config, args, kwargs, quiet=False)

    def _vote(self, guard: OutputGuard, reserve: list[Any], args: tuple, kwargs: dict) -> None:
        """Launch more configs (untimed, not removed from the reserve) until there are enough
        voters and a majority, or four extra voters ran."""
        extra = 0
        for config in reserve:
            if len(guard.records) >= MIN_VOTERS and (guard.decided or extra >= 4):
                return
            if config_text(config) not in guard.records:
                extra += self._judge(guard, config, args, kwargs, quiet=True)

    def _judge(self, guard: OutputGuard, config: Any, args: tuple, kwargs: dict, *,
               quiet: bool) -> bool:
        """Launch ``config`` once for ``guard`` (its outputs read before the post_hook); with
        ``quiet`` a config that cannot launch says nothing (False). A reference that cannot
        be compared is the user's to hear, always."""
        try:
            guard.record(config_text(config),
                         lambda taken: self._launch_once(config, args, kwargs, taken))
        except CheckError:
            raise
        except Exception:
            if not quiet:
                raise
            return False
        return True

    def _launch_once(self, config: Any, args: tuple, kwargs: dict, taken: Any = None) -> None:
        """One launch of ``config`` with the hooks Triton's benchmark runs around it;
        ``taken()`` runs between the launch and the post_hook (which may restore outputs)."""
        current = dict(kwargs, **config.all_kwargs())
        full = {**self.nargs, **current}
        if config.pre_hook:
            config.pre_hook(full)
        self.pre_hook(full)
        exception = None
        try:
            self.fn.run(*args, **current)
            if taken is not None:
                taken()
        except Exception as exc:
            exception = exc
            raise
        finally:
            self.post_hook(full, exception=exception)

    def _compiled(self, configs: list[Any], kwargs: dict, *, first: bool
                  ) -> Iterator[tuple[Any, str | None]]:
        """(config, the precompile's outcome, None: not precompiled) for every config, as
        the parallel precompile finishes each (``tune.precompile.Batch``); in order when
        nothing is precompiled. The decision records the compiles and the time this thread
        waited for them (``precompile_ms``)."""
        from costtune.tune import precompile as module

        parsed = module.parse_precompile(self.precompile_threads)
        given: set[int] = set()
        batch = None
        try:
            if parsed is not None:
                mode, threads = parsed
                batch = module.start_batch(self, configs, named_args=self.nargs,
                                           kwargs=kwargs, threads=threads, mode=mode,
                                           min_configs=2 if first else 1)
            if batch is not None:
                with batch:
                    for i, outcome in batch:
                        given.add(i)
                        yield configs[i], outcome
        except Exception:  # precompiling only saves time: the benchmark compiles the rest
            pass
        finally:
            decision = self._decision()
            if batch is not None and first and decision is not None:
                decision.precompiled = (batch.compiled, len(configs))
                decision.precompile_ms = batch.waited_s * 1e3
        for i, config in enumerate(configs):
            if i not in given:
                yield config, None

    def _report(self, kept: list[Any], failed: dict[str, str], wrong: dict[str, str],
                good: list[Any]) -> None:
        self.rejected = {**failed, **{k: f"wrong output: {v}" for k, v in wrong.items()}}
        decision = self._decision()
        if decision is not None:
            decision.replaced = dict(self.rejected)
        text = tuning_report(len(kept), failed, wrong, len(good))
        # Rejected outputs are named every time; failures once per kernel.
        if text and (wrong or "failed" not in self._warned):
            self._warned.add("failed")
            if decision is not None:
                decision.warnings.append(text)
            warn(text)
