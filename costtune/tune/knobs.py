"""Config knobs the cost model does not know (GROUP_SIZE_M, warp_specialize, EPILOGUE_SUBTILE,
FLATTEN, num_ctas, maxnreg, ...): configs that differ only in them score alike, so without care
the top k holds the same config several times.

The rule, shared by every caller that ranks configs:

- configs that differ only in unknown knobs never take two of the kept slots while distinct
  ones remain (``spread_order``);
- the unknown knobs' values are still explored within the budget: the i-th distinct config gets
  the unknown values used least so far, so k slots cover several of them;
- one warning names the knobs (``unknown_knobs`` gives their names and values).

>>> import triton
>>> cs = [triton.Config({"BLOCK_M": m, "GROUP_SIZE_M": g}) for m in (64, 128) for g in (1, 8)]
>>> seen = [{"BLOCK_M": c.kwargs["BLOCK_M"]} for c in cs]  # what the model sees of each
>>> known, unknown, knobs = knob_split(cs, seen)
>>> knobs
{'GROUP_SIZE_M': [1, 8]}
>>> [int(i) for i in spread_order([0, 1, 2, 3], known_keys=known, unknown_keys=unknown)]
[0, 3, 1, 2]
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["config_values", "knob_message", "knob_split", "spread_order"]

# triton.Config launch options outside its kwargs that no cost model here describes.
LAUNCH_KNOBS = ("num_ctas", "maxnreg", "ir_override")


def config_values(config: Any) -> dict[str, Any]:
    """A config's values as its launch passes them: kwargs (``tl.constexpr`` unwrapped),
    num_warps, num_stages and the launch knobs (None where unset)."""
    from costtune.tune.names import unwrapped

    out = {k: unwrapped(v) for k, v in config.kwargs.items()}  # tl.constexpr(64) is 64
    out["num_warps"], out["num_stages"] = config.num_warps, config.num_stages
    for name in LAUNCH_KNOBS:
        out[name] = getattr(config, name, None)
    return out


def _hashable(value: Any) -> Hashable:
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


def knob_split(configs: Sequence[Any], seen: Sequence[Mapping[str, Any]], *,
               values: Sequence[Mapping[str, Any]] | None = None
               ) -> tuple[list[Hashable], list[Hashable], dict[str, list[Any]]]:
    """Split each config into what the model sees and what it cannot tell apart.

    ``seen[i]``: the values the model scores config i by (the family's parameter dict, with
    num_warps and num_stages). Returns, per config, a key of its seen values and a key of its
    untold knobs' values, and the untold knobs: {name: distinct values, first-seen order} for
    every config kwarg or launch option (num_ctas, maxnreg) that differs between configs the
    model sees alike. Names are never guessed: a knob counts as untold only when two configs
    with equal seen values differ in it. ``values``: each config's values as its launch
    passes them, when ``triton.heuristics`` rules change them (``names.launched_values``)."""
    known_keys = [tuple(sorted((k, _hashable(v)) for k, v in s.items())) for s in seen]
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(known_keys):
        groups[key].append(i)
    values = ([dict(v) for v in values] if values is not None
              else [config_values(c) for c in configs])
    knobs: dict[str, dict[Hashable, Any]] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        for name in dict.fromkeys(n for i in members for n in values[i]):
            distinct = {_hashable(values[i].get(name)): values[i].get(name) for i in members}
            if len(distinct) > 1:
                knobs.setdefault(name, {}).update(distinct)
    names = list(knobs)
    unknown_keys = [tuple(_hashable(v.get(n)) for n in names) for v in values]
    return known_keys, unknown_keys, {n: list(vals.values()) for n, vals in knobs.items()}


def spread_order(order: Sequence[int], *, known_keys: Sequence[Hashable],
                 unknown_keys: Sequence[Hashable]) -> np.ndarray:
    """``order`` (positions, best first) rearranged so every distinct known config comes once,
    in rank order, before any config repeats one; round r then takes each known config's r-th
    variant. Each pick takes, among its config's remaining variants, the unknown values used
    least so far (ties: the variant ranked first), so a budget of k slots explores them."""
    groups: dict[Hashable, list[int]] = {}
    for i in order:
        groups.setdefault(known_keys[i], []).append(int(i))
    used: Counter = Counter()
    out: list[int] = []
    pending = list(groups.values())
    while pending:
        nxt = []
        for variants in pending:
            pick = min(range(len(variants)), key=lambda j: (used[unknown_keys[variants[j]]], j))
            i = variants.pop(pick)
            used[unknown_keys[i]] += 1
            out.append(i)
            if variants:
                nxt.append(variants)
        pending = nxt
    return np.asarray(out, dtype=int)


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)  # "1" beside 1


def knob_message(knobs: dict[str, list[Any]]) -> str:
    """The one warning's text for ``unknown_knobs``' result."""
    names = ", ".join(f"{name} ({', '.join(map(_shown, vals[:6]))}"
                      f"{', ...' if len(vals) > 6 else ''})" for name, vals in knobs.items())
    return (f"the cost model does not know {names}: configs that differ only there rank "
            "alike, so each distinct config is kept once and those values are varied across them")
