"""An autotuned launch in a kernel family's terms: family, problem sizes, dtype, config params.

The pruning hook (``costtune.tune.pruner``) and the harvest listener see only what Triton hands
an ``early_config_prune``: the configs, the named args and the call's kwargs (with ``grid``),
plus the kernel itself (``tune.kind.calling_tuner``). ``describe`` turns that into a
``Launch`` and ``family_params`` turns each config into the family's parameter dict, so static
features and the cost model apply. The pieces: what the kernel computes (``tune.kind``), how
its names map onto the family's (``tune.names``), its sizes and dtype (``tune.sizes``).

>>> import triton
>>> cfg = triton.Config({"BM": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3)
>>> spec = LaunchSpec(family="gemm", params={"BM": "BLOCK_M"}, dtype="float16")
>>> launch = describe(spec, [cfg], args={"M": 512, "N": 256, "K": 128})
>>> launch.family, launch.problem
('gemm', {'M': 512, 'N': 256, 'K': 128})
>>> family_params("gemm", [cfg], rename=launch.rename)[0]["SPLIT_K"]
1
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from costtune.kernels.base import FAMILIES, LAUNCH_OPTION_DEFAULTS, PROBLEM_KEYS
from costtune.tune.kind import KernelKind, read_kind, source_constants, splits_k
from costtune.tune.names import FAMILY_PARAMS, map_params, mapping_hint
from costtune.tune.sizes import (
    BATCHED,
    NotApplicable,
    ProblemSpec,
    find_problem,
    first_tensor_dtype,
    launch_dtype,
)

__all__ = ["FAMILY_PARAMS", "Launch", "LaunchSpec", "NotApplicable", "ProblemSpec",
           "call_args", "config_key", "describe", "family_params", "first_tensor_dtype",
           "grid_programs", "launch_options"]

# Families tried, in order, when neither the user nor the kernel says: the most specific
# parameter sets first.
_INFER_ORDER = ("gemm", "attention", "softmax")
_NOT_ARGS = ("grid", "warmup")
_GRID_SAMPLE = 32  # configs whose grid is evaluated (triton.cdiv costs microseconds a call)
# Neutral parameters that are tile sizes (tl.arange extents): a grid fixes them only to a power
# of two; otherwise fewer programs than rows read as a persistent loop (tutorial 02).
_TILE_PARAMS = frozenset({"ROWS_PER_PROG"})


@dataclass(frozen=True)
class LaunchSpec:
    """What the user told the hook: family, problem mapping, parameter renames, dtype, and
    ``trust_family``: rank a kernel declared as a family as one of its own, even when its
    name or source reads as another kind (no wider k)."""

    family: str | None = None
    problem: ProblemSpec = None
    params: Mapping[str, str] = field(default_factory=dict)
    dtype: str | None = None
    trust_family: bool = False

    def check(self) -> None:
        """ValueError for a mapping that names sizes or parameters the family does not have."""
        if not isinstance(self.params, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.params.items()):
            raise ValueError(f"params must map config names to family names, got {self.params!r}")
        if not (self.problem is None or callable(self.problem)
                or isinstance(self.problem, Mapping)):
            raise ValueError("problem must be None, a dict {size: arg name} or a callable(args)")
        if self.family not in FAMILIES:
            # None (read at tuning time), or an unknown family the hook warns about then;
            # either way a mapping must name some family's parameters.
            names = {p for f in FAMILIES for group in FAMILY_PARAMS[f] for p in group}
            unknown = sorted(set(self.params.values()) - names)
            if unknown and self.family is None:
                raise ValueError(f"params map onto {unknown}, no parameter of any family "
                                 f"(they are {sorted(names)})")
            return
        if isinstance(self.problem, Mapping):
            unknown = sorted(set(self.problem) - set(PROBLEM_KEYS[self.family]))
            if unknown:
                raise ValueError(f"problem names {unknown}; {self.family} sizes are "
                                 f"{list(PROBLEM_KEYS[self.family])}")
        required, neutral = FAMILY_PARAMS[self.family]
        unknown = sorted(set(self.params.values()) - set(required) - set(neutral))
        if unknown:
            raise ValueError(f"params map onto {unknown}; {self.family} parameters are "
                             f"{[*required, *neutral]}")


@dataclass(frozen=True)
class Launch:
    """One launch as a family's workload. ``rename``: config name -> family parameter;
    ``meta``: family parameters fixed at the launch (kwargs) or by the grid's program count;
    ``origin``: where each size, parameter, the dtype and the family came from; ``knobs`` /
    ``unknown``: config names the model does not learn (recognised / not); ``kind``: what
    the kernel's name or source reads as; ``doubts``: (category, message) reasons the model
    may not hold here (the hook widens k); ``info``: notes for ``costtune.explain``."""

    family: str
    problem: dict[str, int]
    dtype: str
    rename: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    knobs: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    kind: KernelKind | None = None
    doubts: tuple[tuple[str, str], ...] = ()
    info: tuple[str, ...] = ()
    programs_cap: float | None = None  # a persistent launch's program count C (min(C, tiles))


def call_args(named_args: Mapping[str, Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Every kernel argument of one call: positional (by name) and keyword, without ``grid``."""
    out = dict(named_args)
    out.update((k, v) for k, v in kwargs.items() if k not in _NOT_ARGS)
    return out


