"""A launch's problem sizes and dtype, and where each came from: a ``problem=`` mapping, an
argument named as the family's kernels name it (``costtune.kernels.base.SIZE_NAMES``), a coded
flag (tutorial 06's ``STAGE``), else the shapes of tensor and ``TensorDescriptor`` arguments.

>>> import torch
>>> sizes, origin = find_problem("softmax", {"x": torch.empty(8, 100), "n_cols": 100},
...                              spec=None)
>>> sizes, origin["rows"]
({'rows': 8, 'cols': 100}, 'x.shape[:-1]')
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from costtune.kernels.base import (
    CODED_FLAGS,
    GEMM_B_NAMES,
    INPUT_NAMES,
    PROBLEM_KEYS,
    SIZE_NAMES,
)

ProblemSpec = Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]] | None


class NotApplicable(Exception):
    """The launch cannot be described in a family's terms; ``category`` names why."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category


def is_descriptor(value: Any) -> bool:
    """A host-side ``triton.tools.tensor_descriptor.TensorDescriptor`` (duck-typed)."""
    return (hasattr(value, "base") and hasattr(value, "block_shape")
            and hasattr(value, "shape") and hasattr(value.base, "dtype"))


# Tensors of these dtypes hold indices, sizes, offsets or pointers (a grouped GEMM's per-group
# sizes, a varlen attention's cu_seqlens), never a family's operands: their shapes and dtype
# say nothing about the problem.
METADATA_DTYPES = frozenset({"int32", "int64", "uint32", "uint64", "bool"})


def operands(args: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...], str, str]]:
    """(name, shape, dtype, "tensor" | "descriptor") of every tensor-like argument that can be
    an operand (not metadata: ``METADATA_DTYPES``), in order."""
    return [o for o in tensors_in(args) if o[2] not in METADATA_DTYPES]


def tensors_in(args: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...], str, str]]:
    """(name, shape, dtype, "tensor" | "descriptor") of every tensor-like argument, integer
    ones too (an int4 weight packed in int32)."""
    out = []
    for name, value in args.items():
        if is_descriptor(value):
            out.append((name, tuple(int(s) for s in value.shape), _dtype(value.base),
                        "descriptor"))
        elif hasattr(value, "shape") and hasattr(value, "dtype"):
            out.append((name, tuple(int(s) for s in value.shape), _dtype(value), "tensor"))
    return out


