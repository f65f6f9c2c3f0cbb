"""The benchmark loop of ``SafeAutotuner`` (``tune.tuner``): configs tried one at a time as
the parallel precompile finishes them, failures recorded, outputs judged by the guard, and the
adaptive loop over the pruner's ranking (``tune.adaptive``). A failure is one config's and
replaced, except an error that configs across the list's values share while none ran
(``kernel_error``: a bug in the kernel or its call), which reaches the user, as under
exhaustive tuning where it ends the first; Triton's per-config errors (OutOfResources,
compile-time assertions, ptxas errors) never do."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from triton.runtime.autotuner import Autotuner

from costtune.tune.decision import config_key
from costtune.tune.feasibility import config_text, finite_time, vote_key
from costtune.tune.guard import MIN_VOTERS, CheckError, OutputGuard

__all__ = ["ALIKE_ERROR_STOP", "SAME_ERROR_STOP", "Trying", "error_keys", "kernel_error",
           "values_of"]

# Fewest configs failing with one error, none having run, before it is raised.
SAME_ERROR_STOP = 3
ALIKE_ERROR_STOP = 8  # the same, for messages alike but for the failing configs' values
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_WHOLE = re.compile(r"(?<![\w.])\d+(?![\w.])")


def error_keys(exc: BaseException, config: Any = None) -> list[tuple[tuple, int]]:
    """[(key, how many configs failing with it make it the kernel's)] for a failure that may
    be the kernel's or its call's: its exact message (addresses out) at ``SAME_ERROR_STOP``,
    and, where the failing ``config``'s own values appear in it, the message without them at
    ``ALIKE_ERROR_STOP`` (one bug's message names each config's tile: "... 256 and 128",
    "... 512 and 128"; more of them are asked for, since a message naming values can also be
    an error confined to some values, a product of two matching a third). [] for Triton's
    per-config errors (OutOfResources, compile-time assertions, ptxas errors, anywhere in
    the exception's chain), which Triton's own benchmark reads as one config's limits, and
    for an error that cannot be printed."""
    from triton.compiler.errors import CompileTimeAssertionFailure
    from triton.runtime.errors import OutOfResources, PTXASError

    seen, link = 0, exc
    while link is not None and seen < 16:
        if isinstance(link, (OutOfResources, CompileTimeAssertionFailure, PTXASError)):
            return []
        link, seen = link.__cause__ or link.__context__, seen + 1
    try:
        text = _ADDRESS.sub("#", str(exc))
    except Exception:  # noqa: BLE001 - an unprintable error is no evidence
        return []
    name = type(exc).__name__
    keys = [(("same", name, text), SAME_ERROR_STOP)]
    own = {str(v) for v in (values_of(config).values() if config is not None else ())
           if isinstance(v, int) and not isinstance(v, bool)}
    alike = _WHOLE.sub(lambda m: "#" if m.group() in own else m.group(), text)
    if alike != text:
        keys.append((("alike", name, alike), ALIKE_ERROR_STOP))
    return keys


def values_of(config: Any) -> dict[str, Any]:
    """A config's values as its launch passes them (kwargs, num_warps, num_stages)."""
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def kernel_error(failed: Sequence[Any], pool: Sequence[Any], *,
                 least: int = SAME_ERROR_STOP) -> bool:
    """Whether configs ``failed`` with one error can only be the kernel's or its call's: at
    least ``least`` of them, and every parameter that varies in ``pool`` (the config list)
    takes two values or more among them. A failure confined to one value (a pass that fails
    on warp-specialized loops, an assertion on BLOCK_K = 64) is one value's, and replacing
    goes on."""
    if len(failed) < least:
        return False
    listed = [values_of(c) for c in pool]
    seen = [values_of(c) for c in failed]
    names = {k for v in listed for k in v}
    varying = [n for n in names if len({repr(v.get(n)) for v in listed}) > 1]
    return bool(varying) and all(len({repr(v.get(n)) for v in seen}) > 1 for n in varying)


class Trying:
    """Mixin of ``SafeAutotuner``'s benchmark loop (it needs the ``Autotuner`` attributes)."""

    def _adapt(self, kept: list[Any], args: tuple, kwargs: dict, *, ran: list[Any],
               failed: dict[str, str], guard: OutputGuard | None, reserve: list[Any]) -> None:
        """The adaptive loop (``tune.adaptive.search``) over every config the pruner ranked,
        capped at the ``k`` it kept (``max_configs``, widened under doubts, where the model's
        confidence is not trusted and all ``k`` run). Configs that differ from a better-ranked
        one only in knobs the model does not know come after every distinct one (the model
        cannot tell them apart, so they cannot confirm or refute it); with ``check`` a wrong
        output counts as a failure (replaced, not counted, never a reason to stop)."""
        from costtune.tune.adaptive import margin_for, neighbour_finder, search

        decision = self._decision()
        pool = decision.configs or self.configs
        order = [pool[i] for i in decision.ranked]
        knobs = set(getattr(decision, "knobs", None) or ())
        values = [{k: v for k, v in {**c.kwargs, "num_warps": c.num_warps,
                                     "num_stages": c.num_stages}.items() if k not in knobs}
                  for c in order]
        seen: set[tuple] = set()
        scores = []
        for i, v in zip(decision.ranked, values, strict=True):
            key = tuple(sorted((k, repr(x)) for k, x in v.items()))
            scores.append(float(decision.scores[i]) if key not in seen else float("nan"))
            seen.add(key)
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
            if guard is not None:  # enough voters to judge it now
                self._vote(guard, reserve, args, kwargs)
                if vote_key(config) in guard.judge():
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
        for config, outcome, error in self._compiled(pending, kwargs, first=first):
            text = config_text(config)
            if outcome in ("failed", "too_big"):
                failed[text] = ("does not fit in shared memory" if outcome == "too_big"
                                else "failed to compile")
                if error is not None:
                    self._same_error(error, config, ran)
                continue
            try:
                timing = Autotuner._bench(self, *args, config=config, **kwargs)
            except Exception as exc:  # e.g. a compiler pass that fails for this config only
                failed[text] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
                self._same_error(exc, config, ran)
                continue
            if not finite_time(timing):
                failed[text] = "failed to compile or launch (OutOfResources or a compile error)"
                continue
            self._timed[id(config)] = timing
            ran.append(config)
            if guard is not None and vote_key(config) not in guard.records:
                self._judge(guard, config, args, kwargs, quiet=False)

    def _same_error(self, exc: BaseException, config: Any, ran: list[Any]) -> None:
        """Raise ``exc`` once, with no config run, it is the kernel's or its call's
        (``kernel_error``: configs across the list's values failed with it), which no
        replacement mends (exhaustive tuning raises it at the first)."""
        errors = self.__dict__.setdefault("_errors", {})
        decision = self._decision()
        pool = getattr(decision, "configs", None) or self.configs
        for key, least in error_keys(exc, config):
            errors.setdefault(key, []).append(config)
            if not ran and kernel_error(errors[key], pool, least=least):
                raise exc

    def _vote(self, guard: OutputGuard, reserve: list[Any], args: tuple, kwargs: dict) -> None:
        """Launch more configs (untimed, not removed from the reserve) until there are enough
        voters and a majority, or four extra voters ran."""
        extra = 0
        for config in reserve:
            if len(guard.records) >= MIN_VOTERS and (guard.decided or extra >= 4):
                return
            if vote_key(config) not in guard.records:
                extra += self._judge(guard, config, args, kwargs, quiet=True)

    def _judge(self, guard: OutputGuard, config: Any, args: tuple, kwargs: dict, *,
               quiet: bool) -> bool:
        """Launch ``config`` once for ``guard`` (its outputs read before the post_hook); with
        ``quiet`` a config that cannot launch says nothing (False). A reference that cannot
        be compared is the user's to hear, always."""
        try:
            guard.record(vote_key(config),
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
                  ) -> Iterator[tuple[Any, str | None, BaseException | None]]:
        """(config, the precompile's outcome (None: not precompiled), the compile's error
        when it failed) for every config, as
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
                        yield configs[i], outcome, batch.errors.get(i)
        except Exception:  # precompiling only saves time: the benchmark compiles the rest
            pass
        finally:
            decision = self._decision()
            if batch is not None and first and decision is not None:
                decision.precompiled = (batch.compiled, len(configs))
                decision.precompile_ms = batch.waited_s * 1e3
        for i, config in enumerate(configs):
            if i not in given:
                yield config, None, None