def describe(spec: LaunchSpec, configs: Sequence[Any], *, args: Mapping[str, Any],
             kernel: Any = None, grid: Any = None) -> Launch:
    """The launch's family, sizes, dtype and parameter mapping; NotApplicable when they
    cannot be told. ``kernel``: the autotuner or JIT function (its name and source say what
    it computes); ``grid``: the launch grid, checked against the family's program count."""
    kind = read_kind(kernel) if kernel is not None else None
    constants = source_constants(kernel) if kernel is not None else {}
    names = [k for c in configs for k in c.kwargs]
    declared = spec.family in FAMILIES
    families = [spec.family] if declared else _candidates(kind)
    reads = ("" if declared or kind is None
             else f"{kind.name} reads as {kind.what} ({kind.reason}), but ")
    failures: list[tuple[str, str]] = []
    for family in families:
        pm = map_params(family, names, args, user=spec.params, constants=constants)
        if pm.missing:
            failures.append(("params", f"{reads}configs {sorted(set(names))} give no {family} "
                             f"parameter(s) {list(pm.missing)}, nor does the launch; map "
                             f"yours with {mapping_hint(family, pm.unknown, pm.missing)}"))
            continue
        if not declared and pm.foreign_tiles():
            continue  # e.g. a BLOCK_K: not a softmax
        try:
            problem, origin = find_problem(family, args, spec=spec.problem)
        except NotApplicable as exc:
            failures.append((exc.category, str(exc)))
            continue
        dtype, origin["dtype"] = ((spec.dtype, "dtype=") if spec.dtype
                                  else launch_dtype(family, args))
        if dtype is None:
            raise NotApplicable("problem", "no tensor argument to take the dtype from; pass "
                                "dtype=")
        origin["family"] = _family_origin(spec, kind, family)
        doubts = _kind_doubts(spec, kind, family)
        if BATCHED in str(origin.get("M", "")):
            doubts = (*doubts, ("grid", f"batched operands ({origin['M']}) are read as one "
                                f"{family} of M = {problem['M']} rows; the model never saw "
                                "batched operands"))
        launch = Launch(family, problem, dtype, pm.rename, pm.meta, {**origin, **pm.origin},
                        pm.knobs, pm.unknown, kind, doubts)
        return launch if grid is None else _with_grid(launch, configs, args=args, grid=grid,
                                                      kernel=kernel)
    if failures and (declared or len(families) == 1):
        raise NotApplicable(*failures[0])
    raise NotApplicable("family", f"cannot tell the kernel family from config parameters "
                        f"{sorted(set(names))} and args {sorted(args)}; pass family=, problem= "
                        "and params=")


def _candidates(kind: KernelKind | None) -> list[str]:
    """Families to try for a kernel no one declared: the one its name or source reads as,
    else all; a kernel of another kind is not told to be any."""
    if kind is None:
        return list(_INFER_ORDER)
    if kind.family is None:
        raise NotApplicable("family", f"cannot tell the kernel family: {kind.name} reads as "
                            f"{kind.what} ({kind.reason}), a kind no costtune model has seen; "
                            "pass family= to rank it as one anyway (k is widened unless "
                            "trust_family=True)")
    return [kind.family]


def _family_origin(spec: LaunchSpec, kind: KernelKind | None, family: str) -> str:
    if spec.family == family:
        return "family="
    told = f"told by {kind.reason}" if kind else "told from the config names and args"
    return (f"{told}; family={spec.family!r} is not one costtune knows" if spec.family
            else told)


def _kind_doubts(spec: LaunchSpec, kind: KernelKind | None, family: str
                 ) -> tuple[tuple[str, str], ...]:
    if spec.trust_family:
        return ()
    if spec.family is not None and spec.family not in FAMILIES:
        return (("family", f"unknown kernel family {spec.family!r}, ranked as {family}: the "
                 f"{family} model has not seen such kernels (trust_family=True keeps k)"),)
    if spec.family == family and kind is not None and kind.contradicts(family):
        return (("kind", f"{kind.name} reads as {kind.what} ({kind.reason}), not {family}: "
                 f"the {family} model has not seen such kernels (trust_family=True keeps k)"),)
    return ()


