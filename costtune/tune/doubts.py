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
    keys = _int_arg(args, KV_LENGTH_NAMES) or _key_length(problem, args)
    if keys is not None and keys[1] != s:
        out.append(("shape", f"cross-attention: {keys[1]} keys ({keys[0]}) for {s} queries; "
                    "the attention model saw S of both"))
    window = _int_arg(args, WINDOW_NAMES)
    if window is not None and 0 < window[1] < s:
        out.append(("shape", f"a sliding window ({window[0]} = {window[1]}) over S = {s}: "
                    "banded work, where the attention model saw full or causal attention"))
    square = next((t for t in tensors_in(args) if len(t[1]) >= 2 and t[1][-2:] == (s, s)
                   and s > 1), None)
    if square is not None:
        out.append(("shape", f"{square[0]} {tuple(square[1])} is an S x S bias or mask; the "
                    "attention model saw no such term"))
    return tuple(out)


def _key_length(problem: Mapping[str, int], args: Mapping[str, Any]) -> tuple[str, int] | None:
    """(the keys' tensor, its length) where a keys tensor of the query's rank differs from
    the query's shape only where the query has S (a chunked prefill over a longer cache)."""
    ranked = {t[0]: t[1] for t in tensors_in(args)}
    q = next((ranked[n] for n in INPUT_NAMES["attention"] if n in ranked), None)
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
    if a is not None and b is not None and a[2] != b[2] and (
            a[2].startswith(_NARROW) or b[2].startswith(_NARROW)):
        out.append(("dtype", f"mixed operands: {a[0]} {a[2]} x {b[0]} {b[2]} (a quantized "
                    f"weight?); the gemm data holds GEMMs of one dtype ({dtype})"))
    return tuple(out)


def _softmax(problem: Mapping[str, int], args: Mapping[str, Any]) -> tuple[Doubt, ...]:
    size = problem["rows"] * problem["cols"]
    tensors = [t for t in tensors_in(args) if len(t[1]) >= 1]
    # More than twice the input (a row padded to a power of two is no more than that).
    bigger = next((t for t in tensors if math.prod(t[1]) > 2 * size), None)
    if bigger is not None:
        return (("kind", f"{bigger[0]} {tuple(bigger[1])} is larger than the softmax input "
                 f"({problem['rows']} x {problem['cols']}): a decode attention or another "
                 "kernel over more data than one row softmax"),)
    sizes = [math.prod(t[1]) for t in tensors]
    whole = sum(n == size for n in sizes)
    per_row = sum(n == problem["rows"] for n in sizes)
    if whole == 1 and per_row and problem["cols"] > 1:
        return (("kind", f"no output of the input's size ({problem['rows']} x "
                 f"{problem['cols']}), but {per_row} per row: a loss or a row reduction, "
                 "not a softmax's traffic"),)
    return ()
