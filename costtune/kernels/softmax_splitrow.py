"""Split-row softmax: one row is shared by several programs, in two launches, as vocabulary-
sized softmaxes and cross-entropies are written when rows are few and long (Unsloth's chunked
cross-entropy, flash-decoding's split-KV combine).

The row is cut into segments of ``SEGMENT`` chunks of ``BLOCK_N`` columns; the grid is (rows,
segments). The first launch streams each segment once (``tl.range`` over its chunks, software-
pipelined by ``num_stages``) keeping a per-lane running max and sum, and writes the segment's
(max, sum) to an fp32 scratch of ``rows x segments x 2``. The second launch has every program
read its row's segment statistics, combine them into the row's max and sum, and normalise its
own segment (the second read of the segment mostly hits L2). So a row of 65,536 columns can
spread over up to 512 programs, where the family's other kernels give it one: the hardware is
filled by splitting rows, not by batching them, at the price of a second launch, a scratch
round trip and a second read of ``x``.

``inputs``, ``make_inputs``, ``reference``, ``torch_op``, ``flops``, ``min_bytes``, the suites
and the tolerance are the softmax family's.

>>> from costtune.kernels import softmax_splitrow as sr
>>> sr.grid({"rows": 4, "cols": 50257}, {"BLOCK_N": 1024, "SEGMENT": 4, "num_warps": 4,
...                                      "num_stages": 2})
(4, 13)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from costtune.kernels import softmax as _family
from costtune.kernels.base import KernelCall, scratch
from costtune.kernels.softmax import (
    DTYPES,
    PROBLEM_KEYS,
    TEST_SHAPES,
    TOLERANCE,
    TRAIN_SHAPES,
    _next_pow2,
    flops,
    make_inputs,
    min_bytes,
    reference,
    torch_op,
)
from costtune.space.config_space import ConfigSpace
from costtune.types import Config

__all__ = ["DESCRIPTION", "DTYPES", "FAMILY", "NAME", "PROBLEM_KEYS", "TEST_SHAPES",
           "TOLERANCE", "TRAIN_SHAPES", "config_space", "flops", "grid", "implied_params",
           "kernel_calls", "launch", "make_inputs", "min_bytes", "reference", "segments",
           "shared_memory_floor", "torch_op"]

NAME = "softmax_splitrow"
FAMILY = "softmax"
DESCRIPTION = ("Split-row softmax in two launches: a (rows, segments) grid where each program "
               "streams SEGMENT chunks of BLOCK_N columns of one row and writes its segment's "
               "max and sum, then every program combines its row's segments and normalises "
               "its own; long rows spread over many programs.")

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
_PARAMS = ("BLOCK_N", "SEGMENT", "num_warps", "num_stages")
# At most this many segments per row: the combine loads them as one vector.
MAX_SEGMENTS = 512
# The launch whose compile the compiled features describe (both share the grid): the
# normalising one, which reads the statistics and x and writes the output (more registers).
MAIN_LAUNCH = 1


@triton.jit
def _segment_stats(x_ptr, stats_ptr, cols, n_seg, stride_xr, stride_xc,
                   BLOCK_N: tl.constexpr, SEGMENT: tl.constexpr, NUM_STAGES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    seg = tl.program_id(1)
    x_row = x_ptr + row * stride_xr
    col = seg * (SEGMENT * BLOCK_N) + tl.arange(0, BLOCK_N)
    m = tl.full([BLOCK_N], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK_N], tl.float32)
    for i in tl.range(0, SEGMENT, num_stages=NUM_STAGES):
        c = col + i * BLOCK_N
        x = tl.load(x_row + c * stride_xc, mask=c < cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # A lane that has seen only -inf keeps m = -inf: shift by 0 there, not by -inf.
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        s = s * tl.exp2((m - shift) * LOG2E) + tl.exp2((x - shift) * LOG2E)
        m = m_new
    m_seg = tl.max(m, axis=0)
    s_seg = tl.sum(s * tl.exp2((m - tl.where(m_seg == -float("inf"), 0.0, m_seg)) * LOG2E),
                   axis=0)
    slot = stats_ptr + (row * n_seg + seg) * 2
    tl.store(slot, m_seg)
    tl.store(slot + 1, s_seg)


@triton.jit
def _segment_normalize(x_ptr, out_ptr, stats_ptr, cols, n_seg, stride_xr, stride_xc,
                       stride_or, stride_oc, BLOCK_N: tl.constexpr, SEGMENT: tl.constexpr,
                       SEG_P2: tl.constexpr, NUM_STAGES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    seg = tl.program_id(1)
    k = tl.arange(0, SEG_P2)
    k_ok = k < n_seg
    row_stats = stats_ptr + (row * n_seg + k) * 2
    m_all = tl.load(row_stats, mask=k_ok, other=-float("inf"))
    s_all = tl.load(row_stats + 1, mask=k_ok, other=0.0)
    m_row = tl.max(m_all, axis=0)
    m_safe = tl.where(m_row == -float("inf"), 0.0, m_row)
    inv = 1.0 / tl.sum(s_all * tl.exp2((m_all - m_safe) * LOG2E), axis=0)
    x_row = x_ptr + row * stride_xr
    out_row = out_ptr + row * stride_or
    col = seg * (SEGMENT * BLOCK_N) + tl.arange(0, BLOCK_N)
    for i in tl.range(0, SEGMENT, num_stages=NUM_STAGES):
        c = col + i * BLOCK_N
        c_ok = c < cols
        x = tl.load(x_row + c * stride_xc, mask=c_ok, other=-float("inf")).to(tl.float32)
        y = tl.exp2((x - m_safe) * LOG2E) * inv
        tl.store(out_row + c * stride_oc, y.to(out_ptr.dtype.element_ty), mask=c_ok)


def _sizes(problem: dict[str, Any]) -> tuple[int, int]:
    return _family._sizes(problem, name=NAME)


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    return _family._config_values(config, params=_PARAMS, name=NAME)


def segments(cols: int, config: Config | dict[str, Any]) -> int:
    """Segments a row of ``cols`` columns is cut into: cdiv(cols, SEGMENT * BLOCK_N)."""
    cfg = _config_values(config)
    return triton.cdiv(int(cols), cfg["SEGMENT"] * cfg["BLOCK_N"])


def grid(problem: dict[str, Any], config: Config | dict[str, Any]) -> tuple[int, ...]:
    """(rows, segments): both launches run one program per (row, segment)."""
    rows, cols = _sizes(problem)
    return (rows, segments(cols, config))


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """One row per program (the family's ROWS_PER_PROG = 1) and two reads of x (PASSES: the
    statistics launch and the normalising one, also where one block holds the row); BLOCK_N
    is tuned."""
    return {"ROWS_PER_PROG": 1, "PASSES": 2}


def kernel_calls(inputs: dict[str, torch.Tensor],
                 config: Config | dict[str, Any]) -> list[KernelCall]:
    """The statistics launch and the normalising launch; allocates ``out`` unless ``inputs``
    holds one, and the fp32 segment-statistics scratch."""
    cfg = _config_values(config)
    x, out = _family.check_inputs(inputs)
    rows, cols = x.shape
    n_seg = segments(cols, cfg)
    if n_seg > MAX_SEGMENTS:
        raise ValueError(f"{NAME} config cuts {cols} columns into {n_seg} segments; at most "
                         f"{MAX_SEGMENTS} (raise BLOCK_N or SEGMENT)")
    stats = scratch((rows * n_seg * 2,), torch.float32, x.device)
    meta = {"BLOCK_N": cfg["BLOCK_N"], "SEGMENT": cfg["SEGMENT"],
            "NUM_STAGES": cfg["num_stages"]}
    launch_grid = (rows, n_seg)
    opts = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    return [
        KernelCall(_segment_stats, launch_grid,
                   (x, stats, cols, n_seg, x.stride(0), x.stride(1)), dict(meta), **opts),
        KernelCall(_segment_normalize, launch_grid,
                   (x, out, stats, cols, n_seg, x.stride(0), x.stride(1), out.stride(0),
                    out.stride(1)), {**meta, "SEG_P2": max(2, _next_pow2(n_seg))}, **opts),
    ]


def launch(inputs: dict[str, torch.Tensor], config: Config | dict[str, Any]) -> torch.Tensor:
    """Run both launches and return the softmax (a new tensor unless ``inputs["out"]``)."""
    calls = kernel_calls(inputs, config)
    for call in calls:
        call.run()
    return calls[-1].args[1]


def config_space(problem: dict[str, Any] | None = None) -> ConfigSpace:
    """BLOCK_N x SEGMENT x num_warps x num_stages. A chunk's values per thread, ``BLOCK_N /
    (32 * num_warps)``, lie in [2, 16]: per-lane max, sum and the loaded chunk stay in
    registers (32 values with 3 stages spilled 8 bytes on sm_90, 16 values at 16 warps 16
    bytes, so 16 warps are left out). With a problem: a segment (and so a chunk) at most
    next_pow2(cols), at most 512 segments, stages only where a segment loops, and a split
    (several segments) only where the rows alone leave SMs idle (fewer than 8 per SM)."""
    params = {
        "BLOCK_N": [2**k for k in range(7, 13)],
        "SEGMENT": [1, 2, 4, 8, 16],
        "num_warps": [1, 2, 4, 8],
        "num_stages": [1, 2, 3],
    }

    def values_per_thread(c: dict[str, Any]) -> bool:
        return 2 <= c["BLOCK_N"] / (32 * c["num_warps"]) <= 16

    constraints = {
        "values_per_thread_2_to_16": values_per_thread,
        "stages_only_when_a_segment_loops": lambda c: c["num_stages"] == 1 or c["SEGMENT"] > 1,
    }
    if problem is not None:
        rows, cols = _sizes(problem)
        block_max = max(128, _next_pow2(cols))
        from costtune.hardware import H200

        few_rows = rows < 8 * H200.num_sms
        constraints.update({
            "block_n_le_next_pow2_cols": lambda c: c["BLOCK_N"] <= block_max,
            "segment_le_next_pow2_cols": lambda c: c["SEGMENT"] * c["BLOCK_N"] <= block_max,
            "at_most_512_segments": lambda c: segments(cols, c) <= MAX_SEGMENTS,
            "split_only_for_few_rows": lambda c: few_rows or segments(cols, c) == 1,
        })
    return ConfigSpace(params, constraints=constraints)


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | Any:
    """Bytes of shared memory this kernel needs at least once compiled: none claimed (0), as
    the family's: chunks live in registers and what the pipeliner stages varies with the load
    width. Vectorised like the family's.

    >>> shared_memory_floor({"rows": 8, "cols": 4096}, {"BLOCK_N": 1024, "SEGMENT": 2,
    ...     "num_warps": 4, "num_stages": 2}, dtype="float16", aligned={"x": True})
    0
    """
    shape = np.broadcast(*(np.asarray(config[k]) for k in _PARAMS)).shape
    return 0 if shape == () else np.zeros(shape, dtype=np.int64)