def family_params(family: str, configs: Sequence[Any], *, rename: Mapping[str, str],
                  meta: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Per config: the family's parameters (renamed; else fixed at the launch, ``meta``; else
    their neutral value) plus num_warps and num_stages. Names the family does not know are
    left out."""
    required, neutral = FAMILY_PARAMS[family]
    meta = dict(meta or {})
    out = []
    for c in configs:
        kw = {rename.get(k, k): v for k, v in c.kwargs.items()}
        missing = [p for p in required if p not in kw and p not in meta]
        if missing:
            raise NotApplicable("params", f"config {dict(c.kwargs)} lacks {family} "
                                f"parameter(s) {missing}; map yours with "
                                f"{mapping_hint(family, c.kwargs, missing)}")
        d = {p: kw.get(p, meta.get(p)) for p in required}
        d.update((p, kw.get(p, meta.get(p, v))) for p, v in neutral.items())
        d["num_warps"], d["num_stages"] = c.num_warps, c.num_stages
        out.append(d)
    return out


def launch_options(config: Any) -> dict[str, Any]:
    """A config's Triton launch options besides num_warps / num_stages that are not at their
    neutral value (``num_ctas=2``, ``maxnreg=128``)."""
    return {k: getattr(config, k) for k, neutral in LAUNCH_OPTION_DEFAULTS.items()
            if getattr(config, k, neutral) != neutral}


def config_key(config: Any) -> str:
    """Canonical key of a triton.Config (or costtune Config): ``Config.key`` plus the launch
    options it sets (so configs varying only num_ctas or maxnreg differ)."""
    from costtune.types import Config

    values = {**dict(config.kwargs), **launch_options(config),
              "num_warps": config.num_warps, "num_stages": config.num_stages}
    return Config.from_dict(values).key


def grid_programs(grid: Any, args: Mapping[str, Any], *, configs: Sequence[Any]) -> np.ndarray:
    """Programs each config launches under ``grid`` (a tuple or a callable of the meta args),
    evaluated once per distinct set of config kwargs. NaN where the grid cannot be evaluated."""
    out = np.full(len(configs), np.nan)
    seen: dict[tuple, float] = {}
    for i, c in enumerate(configs):
        key = tuple(c.kwargs.items())  # launch options (num_warps, ...) rarely shape a grid
        if key not in seen:
            try:
                g = grid({**args, **c.all_kwargs()}) if callable(grid) else grid
                seen[key] = float(math.prod(int(x) for x in g))
            except Exception:  # a grid that needs more than we know says nothing
                seen[key] = np.nan
        out[i] = seen[key]
    return out


def _with_grid(launch: Launch, configs: Sequence[Any], *, args: Mapping[str, Any],
               grid: Any, kernel: Any = None) -> Launch:
    """Check the grid's program count against the family's, on up to 32 configs spread over
    the list. Agreeing: as is. A neutral parameter the configs lack (ROWS_PER_PROG, SPLIT_K)
    that one value reconciles: fixed to it. A persistent launch (``min(C, tiles)`` programs,
    tutorial 09's ``NUM_SMS``): noted. Anything else: a "grid" doubt."""
    picks = np.unique(np.linspace(0, len(configs) - 1, min(len(configs), _GRID_SAMPLE)
                                  ).astype(int))
    sample = [configs[i] for i in picks]
    programs = grid_programs(grid, args, configs=sample)
    known = np.isfinite(programs)
    expected = _family_programs(launch, sample)
    if not known.any() or (programs[known] == expected[known]).all():
        return launch
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
        return fixed
    persistent = _persistent(programs[known], expected[known])
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


def _family_programs(launch: Launch, configs: Sequence[Any]) -> np.ndarray:
    from costtune.features.static import static_features_for

    params = family_params(launch.family, configs, rename=launch.rename, meta=launch.meta)
    feats = static_features_for(launch.family, launch.problem, launch.dtype, params)
    return feats["num_programs"].to_numpy()


def _fixed_by_grid(launch: Launch, sample: Sequence[Any], programs: np.ndarray,
                   known: np.ndarray, *, args: Mapping[str, Any] | None = None
                   ) -> Launch | None:
    """The launch with the family's absent neutral parameter set to the one value that makes
    every sampled config's program count the grid's, or None. Not a value that an integer
    argument of the call holds under a name that is neither a size nor a parameter (a
    batched kernel's ``BATCH`` grid axis is no split of the problem)."""
    _, neutral = FAMILY_PARAMS[launch.family]
    free = [p for p in neutral if p not in launch.meta and p not in launch.rename.values()]
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


def _batched(launch: Launch, sample: Sequence[Any], programs: np.ndarray, known: np.ndarray,
             args: Mapping[str, Any]) -> Launch | None:
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


def _batch_args(launch: Launch, args: Mapping[str, Any]) -> dict[str, int]:
    """{name: value} of the call's integer arguments (> 1) named as no size or parameter of
    the family (nor mapped onto one): what a grid axis over a batch would count."""
    required, neutral = FAMILY_PARAMS[launch.family]
    named = {*required, *neutral, *PROBLEM_KEYS[launch.family], *launch.rename}
    named |= {_arg_name(n) for n in launch.origin.values() if isinstance(n, str)}
    return {k: int(v) for k, v in args.items() if isinstance(v, int)
            and not isinstance(v, bool) and k not in named and v > 1}


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
