"""Whole-row softmax, Triton tutorial-02 style: a persistent grid of programs, each looping over
rows ``pid, pid + n_programs, ...`` and holding one whole row in registers per iteration.

``BLOCK_N = next_pow2(cols)`` is fixed by the problem, never tuned, and one row is one block
(``ROWS_PER_PROG = 1``); what the config tunes is only ``num_warps`` (threads sharing a row)
and ``num_stages`` (``tl.range`` software pipelining of the row loop: the next rows' loads are
issued into shared memory while the current row is reduced).

The grid is deterministic from (problem, config), with no GPU query: ``min(rows, num_sms *
programs_per_sm)`` where ``programs_per_sm = min(max_warps_per_sm // num_warps,
max_ctas_per_sm)`` is the warp-slot occupancy bound of the H200. Tutorial 02 derives it from the
compiled kernel's registers and shared memory instead; a program the SM cannot hold yet simply
starts in a later wave, so the warp bound is an upper bound that stays correct.

Rows are supported up to what fits the register file: the row's fp32 values, spread over the
``32 * num_warps`` threads, must be at most 64 per thread (the family's spill-free bound), so
65536 columns need 32 warps; every suite shape (cols <= 65536) is supported, none is dropped.
(At 32 warps a thread gets at most 64 registers, so 65536-column rows compile with a ~232-byte
stack on sm_90: they spill, as tutorial 02 would; 32768 columns at 16 warps do not.)

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

__all__ = ["DESCRIPTION", "DTYPES", "FAMILY", "NAME", "PROBLEM_KEYS",
           "TEST_SHAPES", "TOLERANCE", "TRAIN_SHAPES", "config_space", "flops", "grid",
           "implied_params", "kernel_calls", "launch", "make_inputs", "min_bytes", "reference",
           "shared_memory_floor", "torch_op"]

NAME = "softmax_onepass"
FAMILY = "softmax"
DESCRIPTION = ("Persistent whole-row softmax (Triton tutorial 02): one program per SM slot loops "
               "over rows with a software-pipelined tl.range, the whole row in registers; only "
               "num_warps and num_stages are tuned.")

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
_PARAMS = ("num_warps", "num_stages")
_WARPS = (1, 2, 4, 8, 16, 32)
_STAGES = (1, 2, 3, 4)
# fp32 row values one thread may hold: above this the row spills registers.
MAX_VALUES_PER_THREAD = 64


@triton.jit
def _softmax_rows_persistent(x_ptr, out_ptr, n_rows, n_cols, stride_xr, stride_xc, stride_or,
                             stride_oc, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    col = tl.arange(0, BLOCK_N)
    col_ok = col < n_cols
    for row in tl.range(row_start, n_rows, row_step, num_stages=NUM_STAGES):
        r = tl.cast(row, tl.int64)  # a plain int under the interpreter
        x = tl.load(x_ptr + r * stride_xr + col * stride_xc, mask=col_ok,
                    other=-float("inf")).to(tl.float32)
        p = tl.exp2((x - tl.max(x, axis=0)) * LOG2E)
        y = p * (1.0 / tl.sum(p, axis=0))
        tl.store(out_ptr + r * stride_or + col * stride_oc, y.to(out_ptr.dtype.element_ty),
                 mask=col_ok)



def _sizes(problem: dict[str, Any]) -> tuple[int, int]:
    return _family._sizes(problem, name=NAME)


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    values = _family._config_values(config, params=_PARAMS, name=NAME, powers_of_two=False)
    if values["num_warps"] not in _WARPS:
        raise ValueError(f"{NAME} config: num_warps={values['num_warps']} must be one of "
                         f"{list(_WARPS)}")
    return values


def programs_per_sm(num_warps: int) -> int:
    """Programs of ``num_warps`` warps an H200 SM can hold by warp slots and CTA slots."""
    return min(H200.max_warps_per_sm // num_warps, H200.max_ctas_per_sm)


def grid(problem: dict[str, Any], config: Config | dict[str, Any]) -> tuple[int, ...]:
    """(min(rows, num_sms * programs_per_sm(num_warps)),): persistent, one wave."""
    rows, _ = _sizes(problem)
    warps = _config_values(config)["num_warps"]
    return (min(rows, H200.num_sms * programs_per_sm(warps)),)


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """The whole row is one block: BLOCK_N = next_pow2(cols), one row per block."""
    _, cols = _sizes(problem)
    return {"BLOCK_N": _next_pow2(cols), "ROWS_PER_PROG": 1}


def kernel_calls(inputs: dict[str, torch.Tensor],
                 config: Config | dict[str, Any]) -> list[KernelCall]:
    """The one launch ``launch`` makes; allocates ``out`` unless ``inputs`` holds one."""
    cfg = _config_values(config)
    x, out = _family.check_inputs(inputs)
    rows, cols = x.shape
    problem = {"rows": rows, "cols": cols}
    block_n = _next_pow2(cols)
    if block_n > MAX_VALUES_PER_THREAD * 32 * max(_WARPS):
        raise ValueError(f"x has {cols} columns; {NAME} holds a row in registers and supports "
                         f"at most {MAX_VALUES_PER_THREAD * 32 * max(_WARPS)}")
    args = (x, out, rows, cols, x.stride(0), x.stride(1), out.stride(0), out.stride(1))
    kwargs = {"BLOCK_N": block_n, "NUM_STAGES": cfg["num_stages"]}
    return [KernelCall(_softmax_rows_persistent, grid(problem, cfg), args, kwargs,
                       num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])]


def launch(inputs: dict[str, torch.Tensor], config: Config | dict[str, Any]) -> torch.Tensor:
    """Run the kernel and return the softmax (a new tensor unless ``inputs["out"]`` is given)."""
    calls = kernel_calls(inputs, config)
    for call in calls:
        call.run()
    return calls[-1].args[1]


def config_space(problem: dict[str, Any] | None = None) -> ConfigSpace:
    """num_warps x num_stages; with a problem, the row's values per thread must lie in [1, 64]
    (no idle threads; 128 fp32 values per thread compiled to a 248-byte stack on sm_90),
    pipelining needs a program with several rows, and the staged rows must fit shared memory."""
    params = {"num_warps": list(_WARPS), "num_stages": list(_STAGES)}
    if problem is None:
        return ConfigSpace(params)
    rows, cols = _sizes(problem)
    block_n = _next_pow2(cols)
    n_sms = H200.num_sms

    def values_per_thread(c: dict[str, Any]) -> bool:
        return 1 <= block_n / (32 * c["num_warps"]) <= MAX_VALUES_PER_THREAD

    def staged_rows_fit_shared_memory(c: dict[str, Any]) -> bool:
        # Each stage past the first holds a whole row in shared memory (fp32, the widest
        # dtype: the space does not know the dtype).
        return (c["num_stages"] - 1) * block_n * 4 + 1024 <= H200.max_shared_per_block

    def stages_need_rows(c: dict[str, Any]) -> bool:
        # With one row per program the loop runs once: nothing to pipeline.
        return c["num_stages"] == 1 or rows > n_sms * programs_per_sm(c["num_warps"])

    return ConfigSpace(params, constraints={
        "values_per_thread_1_to_64": values_per_thread,
        "stages_only_when_a_program_loops": stages_need_rows,
        "staged_rows_fit_shared_memory": staged_rows_fit_shared_memory,
    })


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | Any:
    """Bytes of shared memory this kernel needs at least once compiled: with ``num_stages > 1``
    the pipeliner stages ``num_stages - 1`` whole rows (``BLOCK_N`` values of the input dtype)
    in shared memory, when the row load is an async copy of at least 4 bytes per thread. That
    held on sm_90 compiles (fp32 1024..65536 cols, fp16 4096 cols) for 16-aligned ``x`` with
    ``cols % 16 == 0``; fp16 with 1000 cols compiled unpipelined (8 bytes). Elsewhere (other
    archs, unaligned x, ragged cols, one stage) it claims nothing (0). Vectorised over arrays.

    >>> shared_memory_floor({"rows": 8, "cols": 4096}, {"num_warps": 4, "num_stages": 3},
    ...                     dtype="float16", aligned={"x": True})
    16384
    """
    stages = np.asarray(config["num_stages"], dtype=np.int64)
    warps = np.asarray(config["num_warps"], dtype=np.int64)
    _, cols = _sizes(problem)
    claim = ((arch == 90) & bool(aligned.get("x", False)) & (cols % 16 == 0)
             & (dtype in DTYPES) & (stages > 1) & (warps > 0))
    size = torch.empty(0, dtype=getattr(torch, dtype)).element_size() if dtype in DTYPES else 0
    out = np.where(claim, (stages - 1) * _next_pow2(cols) * size, 0).astype(np.int64)
    return int(out) if out.ndim == 0 else out
