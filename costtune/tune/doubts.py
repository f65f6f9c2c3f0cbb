"""Doubts a described launch's arguments raise about its sizes: what the family's workloads do
not have though the sizes read fine. Each is a (category, message) of ``Launch.doubts``: the
hook widens k.

- attention: keys of another length than the queries (cross-attention), a sliding window
  shorter than the sequence (banded work, not the full or causal square);
- GEMM: operands read as batched, A and B of different kinds (fp16 x int8 or int4 packed in
  int32: a weight-only quantized GEMM dequantizes in its loop);
- softmax: no other tensor the input's size but one per row (a loss, a logsumexp: per-row
  outputs, not a softmax's traffic).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from costtune.kernels.base import GEMM_B_NAMES, INPUT_NAMES, KV_LENGTH_NAMES, WINDOW_NAMES
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
    keys = _int_arg(args, KV_LENGTH_NAMES)
    if keys is not None and keys[1] != problem["S"]:
        out.append(("problem", f"cross-attention: {keys[1]} keys for {problem['S']} queries; "
                    "the attention model saw S of both"))
    window = _int_arg(args, WINDOW_NAMES)
    if window is not None and 0 < window[1] < problem["S"]:
        out.append(("problem", f"a sliding window ({window[0]} = {window[1]}) over "
                    f"S = {problem['S']}: banded work, where the attention model saw full or "
                    "causal attention"))
    return tuple(out)


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
    sizes = [math.prod(t[1]) for t in tensors_in(args) if len(t[1]) >= 1]
    whole = sum(n == size for n in sizes)
    per_row = sum(n == problem["rows"] for n in sizes)
    if whole == 1 and per_row and problem["cols"] > 1:
        return (("kind", f"no output of the input's size ({problem['rows']} x "
                 f"{problem['cols']}), but {per_row} per row: a loss or a row reduction, "
                 "not a softmax's traffic"),)
    return ()
