"""Doubts a described launch's arguments raise about its sizes: what the family's workloads do
not have though the sizes read fine. Each is a (category, message) of ``Launch.doubts``: the
hook widens k.

- attention: keys of another length than the queries (cross-attention: by a length argument,
  or the keys' shape), a sliding window shorter than the sequence (banded work, not the full
  or causal square), an S x S bias or mask tensor;
- GEMM: operands read as batched, A and B of different kinds (fp16 x int8 or int4 packed in
  int32: a weight-only quantized GEMM dequantizes in its loop);
- softmax: a tensor over twice the input (a decode attention computing q.k with sums), or no
  other tensor the input's size but one per row (a loss, a logsumexp: per-row outputs, not a
  softmax's traffic).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from costtune.kernels.base import (
    GEMM_B_NAMES,
    INPUT_NAMES,
    KEY_NAMES,
    KV_LENGTH_NAMES,
    WINDOW_NAMES,
)
from costtune.tune.sizes import BATCHED, tensors_in

__all__ = ["problem_doubts"]

Doubt = tuple[str, str]
_MASK = re.compile(r"bias|mask|alibi", re.IGNORECASE)
# Element types whose GEMMs the data holds none of beside float operands.
_NARROW = ("int", "uint", "float8", "bool")


def problem_doubts(family: str, problem: Mapping[str, int], dtype: str,
                   origin: Mapping[str, str], args: Mapping[str, Any]) -> tuple[Doubt, ...]:
    """Doubts ``args`` raise about a launch read as ``family`` at ``problem`` and ``dtype``."""
    if family == "attention":
        return _attention(problem, args)
    if family == "gemm":
        return _gemm(problem, dtype, origin, args)
    if family == "softmax":
        return _softmax(problem, args)
    return ()


def _int_arg(args: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str, int] | None:
    return next(((n, int(args[n])) for n in names if isinstance(args.get(n), int)
                 and not isinstance(args[n], bool)), None)


def _attention(problem: Mapping[str, int], args: Mapping[str, Any]) -> tuple[Doubt, ...]:
    out: list[Doubt] = []
    s = problem["S"]
    tensors = tensors_in(args)
    keys = _int_arg(args, KV_LENGTH_NAMES) or _key_length(problem, tensors)
    if keys is not None and keys[1] != s:
        out.append(("shape", f"cross-attention: {keys[1]} keys ({keys[0]}) for {s} queries; "
                    "the attention model saw S of both"))
    window = _int_arg(args, WINDOW_NAMES)
    if window is not None and 0 < window[1] < s:
        out.append(("shape", f"a sliding window ({window[0]} = {window[1]}) over S = {s}: "
                    "banded work, where the attention model saw full or causal attention"))
    ints = [t[0] for t in tensors if t[2].startswith(("int", "uint"))]
    if ints:  # read with problem= (else no sizes are read): still not a dense batch's work
        out.append(("shape", f"integer tensors {ints[:3]} (offsets, block tables or a block "
                    "mask): the work is not a dense batch's"))
    # Where S == D every (B, H, S, D) tensor is "S x S": then only one named as a bias or mask.
    square = next((t for t in tensors if len(t[1]) >= 2 and t[1][-2:] == (s, s)
                   and s > 1 and (s != problem["D"] or _MASK.search(t[0]))), None)
    if square is not None:
        out.append(("shape", f"{square[0]} {tuple(square[1])} is an S x S bias or mask; the "
                    "attention model saw no such term"))
    return tuple(out)


def _key_length(problem: Mapping[str, int], tensors: list) -> tuple[str, int] | None:
    """(the keys' tensor, its length) where a keys tensor of the query's rank differs from
    the query's shape only where the query has S (a chunked prefill over a longer cache)."""
    ranked = {t[0]: t[1] for t in tensors}
    q = next((shape for n, shape in ranked.items() if n in INPUT_NAMES["attention"]), None)
    k = next(((n, ranked[n]) for n in KEY_NAMES if n in ranked), None)
    if q is None or k is None or len(k[1]) != len(q):
        return None
    differ = [d for d in range(len(q)) if q[d] != k[1][d]]
    if len(differ) == 1 and q[differ[0]] == problem["S"]:
        return f"{k[0]}.shape[{differ[0]}]", k[1][differ[0]]
    return None


def _gemm(problem: Mapping[str, int], dtype: str, origin: Mapping[str, str],
          args: Mapping[str, Any]) -> tuple[Doubt, ...]:
    out: list[Doubt] = []
    if BATCHED in str(origin.get("M", "")):
        out.append(("grid", f"batched operands ({origin['M']}) are read as one gemm of "
                    f"M = {problem['M']} rows; the model never saw batched operands"))
    mats = [t for t in tensors_in(args) if len(t[1]) >= 2]
    a = next((t for t in mats if t[0] in INPUT_NAMES["gemm"]), mats[0] if mats else None)
    b = next((t for t in mats if t[0] in GEMM_B_NAMES and t is not a),
             next((t for t in mats if t is not a), None))
    second = _second_product(problem, mats, a, b)
    if second is not None:
        out.append(("kind", f"{second}: a second GEMM in the launch (mm_plus_mm?), which the "
                    "gemm data never had"))
    if a is not None and b is not None and a[2] != b[2] and (
            a[2].startswith(_NARROW) or b[2].startswith(_NARROW)):
        out.append(("dtype", f"mixed operands: {a[0]} {a[2]} x {b[0]} {b[2]} (a quantized "
                    f"weight?); the gemm data holds GEMMs of one dtype ({dtype})"))
    return tuple(out)


def _second_product(problem: Mapping[str, int], mats: list, a: Any, b: Any) -> str | None:
    """'c @ d' where two more operands multiply to the M x N output (A @ B + C @ D)."""
    rest = [t for t in mats if t is not a and t is not b and len(t[1]) == 2
            and "out" not in t[0].lower()]  # the output may have any shape it likes
    for c in rest:
        for d in rest:
            # Inductor's mm_plus_mm names them arg_C / arg_D; otherwise neither may be of the
            # output's shape (an M x N bias beside an M x N output of a square GEMM).
            output_like = (problem["M"], problem["N"]) in (c[1], d[1])
            if (c is not d and c[1][0] == problem["M"] and d[1][1] == problem["N"]
                    and c[1][1] == d[1][0] > 1  # (M, 1) x (1, N): row and column scales
                    and ((c[0], d[0]) == ("arg_C", "arg_D") or not output_like)):
                return f"{c[0]} {c[1]} @ {d[0]} {d[1]}"
    return None


def _softmax(problem: Mapping[str, int], args: Mapping[str, Any]) -> tuple[Doubt, ...]:
    rows, cols = problem["rows"], problem["cols"]
    size = rows * cols
    tensors = [t for t in tensors_in(args) if len(t[1]) >= 1]
    # More than twice the input (a row padded to a power of two is no more than that).
    bigger = next((t for t in tensors if math.prod(t[1]) > 2 * size), None)
    if bigger is not None:
        return (("kind", f"{bigger[0]} {tuple(bigger[1])} is larger than the softmax input "
                 f"({rows} x {cols}): a decode attention or another kernel over more data "
                 "than one row softmax"),)
    sizes = [math.prod(t[1]) for t in tensors]
    whole = sum(size / 2 <= n <= 2 * size for n in sizes)  # the input's size, give or take
    per_row = sum(n == rows for n in sizes)
    if whole == 1 and per_row and cols > 1:
        return (("kind", f"no output of the input's size ({rows} x {cols}), but {per_row} "
                 "per row: a loss, a row reduction or one stage of a split one, not a "
                 "softmax's traffic"),)
    x = next((t for t in tensors if t[0] in INPUT_NAMES["softmax"]), tensors[0] if tensors
             else None)
    if x is not None and math.prod(x[1]) == size and x[1][-1] != cols:
        return (("shape", f"the rows are not {x[0]}'s last dim ({x[0]} {tuple(x[1])}, "
                 f"{cols} columns): a reduction over a strided dim, which the softmax data "
                 "never had"),)
    return ()
