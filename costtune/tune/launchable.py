"""The plain hook's guarantee under ``triton.autotune``: nothing it keeps fails to launch.

Triton launches a single kept config without benchmarking it (and benchmarks several with
OutOfResources timed as inf), so a kept config that cannot launch would raise where exhaustive
tuning works. The hook's static check of shared memory cannot see everything a user's kernel
stages there (a TMA epilogue's C tile), so the kept configs are compiled first (the parallel
precompile, ``tune.precompile``) and one that fails or does not fit is replaced by the next
in ranked order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["after_prune", "launchable"]


def after_prune(pruner: Any, configs: Sequence[Any], order: Any, kept: list[Any],
                decision: Any, named_args: Mapping[str, Any], kwargs: dict[str, Any]
                ) -> list[Any]:
    """What the pruner does once it chose ``kept``: ``costtune.autotune``'s precompile
    (``pruner.after_prune``) or, under plain ``triton.autotune``, the parallel precompile with
    replacement of what cannot launch (``launchable``); ``decision.precompile_ms`` its time.
    Precompiling only saves time: where it fails, Triton compiles what it lacks."""
    import time

    from costtune.tune.kind import calling_tuner
    from costtune.tune.precompile import precompiler

    after, plain = pruner.after_prune, False
    if after is None and pruner.precompile is not False:
        after, plain = precompiler(calling_tuner(), pruner.precompile), True
    if after is None:
        return kept
    start = time.perf_counter()
    try:
        if plain:  # under plain triton.autotune: nothing that cannot launch is kept
            kept = launchable(after, configs, order, kept, decision, named_args, kwargs,
                              keys=pruner._keys)
        else:
            decision.precompiled = after(kept, named_args, kwargs, decision.family)
    except Exception:  # noqa: BLE001
        pass
    decision.precompile_ms = (time.perf_counter() - start) * 1e3
    return kept


def launchable(run: Callable[..., Any], configs: Sequence[Any], order: Any, kept: list[Any],
               decision: Any, named_args: Mapping[str, Any], kwargs: dict[str, Any], *,
               keys: Any) -> list[Any]:
    """Precompile ``kept`` (``run``: the precompiler) and replace each config whose compile
    fails or needs more shared memory than this GPU has by the next in ranked order
    (compiled in turn), as ``costtune.autotune`` replaces what fails: Triton launches a
    single kept config without benchmarking it, and would raise. The kept list as it
    stands when nothing can be told (no GPU: the precompile is skipped). ``keys``: the
    configs' canonical keys (``decision.kept`` is rewritten with them). Replacing stops
    when none compiled and compiles across the list's values failed with one error
    (``trying.kernel_error``): the kernel's or its call's, which Triton then raises, as
    exhaustive tuning would at the first."""
    from costtune.tune.feasibility import config_text
    from costtune.tune.trying import error_keys, kernel_error

    good: list[int] = []
    queue = [int(i) for i in order]
    want, compiled, submitted = len(kept), 0, 0
    shared: dict = {}  # failed compiles by error: the kernel's own stops replacing
    while len(good) < want and queue and not (
            not good and any(kernel_error(f, configs, least=n) for f, n in shared.values())):
        batch, queue = queue[: want - len(good)], queue[want - len(good):]
        outcomes: list = []
        errors: dict = {}
        counts = run([configs[i] for i in batch], named_args, kwargs, decision.family,
                     outcomes=outcomes, errors=errors)
        for j, error in errors.items():
            for key, least in error_keys(error, configs[batch[j]]):
                shared.setdefault(key, ([], least))[0].append(configs[batch[j]])
        if counts is None:  # not compiled here: keep them, Triton compiles as it would
            good += batch
            break
        compiled, submitted = compiled + counts[0], submitted + counts[1]
        outcomes += [None] * (len(batch) - len(outcomes))  # untold: as if it launches
        for i, outcome in zip(batch, outcomes, strict=False):
            if outcome in ("failed", "too_big"):
                decision.replaced[config_text(configs[i])] = (
                    "does not fit in shared memory" if outcome == "too_big"
                    else "failed to compile")
            else:
                good.append(i)
    if submitted:
        decision.precompiled = (compiled, submitted)
    if not good:  # nothing launches: Triton meets and reports the failure itself
        return kept
    if len(keys) == len(configs):
        decision.kept = [keys[i] for i in good]
    decision.k = len(good)
    return [configs[i] for i in good]
