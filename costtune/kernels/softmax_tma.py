"""Row softmax over host TMA descriptors: rows move between global and shared memory as bulk
tensor copies of ``[ROWS_PER_PROG, BLOCK_N]`` boxes, never as per-thread loads.

A TMA box holds at most 256 elements per dimension, so a row wider than 256 columns is always
streamed in chunks: each program owns ``ROWS_PER_PROG`` rows, runs an online pass over the
chunks (per-lane running max and sum, one exp2 per element) and then an output pass that
reloads each chunk and stores the normalised box by TMA. ``num_stages`` software-pipelines both
chunk loops (``tl.range``): the next boxes' bulk copies are in flight in shared memory while
the current one is reduced. Rows of at most ``BLOCK_N`` columns take one pass (one load, one
store). Columns past the row arrive zero-filled and are masked to -inf in registers; rows past
the end are zero-filled on load and clipped on store, so no mask or address arithmetic touches
global memory.

TMA needs 16-byte aligned row strides: contiguous rows of ``cols * itemsize % 16 == 0`` bytes
(fp16 / bf16: ``cols % 8 == 0``). Suite shapes that break it have no config and are dropped:
50257, 21843, 100, 91 and 1234 columns.

``inputs``, ``make_inputs``, ``reference``, ``torch_op``, ``flops``, ``min_bytes``, the suites
and the tolerance are the softmax family's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from costtune.hardware import H200
from costtune.kernels import softmax as _family
from costtune.kernels.base import KernelCall
from costtune.kernels.softmax import (
    DTYPES,
    PROBLEM_KEYS,
    TOLERANCE,
    _next_pow2,
    flops,
    make_inputs,
    min_bytes,
    reference,
    torch_op,
)
from costtune.space.config_space import ConfigSpace
from costtune.types import Config

__all__ = ["BF16_SUBSET", "DESCRIPTION", "DTYPES", "FAMILY", "NAME", "PROBLEM_KEYS", "TEST_SHAPES",
           "TOLERANCE", "TRAIN_SHAPES", "config_space", "flops", "grid", "implied_params",
           "kernel_calls", "launch", "make_inputs", "min_bytes", "reference",
           "shared_memory_floor", "torch_op"]

NAME = "softmax_tma"
FAMILY = "softmax"
DESCRIPTION = ("Row softmax over host TMA descriptors: [ROWS_PER_PROG, BLOCK_N] boxes (at most "
               "256 columns) move by bulk tensor copies through a software-pipelined online "
               "pass and an output pass; out-of-range columns masked in registers.")

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
_PARAMS = ("BLOCK_N", "ROWS_PER_PROG", "num_warps", "num_stages")
# A TMA box dimension holds at most 256 elements.
MAX_BOX = 256
# Bytes every row stride (and the base) must be a multiple of.
TMA_ALIGN = 16


def tma_ok(cols: int, itemsize: int) -> bool:
    """Whether rows of ``cols`` elements of ``itemsize`` bytes have a TMA-legal stride."""
    return cols * itemsize % TMA_ALIGN == 0


# The family's shapes whose fp16 / bf16 rows TMA can address.
TRAIN_SHAPES = [p for p in _family.TRAIN_SHAPES if tma_ok(p["cols"], 2)]
TEST_SHAPES = [p for p in _family.TEST_SHAPES if tma_ok(p["cols"], 2)]
# The family's bf16 shapes (every 4th of each suite) that TMA can address, so softmax_tma's
# bf16 workloads are the other implementations' (every 4th of the filtered lists would not be).
BF16_SUBSET = [p for p in _family.TRAIN_SHAPES[::4] + _family.TEST_SHAPES[::4]
               if tma_ok(p["cols"], 2)]


@triton.jit
def _softmax_tma(x_desc, out_desc, cols, BLOCK_N: tl.constexpr, ROWS_PER_PROG: tl.constexpr,
                 ONE_CHUNK: tl.constexpr, NUM_STAGES: tl.constexpr):
    r0 = tl.program_id(0) * ROWS_PER_PROG
    col = tl.arange(0, BLOCK_N)[None, :]
    if ONE_CHUNK:
        x = x_desc.load([r0, 0]).to(tl.float32)
        x = tl.where(col < cols, x, -float("inf"))
        p = tl.exp2((x - tl.max(x, axis=1)[:, None]) * LOG2E)
        y = p * (1.0 / tl.sum(p, axis=1))[:, None]
        out_desc.store([r0, 0], y.to(out_desc.dtype))
    else:
        m = tl.full([ROWS_PER_PROG, BLOCK_N], -float("inf"), tl.float32)
        s = tl.zeros([ROWS_PER_PROG, BLOCK_N], tl.float32)
        for c0 in tl.range(0, cols, BLOCK_N, num_stages=NUM_STAGES):
            x = x_desc.load([r0, c0]).to(tl.float32)
            x = tl.where(c0 + col < cols, x, -float("inf"))
            # One exp2 per element: exp(-|x - m|) rescales whichever side is smaller.
            hi = tl.maximum(m, x)
            e = tl.exp2((tl.minimum(m, x) - tl.where(hi == -float("inf"), 0.0, hi)) * LOG2E)
            s = tl.where(x > m, s * e + 1.0, s + e)
            m = hi
        m_row = tl.max(m, axis=1)
        m_row = tl.where(m_row == -float("inf"), 0.0, m_row)[:, None]
        inv = 1.0 / tl.sum(s * tl.exp2((m - m_row) * LOG2E), axis=1)[:, None]
        for c0 in tl.range(0, cols, BLOCK_N, num_stages=NUM_STAGES):
            x = x_desc.load([r0, c0]).to(tl.float32)
            y = tl.exp2((x - m_row) * LOG2E) * inv
            out_desc.store([r0, c0], y.to(out_desc.dtype))


def _sizes(problem: dict[str, Any]) -> tuple[int, int]:
    return _family._sizes(problem, name=NAME)


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    values = _family._config_values(config, params=_PARAMS, name=NAME)
    for key in ("BLOCK_N", "ROWS_PER_PROG"):
        if values[key] > MAX_BOX:
            raise ValueError(f"{NAME} config: {key}={values[key]} exceeds a TMA box's "
                             f"{MAX_BOX} elements")
    return values


def grid(problem: dict[str, Any], config: Config | dict[str, Any]) -> tuple[int, ...]:
    """(cdiv(rows, ROWS_PER_PROG),)."""
    rows, _ = _sizes(problem)
    return (triton.cdiv(rows, _config_values(config)["ROWS_PER_PROG"]),)


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """BLOCK_N and ROWS_PER_PROG are both tuned: nothing is fixed."""
    return {}


def kernel_calls(inputs: dict[str, torch.Tensor],
                 config: Config | dict[str, Any]) -> list[KernelCall]:
    """The one launch ``launch`` makes; allocates ``out`` unless ``inputs`` holds one. ``x``
    and ``out`` must have contiguous, 16-byte aligned rows (TMA)."""
    cfg = _config_values(config)
    x, out = _family.check_inputs(inputs)
    rows, cols = x.shape
    for name, t in (("x", x), ("out", out)):
        size = t.element_size()
        if (t.stride(1) != 1 or t.stride(0) * size % TMA_ALIGN
                or t.data_ptr() % TMA_ALIGN):
            raise ValueError(f"{name} needs unit column stride and 16-byte aligned rows for "
                             f"{NAME}'s TMA descriptors; got strides {tuple(t.stride())} of "
                             f"{size}-byte elements")

    def desc(t: torch.Tensor) -> TensorDescriptor:
        return TensorDescriptor(t, shape=[rows, cols], strides=[t.stride(0), 1],
                                block_shape=[cfg["ROWS_PER_PROG"], cfg["BLOCK_N"]])

    kwargs = {"BLOCK_N": cfg["BLOCK_N"], "ROWS_PER_PROG": cfg["ROWS_PER_PROG"],
              "ONE_CHUNK": cfg["BLOCK_N"] >= cols, "NUM_STAGES": cfg["num_stages"]}
    return [KernelCall(_softmax_tma, grid({"rows": rows, "cols": cols}, cfg),
                       (desc(x), desc(out), cols), kwargs,
                       num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])]


def launch(inputs: dict[str, torch.Tensor], config: Config | dict[str, Any]) -> torch.Tensor:
    """Run the kernel and return the softmax (a new tensor unless ``inputs["out"]`` is given)."""
    calls = kernel_calls(inputs, config)
    for call in calls:
        call.run()
    return calls[-1].args[1].base


def config_space(problem: dict[str, Any] | None = None) -> ConfigSpace:
    """BLOCK_N (16..256) x ROWS_PER_PROG (1..16) x num_warps (1..8) x num_stages (1, 2); a box's
    values per thread, ``ROWS_PER_PROG * BLOCK_N / (32 * num_warps)``, lie in [1, 32]. With a
    problem: none unless rows have a TMA-legal stride in fp16 / bf16 (``cols % 8 == 0``), a
    chunk at most next_pow2(cols), stages only where the chunks loop, and several rows per
    program only while the grid still covers every SM."""
    params = {
        "BLOCK_N": [16, 32, 64, 128, 256],
        "ROWS_PER_PROG": [1, 2, 4, 8, 16],
        "num_warps": [1, 2, 4, 8],
        # 3 stages of descriptor loads in a tl.range loop fault with "misaligned address" on
        # sm_90 under triton 3.6 (triton-lang/triton#10474; the first collection lost its CUDA
        # context on 4096 x 4096, while 60 configs at 1 and 2 stages ran right on an H100).
        "num_stages": [1, 2],
    }

    def values_per_thread(c: dict[str, Any]) -> bool:
        return 1 <= c["ROWS_PER_PROG"] * c["BLOCK_N"] / (32 * c["num_warps"]) <= 32

    constraints = {"values_per_thread_1_to_32": values_per_thread}
    if problem is not None:
        rows, cols = _sizes(problem)
        aligned = tma_ok(cols, 2)
        block_max = max(16, _next_pow2(cols))
        constraints.update({
            "rows_tma_aligned_in_16_bits": lambda c: aligned,
            "block_n_le_next_pow2_cols": lambda c: c["BLOCK_N"] <= block_max,
            "stages_only_when_looping": lambda c: c["num_stages"] == 1 or c["BLOCK_N"] < cols,
            "rows_per_prog_fills_sms": lambda c: (c["ROWS_PER_PROG"] == 1
                                                  or rows >= c["ROWS_PER_PROG"] * H200.num_sms),
        })
    return ConfigSpace(params, constraints=constraints)


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | Any:
    """Bytes of shared memory this kernel needs at least once compiled: every TMA load lands
    in shared memory, so one ``[ROWS_PER_PROG, BLOCK_N]`` box of the input dtype per stage of
    the looped path's chunk loop, and one box for the one-pass path. Vectorised over arrays.

    >>> shared_memory_floor({"rows": 8192, "cols": 4096}, {"BLOCK_N": 256, "ROWS_PER_PROG": 4,
    ...     "num_warps": 4, "num_stages": 3}, dtype="float16", aligned={"x": True})
    6144
    """
    _, cols = _sizes(problem)
    bn = np.asarray(config["BLOCK_N"], dtype=np.int64)
    rpp = np.asarray(config["ROWS_PER_PROG"], dtype=np.int64)
    stages = np.asarray(config["num_stages"], dtype=np.int64)
    size = torch.empty(0, dtype=getattr(torch, dtype)).element_size() if dtype in DTYPES else 0
    copies = np.where(bn >= cols, 1, np.maximum(stages, 1))
    out = (copies * rpp * bn * size).astype(np.int64)
    return int(out) if out.ndim == 0 else out
