"""What one pruning call decided (``PruneDecision``), how many configs it keeps
(``keep_count``), and the warning that never raises (``warn``)."""

from __future__ import annotations

import logging
import math
import sys
import warnings
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

import numpy as np

from costtune.types import CosttuneWarning

__all__ = ["PruneDecision", "config_key", "distinct", "keep_count", "keep_launchable", "warn",
           "warn_once"]

log = logging.getLogger("costtune")


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
    # Whose kernel stage 2 compiled: "yours", or costtune's own and why yours was not.
    stage2_kernel: str | None = None
    stage2_model: str | None = None  # the stage-2 model used: a name, or the learned file
    fallbacks: list[str] = field(default_factory=list)  # categories that applied
    notes: list[tuple[str, str]] = field(default_factory=list)  # (category, message) of each
    precompiled: tuple[int, int] | None = None  # (compiled, submitted) by costtune.autotune
    elapsed_ms: float = math.nan  # pruning
    precompile_ms: float = math.nan  # the parallel precompile after it
    # Positions of every config that can launch, best first (kept = the first k): the
    # replacements costtune.autotune takes when a kept config fails.
    ranked: list[int] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # config text -> why it cannot launch
    knobs: dict[str, list] = field(default_factory=dict)  # knobs the model cannot tell apart
    warnings: list[str] = field(default_factory=list)  # what was warned (or logged)
    replaced: dict[str, str] = field(default_factory=dict)  # by costtune.autotune: config -> why
    model: str | None = None  # what ranked: the model given, or the kernel's own model file
    duplicates: int = 0  # configs that repeat an earlier one's key: ranked, kept once
    filtered: int = 0  # configs the user's own early_config_prune removed: never ranked
    # What ``ranked`` and ``scores`` index when the user's early_config_prune returned
    # configs of its own (the list it returned); None: the tuner's config list.
    configs: list[Any] | None = None


def check_options(*, top_k: Any, shortlist: Any, widen: Any, range_margin: Any,
                  stage1_weight: Any, early_config_prune: Any) -> None:
    """ValueError naming the first of ``prune_configs_by``'s options that is out of range."""
    if isinstance(top_k, bool) or not isinstance(top_k, (int, float)) or not top_k >= 0:
        raise ValueError(f"top_k must be a count or a fraction >= 0, got {top_k!r}")
    if top_k > 1 and not float(top_k).is_integer():
        raise ValueError(f"top_k above 1 must be a whole count (a float <= 1 is a fraction of "
                         f"the list), got {top_k!r}")
    if int(shortlist) < 1:
        raise ValueError(f"shortlist must be >= 1, got {shortlist!r}")
    if stage1_weight is not None:
        from costtune.tune.ranking import check_stage1_weight

        check_stage1_weight(stage1_weight)
    if widen is not None and int(widen) < 1:
        raise ValueError(f"widen must be >= 1 or None, got {widen!r}")
    if range_margin is not None and not range_margin >= 0:
        raise ValueError(f"range_margin must be >= 0 or None, got {range_margin!r}")
    if early_config_prune is not None and not callable(early_config_prune):
        raise ValueError(f"early_config_prune must be callable(configs, named_args, **kwargs), "
                         f"got {early_config_prune!r}")


def distinct(order: Any, keys: Any) -> tuple[np.ndarray, int]:
    """``order`` (config positions, best first) with each key's first position only, and how
    many positions repeated a key: a list that holds a config twice (``min(BLOCK,
    next_power_of_2(n))`` clamps several to one) benchmarks it once.

    >>> distinct(np.array([2, 0, 1, 3]), ["a", "b", "a", "c"])
    (array([2, 1, 3]), 1)
    """
    order = np.asarray(order, dtype=int)
    _, first = np.unique(np.asarray(keys, dtype=object)[order], return_index=True)
    keep = np.sort(first)
    return order[keep], int(len(order) - len(keep))


