"""What the grid says about a described launch (``tune.launch.Launch``): the programs each
config starts (``grid_programs``) against the family's count, and what reconciles the two
(``with_grid``): a batch axis folded into a size, a neutral parameter the grid fixes
(SPLIT_K, ROWS_PER_PROG), a persistent launch; otherwise a "grid" doubt."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from costtune.kernels.base import PARAM_NAMES, PROBLEM_KEYS
from costtune.tune.kind import loops_over_programs, splits_k
from costtune.tune.names import FAMILY_PARAMS, config_key, launch_params, rule_outputs

__all__ = ["grid_programs", "with_grid"]

_GRID_SAMPLE = 32  # configs whose grid is evaluated (triton.cdiv costs microseconds a call)
# Neutral parameters that are tile sizes (tl.arange extents): a grid fixes them only to a power
# of two; otherwise fewer programs than rows read as a persistent loop (tutorial 02).
_TILE_PARAMS = frozenset({"ROWS_PER_PROG"})


def grid_programs(grid: Any, args: Mapping[str, Any], *, configs: Sequence[Any],
                  launch: Any = None) -> np.ndarray:
    """Programs each config launches under ``grid`` (a tuple or a callable of the meta args:
    the call's arguments and the config's values, after the ``launch``'s ``triton.heuristics``
    rules, as Triton's launch passes them), evaluated once per distinct set of config kwargs.
    NaN where the grid cannot be evaluated."""
    out = np.full(len(configs), np.nan)
    seen: dict[tuple, float] = {}
    ruled = launch is not None and bool(launch.rules)
    for i, c in enumerate(configs):
        # Launch options (num_warps, ...) rarely shape a grid; a rule may read them.
        key = tuple(c.kwargs.items()) + ((c.num_warps, c.num_stages) if ruled else ())
        if key not in seen:
            try:
                meta = rule_outputs(launch, c) if ruled else {**args, **c.all_kwargs()}
                g = grid(meta) if callable(grid) else grid
                seen[key] = float(math.prod(int(x) for x in g))
            except Exception:  # a grid that needs more than we know says nothing
                seen[key] = np.nan
        out[i] = seen[key]
    return out


def with_grid(launch: Any, configs: Sequence[Any], *, args: Mapping[str, Any],
               grid: Any, kernel: Any = None) -> Any:
    """Check the grid's program count against the family's, on up to 32 configs spread over
    the list. Agreeing: as is. A neutral parameter the configs lack (ROWS_PER_PROG, SPLIT_K)
    that one value reconciles: fixed to it. A persistent launch (``min(C, tiles)`` programs,
    tutorial 09's ``NUM_SMS``): noted. Anything else, or a grid not evaluable on any of them:
    a "grid" doubt."""
    picks = np.unique(np.linspace(0, len(configs) - 1, min(len(configs), _GRID_SAMPLE)
                                  ).astype(int))
    sample = [configs[i] for i in picks]
    programs = grid_programs(grid, args, configs=sample, launch=launch)
    known = np.isfinite(programs)
    expected = _family_programs(launch, sample)
    if not known.any():  # checked nothing: neither agreeing nor reconciled
        return replace(launch, doubts=(*launch.doubts, (
            "grid", "the launch grid could not be evaluated with the call's arguments and "
            "the configs' parameters: the programs it starts are unchecked")))
    if (programs[known] == expected[known]).all():
        return launch
    if (programs[known] < 1).any():
        return replace(launch, doubts=(*launch.doubts, (
            "grid", "the launch grid starts no programs for some configs (an empty batch?)")))
    batched = _batched(launch, sample, programs, known, args)
    if batched is not None:
        return batched
    fixed = _fixed_by_grid(launch, sample, programs, known, args=args)
    if fixed is not None:
        split = fixed.meta.get("SPLIT_K")
        if split is not None and "SPLIT_K" not in launch.meta and splits_k(kernel) is False:
            # A GEMM with no atomic add and no split in its source: the extra grid axis is
            # more likely a batch (a bmm whose operands' shapes were mapped by hand).
            doubt = ("grid", f"the launch grid's {split} programs per tile are read as "
                     f"SPLIT_K={split}, but the kernel's source splits no K (no atomic_add, "
                     "no 'split'): if that axis is a batch, fold it into M with problem=")
            fixed = replace(fixed, doubts=(*fixed.doubts, doubt))
        rows = fixed.meta.get("ROWS_PER_PROG")
        if rows is not None and (programs[known] == launch.problem.get("cols")).all():
            doubt = ("grid", f"the launch grid starts one program per column ({rows} rows "
                     "each if read as a softmax over rows): a reduction over another dim?")
            fixed = replace(fixed, doubts=(*fixed.doubts, doubt))
        return fixed
    persistent = _persistent(programs[known], expected[known])
    if persistent is not None and len(np.unique(expected[known])) < 2 and (
            loops_over_programs(kernel) is False):
        persistent = None  # one tile count: a misread problem would look the same
    if persistent is not None:
        return replace(launch, programs_cap=persistent,
                       info=(*launch.info, f"persistent launch: at most {persistent:g} "
                             f"programs loop over the {launch.family} tiles"))
    i = int(np.flatnonzero(known & (programs != expected))[0])
    ratio = programs[i] / expected[i]
    batch = sorted(k for k, v in _batch_args(launch, args).items() if v == ratio)
    doubt = ("grid", f"the launch grid gives {programs[i]:g} programs for "
             f"{config_key(sample[i])} where the {launch.family} model assumes "
             f"{expected[i]:g}" + (f" (x {batch[0]} = {int(ratio)}: a batch axis, which "
                                   f"{launch.family} workloads do not have)" if batch else ""))
    return replace(launch, doubts=(*launch.doubts, doubt))


def _family_programs(launch: Any, configs: Sequence[Any]) -> np.ndarray:
    from costtune.features.static import static_features_for

    params = launch_params(launch, configs)
    feats = static_features_for(launch.family, launch.problem, launch.dtype, params)
    return feats["num_programs"].to_numpy()


def _fixed_by_grid(launch: Any, sample: Sequence[Any], programs: np.ndarray,
                   known: np.ndarray, *, args: Mapping[str, Any] | None = None
                   ) -> Any:
    """The launch with the family's absent neutral parameter set to the one value that makes
    every sampled config's program count the grid's, or None. Not a value that an integer
    argument of the call holds under a name that is neither a size nor a parameter (a
    batched kernel's ``BATCH`` grid axis is no split of the problem)."""
    _, neutral = FAMILY_PARAMS[launch.family]
    free = [p for p in neutral if p not in launch.meta and p not in launch.rename.values()
            and p not in launch.by_rule]
    if not free:
        return None
    first = int(np.flatnonzero(known)[0])
    base = _family_programs(launch, sample[first:first + 1])[0]
    ratio = base / programs[first]
    tries = {math.ceil(ratio), 1 << max(0, math.ceil(math.log2(max(ratio, 1)))),
             round(programs[first] / base)}
    batch = set(_batch_args(launch, args or {}).values())
    for param in free:
        for value in sorted(v for v in tries if v > 1):
            if (param in _TILE_PARAMS and value & (value - 1)) or value in batch:
                continue
            trial = replace(launch, meta={**launch.meta, param: value})
            if (_family_programs(trial, sample)[known] == programs[known]).all():
                note = f"{param}={value} fixed by the launch grid ({programs[first]:g} programs)"
                return replace(trial, origin={**trial.origin, param: "launch grid"},
                               info=(*trial.info, note))
    return None


# The size a batch grid axis multiplies: a batched GEMM of B x (M x N x K) launches the
# programs, and does the work, of one (B*M) x N x K GEMM; B softmaxes of R rows, of B*R rows.
_BATCHED_SIZE = {"gemm": "M", "softmax": "rows"}


def _batched(launch: Any, sample: Sequence[Any], programs: np.ndarray, known: np.ndarray,
             args: Mapping[str, Any]) -> Any:
    """The launch read with its batch folded into the family's size (``_BATCHED_SIZE``)
    when an integer argument that is no size or parameter (``BATCH``) times the family's
    program count is every sampled config's grid; else None. Still a "grid" doubt (k
    widens): the model never saw batched operands (each batch reads its own B, which a
    (B*M) x N x K GEMM shares). On the H200 (experiments/NOTES.md, sixteenth session) the
    folded reading alone kept 8 configs 0.91-0.92 of a batched matmul's best on two of four
    shapes; widened, the unfolded one 0.94-0.97, and this one the best on all four."""
    size = _BATCHED_SIZE.get(launch.family)
    if size is None or size not in launch.problem:
        return None
    for name, value in sorted(_batch_args(launch, args).items()):
        trial = replace(launch, problem={**launch.problem, size: launch.problem[size] * value})
        if (_family_programs(trial, sample)[known] == programs[known]).all():
            note = (f"{size} = {launch.problem[size]} x {name} ({value}): the grid's batch "
                    f"axis read as {launch.family} {size}")
            origin = f"{launch.origin.get(size, size)} x {name}"
            doubt = ("grid", f"the grid's batch axis ({name} = {value}) is read as "
                     f"{launch.family} {size} x {value}; the model never saw batched operands")
            return replace(trial, origin={**trial.origin, size: origin},
                           info=(*trial.info, note), doubts=(*trial.doubts, doubt))
    return None


def _batch_args(launch: Any, args: Mapping[str, Any]) -> dict[str, int]:
    """{name: value} of the call's integer arguments (> 1) named as no size or parameter of
    the family (nor mapped onto one, nor in any case a name people give a parameter: a
    runtime ``split_k`` or ``num_splits`` is a split, which the grid fixes, not a batch):
    what a grid axis over a batch would count."""
    required, neutral = FAMILY_PARAMS[launch.family]
    named = {*required, *neutral, *PROBLEM_KEYS[launch.family], *launch.rename}
    named |= {_arg_name(n) for n in launch.origin.values() if isinstance(n, str)}
    aliases = {a.lower() for names in PARAM_NAMES.get(launch.family, {}).values()
               for a in names}
    return {k: int(v) for k, v in args.items() if isinstance(v, int)
            and not isinstance(v, bool) and k not in named and k.lower() not in aliases
            and v > 1}


def _arg_name(origin: str) -> str:
    """The argument a size's origin names ("arg m" -> "m", "arg STAGE=3" -> "STAGE",
    "problem= 'rows'" -> "rows"); the origin itself otherwise."""
    if origin.startswith("arg "):
        return origin[4:].split("=")[0].split(" ")[0]
    if origin.startswith("problem= "):
        return origin[9:].strip("'\"")
    return origin


def _persistent(programs: np.ndarray, expected: np.ndarray) -> float | None:
    """C when every config launches min(C, its family program count) programs."""
    fewer = programs < expected
    caps = np.unique(programs[fewer])
    if len(caps) != 1 or (programs > expected).any() or (expected[~fewer] > caps[0]).any():
        return None
    return float(caps[0])
