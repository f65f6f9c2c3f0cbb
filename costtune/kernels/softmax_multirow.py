"""Looped multi-row softmax, in the style of the "red" reduction kernel torch.compile (Inductor)
generates for a softmax over a long last dim.

Each program owns ``ROWS_PER_PROG`` rows as a 2-D ``[ROWS_PER_PROG, BLOCK_N]`` block and walks
the rows in ``BLOCK_N``-column chunks three times, as Inductor's classic (non-online) softmax
does: pass 1 keeps a per-lane running max, pass 2 a per-lane sum of ``exp2(x - max)``, each
followed by one cross-lane reduction per row; pass 3 normalises and stores. The first two passes
load with ``evict_last`` (the row is read again), the last with ``evict_first``. Three reads
instead of the family original's two (online max/sum, then store) trade L2 traffic for no
rescaling in the loop. ``BLOCK_N`` may be smaller than ``cols`` (the passes loop) and
``ROWS_PER_PROG`` > 1 with it: the configs Inductor's heuristics pick for such rows, which the
family's original space never holds. Every suite shape is supported, none is dropped.

``inputs``, ``make_inputs``, ``reference``, ``torch_op``, ``flops``, ``min_bytes``, the suites
and the tolerance are the softmax family's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from costtune.hardware import H200
from costtune.kernels import softmax as _family
from costtune.kernels.base import KernelCall
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
           "kernel_calls", "launch", "make_inputs", "min_bytes", "reference",
           "shared_memory_floor", "torch_op"]

NAME = "softmax_multirow"
FAMILY = "softmax"
DESCRIPTION = ("Inductor-style looped softmax: each program reduces several rows at once as a "
               "2-D block, streaming them in column chunks through three passes (max, sum, "
               "normalise) with per-lane accumulators and L2 eviction hints.")

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
_PARAMS = ("BLOCK_N", "ROWS_PER_PROG", "num_warps", "num_stages")


@triton.jit
def _softmax_multirow(x_ptr, out_ptr, rows, cols, stride_xr, stride_xc, stride_or, stride_oc,
                      BLOCK_N: tl.constexpr, ROWS_PER_PROG: tl.constexpr):
    row = tl.program_id(0) * ROWS_PER_PROG + tl.arange(0, ROWS_PER_PROG)[:, None]
    # Rows past the end re-read the last row (finite, no NaN); only their stores are masked.
    x_row = x_ptr + tl.minimum(row, rows - 1).to(tl.int64) * stride_xr
    col = tl.arange(0, BLOCK_N)[None, :]
    m_lane = tl.full([ROWS_PER_PROG, BLOCK_N], -float("inf"), tl.float32)
    for c0 in range(0, cols, BLOCK_N):
        c = c0 + col
        x = tl.load(x_row + c * stride_xc, mask=c < cols, other=-float("inf"),
                    eviction_policy="evict_last").to(tl.float32)
        m_lane = tl.maximum(m_lane, x)
    m = tl.max(m_lane, axis=1)[:, None]
    s_lane = tl.zeros([ROWS_PER_PROG, BLOCK_N], tl.float32)
    for c0 in range(0, cols, BLOCK_N):
        c = c0 + col
        x = tl.load(x_row + c * stride_xc, mask=c < cols, other=-float("inf"),
                    eviction_policy="evict_last").to(tl.float32)
        s_lane += tl.exp2((x - m) * LOG2E)
    inv = 1.0 / tl.sum(s_lane, axis=1)[:, None]
    out_row = out_ptr + row.to(tl.int64) * stride_or
    for c0 in range(0, cols, BLOCK_N):
        c = c0 + col
        c_ok = c < cols
        x = tl.load(x_row + c * stride_xc, mask=c_ok, other=-float("inf"),
                    eviction_policy="evict_first").to(tl.float32)
        y = tl.exp2((x - m) * LOG2E) * inv
        tl.store(out_row + c * stride_oc, y.to(out_ptr.dtype.element_ty),
                 mask=(row < rows) & c_ok)



def _sizes(problem: dict[str, Any]) -> tuple[int, int]:
    return _family._sizes(problem, name=NAME)


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    return _family._config_values(config, params=_PARAMS, name=NAME)


def grid(problem: dict[str, Any], config: Config | dict[str, Any]) -> tuple[int, ...]:
    """(cdiv(rows, ROWS_PER_PROG),)."""
    rows, _ = _sizes(problem)
    return (triton.cdiv(rows, _config_values(config)["ROWS_PER_PROG"]),)


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """BLOCK_N and ROWS_PER_PROG are both tuned: nothing is fixed."""
    return {}


def kernel_calls(inputs: dict[str, torch.Tensor],
                 config: Config | dict[str, Any]) -> list[KernelCall]:
    """The one launch ``launch`` makes; allocates ``out`` unless ``inputs`` holds one."""
    cfg = _config_values(config)
    x, out = _family.check_inputs(inputs)
    rows, cols = x.shape
    args = (x, out, rows, cols, x.stride(0), x.stride(1), out.stride(0), out.stride(1))
    kwargs = {"BLOCK_N": cfg["BLOCK_N"], "ROWS_PER_PROG": cfg["ROWS_PER_PROG"]}
    return [KernelCall(_softmax_multirow, grid({"rows": rows, "cols": cols}, cfg), args, kwargs,
                       num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])]


def launch(inputs: dict[str, torch.Tensor], config: Config | dict[str, Any]) -> torch.Tensor:
    """Run the kernel and return the softmax (a new tensor unless ``inputs["out"]`` is given)."""
    calls = kernel_calls(inputs, config)
    for call in calls:
        call.run()
    return calls[-1].args[1]


def config_space(problem: dict[str, Any] | None = None) -> ConfigSpace:
    """ROWS_PER_PROG x BLOCK_N x num_warps (num_stages 1, as Inductor's reductions) under a
    register budget: the 2-D block's fp32 values per thread, ``ROWS_PER_PROG * BLOCK_N /
    (32 * num_warps)``, lie in [4, 32] (two per-lane accumulators and the loaded chunk stay in
    registers; below 4 a thread's loads are narrower than 16 bytes of fp32). With a problem:
    blocks at most next_pow2 of the sizes, and several rows per program only while the grid
    still covers every SM."""
    params = {
        "ROWS_PER_PROG": [1, 2, 4, 8, 16, 32],
        "BLOCK_N": [2**k for k in range(7, 14)],
        "num_warps": [1, 2, 4, 8, 16],
        "num_stages": [1],
    }

    def values_per_thread(c: dict[str, Any]) -> bool:
        return 4 <= c["ROWS_PER_PROG"] * c["BLOCK_N"] / (32 * c["num_warps"]) <= 32

    constraints = {"values_per_thread_4_to_32": values_per_thread}
    if problem is not None:
        rows, cols = _sizes(problem)
        block_max = max(128, _next_pow2(cols))
        constraints.update({
            "block_n_le_next_pow2_cols": lambda c: c["BLOCK_N"] <= block_max,
            "rows_per_prog_fills_sms": lambda c: (c["ROWS_PER_PROG"] == 1
                                                  or rows >= c["ROWS_PER_PROG"] * H200.num_sms),
        })
    return ConfigSpace(params, constraints=constraints)


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | Any:
    """Bytes of shared memory this kernel needs at least once compiled: none claimed (0). The
    block lives in registers; shared memory holds only the row reductions' scratch (a few words
    per warp), and the loops are not pipelined with one stage. Vectorised like the family's.

    >>> shared_memory_floor({"rows": 8, "cols": 4096}, {"BLOCK_N": 1024, "ROWS_PER_PROG": 1,
    ...     "num_warps": 4, "num_stages": 1}, dtype="float16", aligned={"x": True})
    0
    """
    shape = np.broadcast(*(np.asarray(config[k]) for k in _PARAMS)).shape
    return 0 if shape == () else np.zeros(shape, dtype=np.int64)