def with_hooks(keys: Any, configs: Any) -> list[str]:
    """``keys`` told apart where Triton's ``Config.__eq__`` tells the configs apart and the
    canonical key (``str`` of each value) does not: the ``pre_hook`` a config runs, and a
    string value against a number of the same text (``ACT="1"`` and ``ACT=1`` specialize the
    kernel differently)."""
    from costtune.tune.feasibility import hook_mark

    out = []
    for key, c in zip(keys, configs, strict=True):
        texts = sorted(k for k, v in c.kwargs.items() if isinstance(v, str))
        out.append(key + (f"|str:{','.join(texts)}" if texts else "") + hook_mark(c))
    return out


def key_problem(key: Any, arg_names: Any) -> str | None:
    """What is wrong with an autotune ``key`` for a kernel of ``arg_names`` (None: nothing):
    Triton skips a key name that is no argument, so the kernel is never re-tuned when the
    size meant by it changes."""
    if isinstance(key, str):
        return f"autotune key must be a list of argument names, got the string {key!r}"
    missing = [k for k in key if k not in arg_names]
    if missing:
        return (f"autotune key {missing} names no argument of the kernel (its arguments: "
                f"{', '.join(arg_names)}); Triton ignores it, so the kernel is not re-tuned "
                "when that size changes")
    return None


def key_notes(tuner: Any) -> list[tuple[str, str]]:
    """A "key" note when the tuner's ``key`` names no argument of its kernel."""
    keys, names = getattr(tuner, "keys", None), getattr(tuner, "arg_names", None)
    problem = key_problem(keys, names) if keys and names else None
    return [("key", problem)] if problem else []


def tie_keys(configs: Any) -> np.ndarray:
    """Per config a text key whose sort order parts configs the model scores alike (variants
    in a knob it does not know) by their values, the same whatever the list's order: a value
    at its default (maxnreg None) first, then numbers ascending (2 before 16), then text.
    For ``evaluate.metrics.rank_positions``' ``keys``; computed once per config list.

    >>> import triton
    >>> cs = [triton.Config({"G": g}, maxnreg=r) for g, r in ((16, None), (2, 128), (2, None))]
    >>> tie_keys(cs).tolist()
    ['2', '1', '0']
    """
    from costtune.tune.knobs import config_values

    values = [config_values(c) for c in configs]
    names = sorted({n for v in values for n in v})

    def natural(v: Any) -> tuple:
        if v is None:
            return (0, 0.0, "")
        if isinstance(v, Real) and not isinstance(v, bool):
            return (1, float(v), "")
        return (2, 0.0, repr(v))

    keys = [tuple(natural(v.get(n)) for n in names) for v in values]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    rank = np.empty(len(keys), dtype=int)
    rank[order] = np.arange(len(keys))
    width = len(str(max(len(keys) - 1, 0)))
    return np.array([str(r).zfill(width) for r in rank], dtype=object)


def keep_count(top_k: int | float, n: int) -> int:
    """Configs to keep of ``n``: a float in (0, 1] is a fraction (rounded up), else a count;
    always between 1 and ``n``.

    >>> keep_count(0.01, 50), keep_count(0, 50), keep_count(8, 5), keep_count(1.0, 50)
    (1, 1, 5, 50)
    """
    k = math.ceil(top_k * n) if isinstance(top_k, float) and top_k <= 1 else int(top_k)
    return max(1, min(n, k))


