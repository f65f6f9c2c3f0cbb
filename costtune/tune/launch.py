"""An autotuned launch in a kernel family's terms: family, problem sizes, dtype, config params.

The pruning hook (``costtune.tune.pruner``) and the harvest listener see only what Triton hands an
``early_config_prune``: the configs, the named args and the call's kwargs (with ``grid``).
``describe`` turns that into a ``Launch`` (family, problem, dtype) and ``family_params`` turns each
config into the family's parameter dict, so static features and the cost model apply.

>>> import triton
>>> cfg = triton.Config({"BM": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3)
>>> spec = LaunchSpec(family="gemm", params={"BM": "BLOCK_M"}, dtype="float16")
>>> launch = describe(spec, [cfg], args={"M": 512, "N": 256, "K": 128})
>>> launch.family, launch.problem
('gemm', {'M': 512, 'N': 256, 'K': 128})
>>> family_params("gemm", [cfg], rename=spec.params)[0]["SPLIT_K"]
1
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costtune.kernels import FAMILIES, PROBLEM_KEYS

# Per family: parameters a config must give, and those with a neutral value when absent.
FAMILY_PARAMS: dict[str, tuple[tuple[str, ...], dict[str, int]]] = {
    "gemm": (("BLOCK_M", "BLOCK_N", "BLOCK_K"), {"SPLIT_K": 1}),
    "softmax": (("BLOCK_N",), {"ROWS_PER_PROG": 1}),
    "attention": (("BLOCK_M", "BLOCK_N"), {}),
}
# Families tried, in order, when none is given: the most specific parameter sets first.
_INFER_ORDER = ("gemm", "attention", "softmax")
# Other spellings of problem sizes found in Triton code (the softmax tutorial's n_rows, n_cols).
_ALIASES = {"rows": ("n_rows", "num_rows"), "cols": ("n_cols", "num_cols"),
            "causal": ("CAUSAL", "IS_CAUSAL", "is_causal")}
_NOT_ARGS = ("grid", "warmup")

ProblemSpec = Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]] | None


class NotApplicable(Exception):
    """The launch cannot be described in a family's terms; ``category`` names why."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category


@dataclass(frozen=True)
class LaunchSpec:
    """What the user told the hook: family, problem mapping, parameter renames, dtype."""

    family: str | None = None
    problem: ProblemSpec = None
    params: Mapping[str, str] = field(default_factory=dict)
    dtype: str | None = None

    def check(self) -> None:
        """ValueError for a mapping that names sizes or parameters the family does not have."""
        if not isinstance(self.params, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.params.items()):
            raise ValueError(f"params must map config names to family names, got {self.params!r}")
        if not (self.problem is None or callable(self.problem)
                or isinstance(self.problem, Mapping)):
            raise ValueError("problem must be None, a dict {size: arg name} or a callable(args)")
        if self.family not in FAMILIES:
            return  # None, or an unknown family the hook warns about at tuning time
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
    family: str
    problem: dict[str, int]
    dtype: str


