"""GEMM, tutorial-03 style: C = A @ B over a 1-D grid of output tiles in grouped order.

The family's problems, inputs, reference and suites (costtune.kernels.gemm), computed by the
kernel of Triton's matmul tutorial: one program per BLOCK_M x BLOCK_N tile of C, visited in
groups of GROUP_SIZE_M tile rows (a tuned knob here, fixed at 8 in the family's original), no
split-K. Row and column offsets wrap modulo M and N, so A and B loads need a mask along K only
(the wrapped rows and columns are computed and dropped by the masked store); the original masks
rows and columns instead. Every family shape is supported, so the suites are the family's.

>>> from costtune.kernels import gemm_tutorial as gt
>>> x = gt.make_inputs({"M": 64, "N": 64, "K": 64}, "float16")
>>> c = gt.launch(x, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_SIZE_M": 8,
...                   "num_warps": 4, "num_stages": 2})  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from costtune.hardware import H200
from costtune.kernels import gemm as _family
from costtune.kernels.base import KernelCall
from costtune.kernels.configs import check_gemm_config
from costtune.space import ConfigSpace
from costtune.types import Config

NAME = "gemm_tutorial"
FAMILY = "gemm"
DESCRIPTION = ("One program per output tile in tuned grouped order, offsets wrapped modulo M "
               "and N so loads are masked along K only, no split-K.")

PROBLEM_KEYS = _family.PROBLEM_KEYS
DTYPES = _family.DTYPES
make_inputs = _family.make_inputs
reference = _family.reference
torch_op = _family.torch_op
flops = _family.flops
min_bytes = _family.min_bytes
# The family's: fp32 accumulation and one rounding of C to the output dtype, as there.
TOLERANCE = _family.TOLERANCE

# Every shape is supported (pointer loads need no alignment).
TRAIN_SHAPES = list(_family.TRAIN_SHAPES)
TEST_SHAPES = list(_family.TEST_SHAPES)
BF16_SUBSET = list(_family.BF16_SUBSET)

MAX_ACC_REGS = _family.MAX_ACC_REGS

_KERNEL_PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_SIZE_M")
_LAUNCH_PARAMS = ("num_warps", "num_stages")


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_SIZE_M: tl.constexpr, UPCAST_DOT: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: GROUP_SIZE_M tile rows are swept column by column before the next band.
    band_size = GROUP_SIZE_M * tiles_n
    band_first = (pid // band_size) * GROUP_SIZE_M
    band_rows = min(tiles_m - band_first, GROUP_SIZE_M)
    tile_m = band_first + (pid % band_size) % band_rows
    tile_n = (pid % band_size) // band_rows

    # Wrapped offsets: out-of-range rows/cols read valid (repeated) data and are never stored.
    offs_m = (tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST_DOT:
            # Interpreter only (bf16 dot bug): fp16/bf16 products are exact in fp32.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def grid(problem: dict[str, int], config: Config | dict[str, Any]) -> tuple[int]:
    """(output tiles,)."""
    m, n, _ = _family._sizes(problem)
    c = _config_values(config)
    return (triton.cdiv(m, c["BLOCK_M"]) * triton.cdiv(n, c["BLOCK_N"]),)


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """No split-K: the family's SPLIT_K is 1."""
    return {"SPLIT_K": 1}


def kernel_calls(inputs: dict[str, torch.Tensor],
                 config: Config | dict[str, Any]) -> list[KernelCall]:
    """The single launch ``launch`` makes, with a freshly allocated output in the input dtype."""
    a, b = _family._check_inputs(inputs)
    c = _config_values(config)
    m, k = a.shape
    n = b.shape[1]
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    call = KernelCall(
        fn=_matmul_kernel,
        grid=grid({"M": m, "N": n, "K": k}, c),
        args=(a, b, out, m, n, k, *a.stride(), *b.stride(), *out.stride()),
        kwargs={"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"], "BLOCK_K": c["BLOCK_K"],
                "GROUP_SIZE_M": c["GROUP_SIZE_M"],
                "UPCAST_DOT": _interpreted() and a.dtype == torch.bfloat16},
        num_warps=c["num_warps"], num_stages=c["num_stages"])
    return [call]


def launch(inputs: dict[str, torch.Tensor], config: Config | dict[str, Any]) -> torch.Tensor:
    """C = A @ B with one config; validates inputs and config (ValueError naming the problem)."""
    (call,) = kernel_calls(inputs, config)
    call.run()
    return call.args[2]


_SPACE = {
    "BLOCK_M": (32, 64, 128, 256),
    "BLOCK_N": (32, 64, 128, 256),
    "BLOCK_K": (32, 64),
    "GROUP_SIZE_M": (1, 8),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
}


def config_space(problem: dict[str, int] | None = None) -> ConfigSpace:
    """Tiles, group width and launch options; with ``problem``, drop configs that cannot pay off.

    Without split-K, a long K is reduced in one program, so BLOCK_K stays at 32 or 64 (the
    tutorial's values); tiles below 64 x 64 only pay where M or N is that small.
    """
    constraints = {
        "shared_memory": lambda c: (c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"])
                                    * c["BLOCK_K"] * 2 <= H200.max_shared_per_block),
        "accumulator_registers": lambda c: c["BLOCK_M"] * c["BLOCK_N"] / (32 * c["num_warps"])
        <= MAX_ACC_REGS,
    }
    if problem is not None:
        m, n, k = _family._sizes(problem)
        cap_m, cap_n = (max(32, triton.next_power_of_2(x)) for x in (m, n))
        constraints["tile_fits_problem"] = lambda c: (
            c["BLOCK_M"] <= cap_m and c["BLOCK_N"] <= cap_n)
        # 32-wide tiles only pay on skinny problems (M or N below 64), where the wide tiles
        # leave too few programs to fill the GPU; elsewhere they only re-read A and B more.
        skinny = min(m, n) < 64
        constraints["small_tile_pays"] = lambda c: skinny or min(c["BLOCK_M"], c["BLOCK_N"]) >= 64

        def order_changes(c: dict[str, Any]) -> bool:
            # With one tile row or one tile column every group width gives row order.
            return c["GROUP_SIZE_M"] == 1 or (
                triton.cdiv(m, c["BLOCK_M"]) > 1 and triton.cdiv(n, c["BLOCK_N"]) > 1)

        constraints["group_changes_order"] = order_changes
    return ConfigSpace(_SPACE, constraints=constraints)


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | np.ndarray:
    """The family's bound: tl.dot stages the same A and B tiles, pipelined the same way (the
    wrapped offsets change the addresses, not the staging). Vectorised like the family's."""
    return _family.shared_memory_floor(problem, config, dtype=dtype, aligned=aligned,
                                       arch=arch, warp_specialized=warp_specialized)


def _interpreted() -> bool:
    """True under TRITON_INTERPRET=1 (see costtune.kernels.gemm._interpreted)."""
    return not isinstance(_matmul_kernel, triton.runtime.jit.JITFunction)


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    """Flat dict of the kernel's parameters; unknown or missing names and bad values raise."""
    values = check_gemm_config(config, params=_KERNEL_PARAMS, launch=_LAUNCH_PARAMS,
                               name=NAME)
    if values["GROUP_SIZE_M"] < 1:
        raise ValueError(f"config GROUP_SIZE_M={values['GROUP_SIZE_M']!r} must be >= 1")
    return values