def call_site() -> tuple[str, int, dict] | None:
    """(file, line, module globals) of the user's call: the first frame outside costtune and
    triton (None when there is none)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in (
            "costtune", "triton"):
        frame = frame.f_back
    return None if frame is None else (frame.f_code.co_filename, frame.f_lineno,
                                       frame.f_globals)


def warn(text: str, *, at: tuple[str, int, dict] | None = None) -> None:
    """``warnings.warn(text, CosttuneWarning)`` pointing at the user's call (the first frame
    outside costtune and triton, or ``at``, a ``call_site()`` taken earlier: a background
    thread's warning points at the tuning call it follows) that never raises: under a filter
    that turns warnings into errors (``python -W error``, pytest's ``filterwarnings = error``)
    the message goes to the ``costtune`` logger instead of into the user's tuning call."""
    try:
        at = at or call_site()
        if at is None:  # no frame outside costtune and triton
            warnings.warn(text, CosttuneWarning, stacklevel=2)
            return
        file, line, where = at
        warnings.warn_explicit(text, CosttuneWarning, file, line, module=where.get("__name__"),
                               registry=where.setdefault("__warningregistry__", {}),
                               module_globals=where)
    except Exception:
        log.warning("%s", text)


def config_key(config: Any) -> str:
    """The canonical key with the launch options a config sets (so configs varying only
    num_ctas or maxnreg differ); the config as given when its values cannot be cast
    (num_warps=None)."""
    from costtune.tune.feasibility import config_text
    from costtune.tune.launch import config_key as launch_key

    try:
        return launch_key(config)
    except (TypeError, ValueError):
        return config_text(config)


def keep_launchable(configs: Any, notes: list[tuple[str, str]], *,
                    barred: Any = ()) -> tuple[PruneDecision, Any]:
    """The pruner's fallback: (a PruneDecision keeping every config whose launch options can
    run, all of them if none can; their positions), never one of ``barred`` (positions the
    user's own early_config_prune removed)."""
    from costtune.tune.feasibility import config_text, dropped, refuse_options, summary

    allowed = [i for i in range(len(configs)) if i not in set(barred)]
    try:
        refused = {i: why for i, why in refuse_options(configs).items() if i in allowed}
    except Exception:
        refused = {}
    alive = np.array([i for i in allowed if i not in refused] or allowed, dtype=int)
    texts = [config_text(c) for c in configs]
    decision = PruneDecision(len(configs), len(alive), [texts[i] for i in alive])
    if refused:
        decision.dropped = dropped(configs, refused)
        notes.append(("infeasible", summary(configs, refused)))
    return decision, alive


def warn_once(warned: set[str], notes: list[tuple[str, str]], outcome: str) -> list[str]:
    """Warn once per category (``warned`` holds those already warned); the messages."""
    new = [(c, m) for c, m in notes if c not in warned]
    if not new:
        return []
    warned.update(c for c, _ in new)
    text = f"costtune: {'; '.join(dict.fromkeys(m for _, m in new))} -> {outcome}"
    warn(text)
    return [text]


def tuning_report(kept: int, failed: dict[str, str], wrong: dict[str, str], good: int,
                  undecided: str = "") -> str:
    """What ``costtune.autotune`` says after a tuning call's benchmarks ("" for nothing):
    configs that could not run (``failed``: config text -> why), outputs ``check=`` rejected,
    ``good`` of ``kept`` configs that ran and were right, and a vote that could not decide
    (``undecided``: ``OutputGuard.undecided``)."""
    parts = [undecided] if undecided else []
    if failed:
        shown = "; ".join(f"{k}: {v}" for k, v in list(failed.items())[:3])
        parts.append(f"{len(failed)} config(s) could not run and were replaced by the "
                     f"next-ranked ({shown})")
    if wrong:
        shown = "; ".join(f"{k}: {v}" for k, v in wrong.items())
        parts.append(f"check= rejected {len(wrong)} config(s) ({shown})")
    if good and good < kept and not wrong:
        parts.append(f"only {good} of {kept} configs could run")
    if not good and wrong:
        parts.append("every config that ran failed the check; the fastest of them is used")
    elif not good:
        parts.append("no config could run; Triton tunes the kept ones as exhaustive tuning "
                     "would, and meets the same errors")
    return "costtune: " + "; ".join(parts) if parts else ""