def call_args(named_args: Mapping[str, Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Every kernel argument of one call: positional (by name) and keyword, without ``grid``."""
    out = dict(named_args)
    out.update((k, v) for k, v in kwargs.items() if k not in _NOT_ARGS)
    return out


def describe(spec: LaunchSpec, configs: Sequence[Any], *, args: Mapping[str, Any]) -> Launch:
    """The launch's family, problem sizes and dtype; NotApplicable when they cannot be told."""
    dtype = spec.dtype or first_tensor_dtype(args)
    if dtype is None:
        raise NotApplicable("problem", "no tensor argument to take the dtype from; pass dtype=")
    if spec.family is not None:
        if spec.family not in FAMILIES:
            raise NotApplicable("family", f"unknown kernel family {spec.family!r} (known: "
                                f"{', '.join(FAMILIES)})")
        return Launch(spec.family, resolve_problem(spec.family, args, spec=spec.problem),
                      dtype)
    names = {spec.params.get(k, k) for c in configs for k in c.kwargs}
    for family in _INFER_ORDER:
        required, neutral = FAMILY_PARAMS[family]
        if not set(required) <= names:
            continue
        # Softmax configs are the least specific: a tile in M or K means another family.
        if family == "softmax" and not names <= {*required, *neutral}:
            continue
        try:
            return Launch(family, resolve_problem(family, args, spec=spec.problem), dtype)
        except NotApplicable:
            continue
    raise NotApplicable("family", f"cannot tell the kernel family from config parameters "
                        f"{sorted(names)} and args {sorted(args)}; pass family=, problem= "
                        "and params=")


def resolve_problem(family: str, args: Mapping[str, Any], *,
                    spec: ProblemSpec) -> dict[str, int]:
    """The family's problem sizes: from ``spec`` (a mapping or a callable), else args with the
    family's names, else tensor shapes (GEMM a @ b, softmax x, attention q)."""
    keys = PROBLEM_KEYS[family]
    if callable(spec):
        got = dict(spec(dict(args)))
    else:
        got = {k: _lookup(v, args) for k, v in (spec or {}).items()}
    shapes: dict[str, int] | None = None
    out = {}
    for key in keys:
        value = got.get(key)
        if value is None:
            value = _named_size(key, args)
        if value is None and key == "causal":
            value = 0
        if value is None:
            shapes = _from_tensors(family, args) if shapes is None else shapes
            value = shapes.get(key)
        if value is None:
            raise NotApplicable("problem", f"cannot find {family} size {key!r} in the args "
                                f"{sorted(args)}; pass problem={{'{key}': 'arg_name'}}")
        out[key] = _size(key, value)
    return out


def _lookup(value: Any, args: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        if value not in args:
            raise NotApplicable("problem", f"problem maps to arg {value!r}, not among "
                                f"{sorted(args)}")
        if hasattr(args[value], "shape"):
            raise NotApplicable("problem", f"arg {value!r} is a tensor; map to "
                                f"({value!r}, dim) for one of its sizes")
        return args[value]
    if isinstance(value, tuple) and len(value) == 2:
        name, dim = value
        tensor = args.get(name)
        if not hasattr(tensor, "shape"):
            raise NotApplicable("problem", f"problem maps to ({name!r}, {dim}) but {name!r} "
                                "is not a tensor argument")
        return tensor.shape[dim]
    return value


def _named_size(key: str, args: Mapping[str, Any]) -> Any:
    for name in (key, *_ALIASES.get(key, ())):
        value = args.get(name)
        if value is not None and _is_number(value):
            return value
    return None


def _from_tensors(family: str, args: Mapping[str, Any]) -> dict[str, int]:
    tensors = [v for v in args.values() if hasattr(v, "shape") and hasattr(v, "dtype")]
    if family == "gemm":
        mats = [t for t in tensors if len(t.shape) == 2]
        if len(mats) >= 2 and mats[0].shape[1] == mats[1].shape[0]:
            (m, k), n = mats[0].shape, mats[1].shape[1]
            return {"M": m, "N": n, "K": k}
    elif family == "softmax":
        x = args.get("x") if hasattr(args.get("x"), "shape") else next(iter(tensors), None)
        if x is not None and len(x.shape) >= 1 and x.shape[-1] > 0:
            cols = int(x.shape[-1])
            return {"rows": math.prod(x.shape) // cols, "cols": cols}
    elif family == "attention":
        q = next((t for t in tensors if len(t.shape) == 4), None)
        if q is not None:
            return dict(zip(("B", "H", "S", "D"), (int(s) for s in q.shape)))
    return {}


def _size(key: str, value: Any) -> int:
    if hasattr(value, "item"):  # a 0-dim tensor or numpy scalar
        value = value.item()
    # A bool or a fraction is no size (M=True or M=1.5 must not pass as 1).
    fractional = key != "causal" and (isinstance(value, (bool, np.bool_)) or (
        _is_number(value) and not float(value).is_integer()))
    if not _is_number(value) or fractional or (key != "causal" and int(value) < 1):
        raise NotApplicable("problem", f"size {key}={value!r} is not a positive integer")
    return int(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value)


def first_tensor_dtype(args: Mapping[str, Any]) -> str | None:
    """Name of the first tensor argument's dtype (``"float16"``), None without tensors."""
    for value in args.values():
        dtype = getattr(value, "dtype", None)
        if dtype is not None and hasattr(value, "shape"):
            return str(dtype).removeprefix("torch.")
    return None


def family_params(family: str, configs: Sequence[Any], *,
                  rename: Mapping[str, str]) -> list[dict[str, Any]]:
    """Per config: the family's parameters (renamed, neutral values filled in) plus num_warps
    and num_stages. Parameters the family does not know are left out."""
    required, neutral = FAMILY_PARAMS[family]
    out = []
    for c in configs:
        kw = {rename.get(k, k): v for k, v in c.kwargs.items()}
        missing = [p for p in required if p not in kw]
        if missing:
            raise NotApplicable("params", f"config {dict(c.kwargs)} lacks {family} "
                                f"parameter(s) {missing}; map yours with "
                                f"params={{'YOUR_NAME': '{missing[0]}'}}")
        d = {p: kw[p] for p in required}
        d.update((p, kw.get(p, v)) for p, v in neutral.items())
        d["num_warps"], d["num_stages"] = c.num_warps, c.num_stages
        out.append(d)
    return out


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