def _dtype(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def find_problem(family: str, args: Mapping[str, Any], *,
                 spec: ProblemSpec) -> tuple[dict[str, int], dict[str, str]]:
    """(sizes, origin of each size); NotApplicable naming the first size not found."""
    keys = PROBLEM_KEYS[family]
    ints = _metadata_tensors(args) if family == "attention" and not spec else []
    if ints:
        flex = [n for n in ints if re.search(r"NUM_BLKS|_IDX$", n, flags=re.IGNORECASE)]
        what = (f"a block-sparse (flex) attention (block-mask tensors {flex[:3]})" if flex
                else f"a varlen or paged attention (integer tensors {ints[:3]}: sequence "
                     "offsets or block tables)")
        raise NotApplicable("problem", f"{what}: no B x H x S x D describes it; pass problem= "
                            "to rank it as a dense batch anyway (k stays widened)")
    if callable(spec):
        given = dict(spec(dict(args)))
        origin = {k: "problem=" for k in given}
    else:
        given = {k: _lookup(v, args) for k, v in (spec or {}).items()}
        origin = {k: f"problem= {v!r}" for k, v in (spec or {}).items()}
    out: dict[str, int] = {}
    for key in keys:
        value = given.get(key)
        if value is None:
            value, origin[key] = _named(family, key, args)
        if value is None:
            shapes = _from_shapes(family, args, known=out)
            value, origin[key] = shapes.get(key, (None, ""))
        if value is None and key == "causal":
            value, origin[key] = 0, "default (not causal)"
        if value is None:
            raise NotApplicable("problem", f"cannot find {family} size {key!r} in the args "
                                f"{sorted(args)}; pass problem={{'{key}': 'arg_name'}}")
        out[key] = _size(key, value)
    return out, {k: origin[k] for k in keys}


def _named(family: str, key: str, args: Mapping[str, Any]) -> tuple[Any, str]:
    for name in SIZE_NAMES[family].get(key, (key,)):
        value = args.get(name)
        if value is not None and _is_number(value):
            return value, f"arg {name}"
    coded = CODED_FLAGS.get(family, {}).get(key)
    if coded is not None:
        name, codes = coded
        value = args.get(name)
        if _is_number(value) and int(value) in codes:
            return codes[int(value)], f"arg {name}={int(value)}"
    return None, ""


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


def _from_shapes(family: str, args: Mapping[str, Any], *,
                 known: dict[str, int]) -> dict[str, tuple[int, str]]:
    """Sizes read off tensor / descriptor shapes, each with its origin."""
    ops = operands(args)
    if family == "gemm":
        return _gemm_shapes([o for o in ops if len(o[1]) >= 2])
    if family == "softmax":
        named = [o for o in ops if o[0] in INPUT_NAMES["softmax"]]
        x = next(iter(named or ops), None)
        if x is None or not x[1] or x[1][-1] < 1:
            return {}
        name, shape = x[0], x[1]
        return {"rows": (math.prod(shape[:-1]), f"{name}.shape[:-1]"),
                "cols": (shape[-1], f"{name}.shape[-1]")}
    named_q = next((o for o in ops if o[0] in INPUT_NAMES["attention"]), None)
    q = named_q if named_q is not None and len(named_q[1]) == 4 else next(
        (o for o in ops if len(o[1]) == 4 and named_q is None
         and not _NOT_QUERY.search(o[0])), None)
    if q is not None:
        order = _attention_layout(q[1], args)
        return {k: (q[1][i], f"{q[0]}.shape[{i}]") for k, i in zip("BHSD", order, strict=True)}
    # Tutorial 06's descriptors: [B*H*S, D] views of q, k, v and o.
    flat = next((o for o in ops if len(o[1]) == 2 and o[0] in INPUT_NAMES["attention"]), None)
    if flat is None:
        return {}
    out = {"D": (flat[1][1], f"{flat[0]}.shape[1]")}
    b, h = known.get("B"), known.get("H")
    if b and h and flat[1][0] % (b * h) == 0:
        out["S"] = (flat[1][0] // (b * h), f"{flat[0]}.shape[0] / (B*H)")
    return out


# 4-D tensors an attention kernel takes that are no query: biases, masks, outputs.
_NOT_QUERY = re.compile(r"bias|mask|alibi|out|lse|(^|_)o(_ptr)?$", re.IGNORECASE)
# Said in the origin of M when a batch of GEMMs is read as one (B*M) x N x K GEMM; the launch
# gets a doubt for it (``launch.describe``).
BATCHED = "batched operands"


def _attention_layout(shape: tuple[int, ...], args: Mapping[str, Any]) -> tuple[int, ...]:
    """Axes of B, H, S, D in a 4-D query: tutorial 06's (B, H, S, D), or flash-attn's (B, S,
    H, D) where the sizes named in the args (``nheads``, ``seqlen_q``) say so."""
    named = {k: _named("attention", k, args)[0] for k in "HS"}
    for order in ((0, 1, 2, 3), (0, 2, 1, 3)):
        if all(v is None or int(v) == shape[order["BHSD".index(k)]]
               for k, v in named.items()):
            return order
    return (0, 1, 2, 3)


def _metadata_tensors(args: Mapping[str, Any]) -> list[str]:
    """Names of the integer tensor arguments (sequence offsets, block tables, indices)."""
    return [name for name, _, dtype, kind in tensors_in(args)
            if kind == "tensor" and dtype in METADATA_DTYPES - {"bool"}]


def _gemm_shapes(mats: list[tuple[str, tuple[int, ...], str, str]]
                 ) -> dict[str, tuple[int, str]]:
    """M, N, K from the operands named as a GEMM's A and B (``INPUT_NAMES``,
    ``GEMM_B_NAMES``: Inductor's arg_A / arg_B too), else the first two: a (..., M, K), its
    leading dims folded into M (nn.Linear's (B, S, K) activation), and b (K, N) or, as
    tutorial 09's TMA kernels and x @ w.t() take it, b (N, K); a b with leading dims of the
    same count is a batched GEMM (bmm), read as (B*M) x N x K with ``BATCHED`` in M's origin.
    Another operand of M*N elements settles which."""
    a = next((o for o in mats if o[0] in INPUT_NAMES["gemm"]), None)
    b = next((o for o in mats if o[0] in GEMM_B_NAMES and o is not a), None)
    named = a is not None and b is not None
    if not named:
        if len(mats) < 2:
            return {}
        a, b = mats[0], mats[1]
    rest = [o[1] for o in mats if o is not a and o is not b]
    (an, ashape), (bn, bshape) = a[:2], b[:2]
    (m, k), lead = ashape[-2:], math.prod(ashape[:-2])
    if len(bshape) > 2 and math.prod(bshape[:-2]) != lead:
        return {}
    rows = m * lead
    how = f"{an}.shape[0]" if len(ashape) == 2 else f"prod({an}.shape[:-1])"
    if len(bshape) > 2:
        how += f" ({BATCHED}: {lead} GEMMs)"
    sizes = {math.prod(r) for r in rest}
    fits = [(n, note) for kb, n, note in (
        (bshape[-2], bshape[-1], f"{bn}.shape[-1]"),
        (bshape[-1], bshape[-2], f"{bn}.shape[-2] (b is N x K)")) if kb == k]
    # An operand of M*N elements (the output) settles which. Operands named as A and B may
    # come with epilogue operands (a row scale, a broadcast bias) and no such one; the first
    # two tensors taken as A and B must have it.
    match = [f for f in fits if not sizes or rows * f[0] in sizes]
    if not match and named and fits:
        match = fits[:1]
    if not match:
        return {}
    n, note = match[0]
    return {"M": (rows, how), "N": (n, note), "K": (k, f"{an}.shape[-1]")}


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


def launch_dtype(family: str | None, args: Mapping[str, Any]) -> tuple[str | None, str]:
    """(dtype, origin): the family's input operand by its usual names (``a``, ``x``,
    ``desc_q``...), else the commonest dtype among tensor and descriptor arguments (an fp32
    statistics buffer beside fp16 operands does not decide); None without any."""
    ops = operands(args)
    if not ops:
        return None, ""
    for name, _, dtype, _ in ops:
        if family is not None and name in INPUT_NAMES[family]:
            return dtype, f"arg {name}"
    counts = Counter(dtype for _, _, dtype, _ in ops)
    best = max(counts.values())
    name, _, dtype, _ = next(o for o in ops if counts[o[2]] == best)
    return dtype, f"arg {name}" + (f" ({best} of {len(ops)} operands)" if len(counts) > 1
                                   else "")


def first_tensor_dtype(args: Mapping[str, Any]) -> str | None:
    """Name of the first tensor (or descriptor) argument's dtype, None without any."""
    ops = operands(args)
    return ops[0][2] if ops else None
