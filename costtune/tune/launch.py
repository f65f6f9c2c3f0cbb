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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from costtune.kernels.base import FAMILIES, PROBLEM_KEYS
from costtune.tune.doubts import problem_doubts
from costtune.tune.kind import KernelKind, heuristic_rules, read_kind, source_constants
from costtune.tune.names import (
    FAMILY_PARAMS,
    config_key,
    family_params,
    launch_options,
    launch_params,
    launched_values,
    map_params,
    mapping_hint,
    rule_values,
    values_key,
)
from costtune.tune.sizes import (
    NotApplicable,
    ProblemSpec,
    find_problem,
    first_tensor_dtype,
    launch_dtype,
)

__all__ = ["FAMILY_PARAMS", "Launch", "LaunchSpec", "NotApplicable", "ProblemSpec",
           "call_args", "config_key", "describe", "family_params", "first_tensor_dtype",
           "launch_options", "launch_params", "launched_values", "rule_values", "values_key"]

# Families tried, in order, when neither the user nor the kernel says: the most specific
# parameter sets first.
_INFER_ORDER = ("gemm", "attention", "softmax")
_NOT_ARGS = ("grid", "warmup")


_DTYPE_ALIASES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}


def dtype_name(value: Any) -> str:
    """The torch name of a dtype given as ``torch.float16``, ``"float16"``, ``"half"`` or
    ``"fp16"``; ValueError for anything else.

    >>> dtype_name("half"), dtype_name("bf16")
    ('float16', 'bfloat16')
    """
    import torch

    dtype = value
    if isinstance(value, str):
        name = value.strip().removeprefix("torch.")
        name = _DTYPE_ALIASES.get(name.lower(), name)
        dtype = getattr(torch, name, None) if name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch dtype or its name (e.g. torch.float16 or "
                         f"'float16'), got {value!r}")
    return str(dtype).removeprefix("torch.")


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

    def __post_init__(self) -> None:
        if self.dtype is not None:  # a torch dtype or an alias, as its torch name
            object.__setattr__(self, "dtype", dtype_name(self.dtype))

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
    # Family parameters set by triton.heuristics at each launch (parameter -> rule name), the
    # rules in the order Triton applies them and the call's arguments they read
    # (``names.heuristic_values``).
    by_rule: dict[str, str] = field(default_factory=dict)
    rules: tuple[tuple[str, Any], ...] = field(default=(), repr=False, compare=False)
    rule_args: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # The rules' outputs per config (id) of this call, evaluated once (``names.rule_outputs``)
    outputs: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)


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
    rules = tuple(heuristic_rules(kernel)) if kernel is not None else ()
    names = [k for c in configs for k in c.kwargs]
    declared = spec.family in FAMILIES
    families = [spec.family] if declared else _candidates(kind)
    reads = ("" if declared or kind is None
             else f"{kind.name} reads as {kind.what} ({kind.reason}), but ")
    failures: list[tuple[str, str]] = []
    for family in families:
        pm = map_params(family, names, args, user=spec.params, constants=constants,
                        rules=[n for n, _ in rules])
        if pm.missing:
            failures.append(("params", f"{reads}configs {sorted(set(names))} give no {family} "
                             f"parameter(s) {list(pm.missing)}, nor does the launch; map "
                             f"yours with {mapping_hint(family, pm.unknown, pm.missing)}"))
            continue
        if not declared and pm.foreign_tiles():  # e.g. a BLOCK_K: not a softmax
            failures.append(("family", f"{reads}its configs name {pm.foreign_tiles()}, which "
                             f"{family} kernels do not tile; pass family="))
            continue
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
        doubts = (*_kind_doubts(spec, kind, family),
                  *problem_doubts(family, problem, dtype, origin, args))
        outputs: dict[int, Any] = {}  # the rules' outputs, shared with the launch
        by_rule, doubt = _evaluated(family, pm, configs, rules, args, outputs)
        if doubt is not None and set(pm.by_rule) & set(FAMILY_PARAMS[family][0]):
            failures.append(("params", doubt))  # a required parameter nothing else gives
            continue
        if doubt is not None:
            doubts = (*doubts, ("params", doubt + (" (taken as the family's neutral value)"
                                                   if pm.by_rule else "")))
        origin.update(pm.origin)
        launch = Launch(family, problem, dtype, pm.rename, pm.meta, origin, pm.knobs,
                        pm.unknown, kind, doubts, by_rule=by_rule,
                        rules=rules if doubt is None else (),
                        rule_args=dict(args) if rules and doubt is None else {},
                        outputs=outputs)
        if grid is None:
            return launch
        from costtune.tune.grid import with_grid

        return with_grid(launch, configs, args=args, grid=grid, kernel=kernel)
    if failures and (declared or len(families) == 1):
        raise NotApplicable(*failures[0])
    raise NotApplicable("family", f"cannot tell the kernel family from config parameters "
                        f"{sorted(set(names))} and args {sorted(args)}; pass family=, problem= "
                        "and params=")


def _evaluated(family: str, pm: Any, configs: Sequence[Any], rules: Sequence[tuple[str, Any]],
               args: Mapping[str, Any], outputs: dict[int, Any]
               ) -> tuple[dict[str, str], str | None]:
    """The family parameters ``triton.heuristics`` sets (parameter -> rule name) when the
    kernel's rules evaluate for some config (one whose rules fail cannot launch: the hook
    drops it); else none and why not (the parameters then take their neutral value, or the
    family is not read when one is required)."""
    if not rules:
        return {}, None
    probe = Launch(family, {}, "", by_rule=pm.by_rule, rules=tuple(rules), rule_args=dict(args),
                   outputs=outputs)
    values, failed = rule_values(probe, configs)
    if len(failed) < len(values):
        return dict(pm.by_rule), None
    return {}, (f"triton.heuristics {sorted(n for n, _ in rules)} could not be evaluated for "
                f"any config ({next(iter(failed.values()))}); give the family's parameters "
                "in the configs to be ranked by them")


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


