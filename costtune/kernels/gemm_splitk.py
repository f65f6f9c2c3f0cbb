"""GEMM with split-K in two launches: TMA loads, an fp32 workspace, and a reduction pass.

The family's problems, inputs and reference (costtune.kernels.gemm), computed the way
split-K is written when the result must not depend on the order of atomics (CUTLASS's
"parallel" split-K, cuBLAS's split-K with a workspace): a (tiles, SPLIT_K) grid, one program
per output tile and K split, A and B moved by TMA through host ``TensorDescriptor``s. With
SPLIT_K = 1 the program stores C directly (a TMA store). Otherwise each split stores its fp32
partial tile into a workspace of shape (SPLIT_K, M, N) through a 3-D descriptor (rows past M
are clipped per split, not written into the next split's slice), and a second launch sums the
splits in order and casts C. Against the family's original kernel, which adds its splits into
one fp32 buffer with atomics and masked pointer loads: the same split of K, other costs
(a workspace of SPLIT_K partial tiles written and read back, a second launch, an fp32 staging
tile in shared memory for the split's TMA store), and a deterministic result.

TMA needs 16-byte aligned global strides, so the suites are gemm_tma's (K and N multiples of
8). The reduction launch has a fixed config (``SUM_BLOCK`` elements, 4 warps): it is part of
the op, timed with it, not tuned.

>>> from costtune.kernels import gemm_splitk as gs
>>> gs.grid({"M": 768, "N": 768, "K": 24576}, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64,
...                                            "SPLIT_K": 4, "num_warps": 8, "num_stages": 3})
(36, 4)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from costtune.hardware import H200
from costtune.kernels import gemm as _family
from costtune.kernels import gemm_tma as _tma
from costtune.kernels.base import KernelCall, scratch
from costtune.kernels.configs import check_gemm_config

# The family's problems, inputs, reference, counts and tolerance (fp32 accumulation, one
# rounding of C; the splits add in fp32 as there); gemm_tma's TMA-aligned suites.
from costtune.kernels.gemm import (
    DTYPES,
    PROBLEM_KEYS,
    TOLERANCE,
    flops,
    make_inputs,
    min_bytes,
    reference,
    torch_op,
)
from costtune.kernels.gemm_tma import BF16_SUBSET, TEST_SHAPES, TRAIN_SHAPES
from costtune.space import ConfigSpace
from costtune.types import Config

__all__ = ["BF16_SUBSET", "DESCRIPTION", "DTYPES", "FAMILY", "NAME", "PROBLEM_KEYS",
           "TEST_SHAPES", "TOLERANCE", "TRAIN_SHAPES", "config_space", "flops", "grid",
           "implied_params", "kernel_calls", "launch", "make_inputs", "min_bytes", "reference",
           "shared_memory_floor", "splitk_shared_bytes", "torch_op"]

NAME = "gemm_splitk"
FAMILY = "gemm"
DESCRIPTION = ("Output tiles x K splits, A/B moved by TMA through host tensor descriptors; each "
               "split stores its fp32 partial tile into a workspace and a second launch sums "
               "the splits in order (no atomics) and casts C.")


GROUP_SIZE_M = _tma.GROUP_SIZE_M  # grouped tile order, fixed as in the other GEMMs
NUM_SMS = H200.num_sms
MAX_ACC_REGS = _family.MAX_ACC_REGS
SUM_BLOCK = 1024  # elements of C per program of the reduction launch
_PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K")
_LAUNCH_PARAMS = ("num_warps", "num_stages")


@triton.jit
def _partial_kernel(a_desc, b_desc, c_desc, w_desc, M, N, K,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    SPLIT_K: tl.constexpr, GROUP: tl.constexpr, UPCAST_DOT: tl.constexpr):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tm, tn = _tma._tile_of(tl.program_id(0), GROUP * tiles_n, tiles_m, GROUP)
    split = tl.program_id(1)
    row = tm * BLOCK_M
    col = tn * BLOCK_N
    # Each split owns a contiguous run of whole K tiles; the last may get fewer or none (its
    # partial tile is then zero). TMA fills the K tail and rows/columns past the edge with 0.
    k_tiles = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_tiles, SPLIT_K)
    first = split * per_split
    last = tl.minimum(first + per_split, k_tiles)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(first, last):
        a = a_desc.load([row, kt * BLOCK_K])
        b = b_desc.load([kt * BLOCK_K, col])
        if UPCAST_DOT:
            # Interpreter only (bf16 dot bug): fp16/bf16 products are exact in fp32.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
    if SPLIT_K == 1:
        c_desc.store([row, col], acc.to(c_desc.dtype))
    else:
        w_desc.store([split, row, col], tl.reshape(acc, (1, BLOCK_M, BLOCK_N)))


@triton.jit
def _sum_splits(w_ptr, c_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        # 64-bit slice offsets: SPLIT_K * M * N may pass 2**31 elements.
        acc += tl.load(w_ptr + (offs + s * MN.to(tl.int64)), mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def grid(problem: dict[str, int], config: Config | dict[str, Any]) -> tuple[int, int]:
    """(output tiles, SPLIT_K): the partial-product launch (the reduction's is separate)."""
    m, n, _ = _family._sizes(problem)
    c = _config_values(config)
    return (triton.cdiv(m, c["BLOCK_M"]) * triton.cdiv(n, c["BLOCK_N"]), c["SPLIT_K"])


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """The fixed GROUP_SIZE_M of 8; SPLIT_K is the config's own."""
    return {"GROUP_SIZE_M": GROUP_SIZE_M}


def kernel_calls(inputs: dict[str, torch.Tensor],
                 config: Config | dict[str, Any]) -> list[KernelCall]:
    """The launches ``launch`` makes: the partial products (descriptors over A, B, a fresh C
    and, with SPLIT_K > 1, a fresh fp32 workspace), then with SPLIT_K > 1 the reduction."""
    a, b = _family._check_inputs(inputs)
    c = _config_values(config)
    _tma._check_tma(a, b, NAME)
    m, k = a.shape
    n = b.shape[1]
    bm, bn, bk, splits = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["SPLIT_K"]
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    c_desc = TensorDescriptor.from_tensor(out, [bm, bn])
    if splits > 1:
        work = scratch((splits, m, n), torch.float32, a.device)
        w_desc = TensorDescriptor.from_tensor(work, [1, bm, bn])
    else:
        w_desc = c_desc  # never read: the SPLIT_K == 1 branch stores C directly
    calls = [KernelCall(
        fn=_partial_kernel, grid=grid({"M": m, "N": n, "K": k}, c),
        args=(TensorDescriptor.from_tensor(a, [bm, bk]),
              TensorDescriptor.from_tensor(b, [bk, bn]), c_desc, w_desc, m, n, k),
        kwargs={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": splits,
                "GROUP": GROUP_SIZE_M,
                "UPCAST_DOT": _interpreted() and a.dtype == torch.bfloat16},
        num_warps=c["num_warps"], num_stages=c["num_stages"])]
    if splits > 1:
        calls.append(KernelCall(
            fn=_sum_splits, grid=(triton.cdiv(m * n, SUM_BLOCK),),
            args=(work, out, m * n), kwargs={"SPLIT_K": splits, "BLOCK": SUM_BLOCK},
            num_warps=4, num_stages=1))
    return calls


def launch(inputs: dict[str, torch.Tensor], config: Config | dict[str, Any]) -> torch.Tensor:
    """C = A @ B with one config; validates inputs and config (ValueError naming the problem).
    With SPLIT_K > 1 both launches (and the workspace) are part of the op and its timing."""
    calls = kernel_calls(inputs, config)
    for call in calls:
        call.run()
    return calls[0].args[2].base


_SPACE = {
    "BLOCK_M": (64, 128),
    "BLOCK_N": (64, 128, 256),
    "BLOCK_K": (32, 64, 128),
    "SPLIT_K": (1, 2, 4, 8, 16),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4),
}


def splitk_shared_bytes(c: dict[str, Any], itemsize: int = 2) -> int:
    """Shared memory of the pipelined A and B tiles or of the TMA store's staging tile (C in
    the input dtype, or the fp32 partial tile when SPLIT_K > 1), whichever is larger: one
    tile per program, so the store reuses the loads' buffers once the K loop is done (AOT
    compiles for sm_90 with triton 3.6 use that plus < 64 B of mbarriers; the persistent
    gemm_tma, whose next tile's loads overlap the store, needs both)."""
    loads = c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * itemsize
    staging = c["BLOCK_M"] * c["BLOCK_N"] * (4 if c["SPLIT_K"] > 1 else itemsize)
    return max(loads, staging)


def config_space(problem: dict[str, int] | None = None) -> ConfigSpace:
    """Tiles, K splits and launch options; with ``problem``, drop tiles larger than the
    problem needs and splits with too little K each or too many programs.

    >>> len(config_space({"M": 768, "N": 768, "K": 24576}))
    281
    """
    constraints = {
        "shared_memory": lambda c: splitk_shared_bytes(c) + 1024 <= H200.max_shared_per_block,
        "accumulator_registers": lambda c: c["BLOCK_M"] * c["BLOCK_N"] / (32 * c["num_warps"])
        <= MAX_ACC_REGS,
        "warps_have_work": lambda c: c["BLOCK_M"] * c["BLOCK_N"] / (32 * c["num_warps"]) >= 32,
    }
    if problem is not None:
        m, n, k = _family._sizes(problem)
        cap_m, cap_n, cap_k = (max(64, triton.next_power_of_2(x)) for x in (m, n, k))
        constraints["tile_fits_problem"] = lambda c: (
            c["BLOCK_M"] <= cap_m and c["BLOCK_N"] <= cap_n and c["BLOCK_K"] <= min(cap_k, 128))

        # Every split keeps >= 4 K tiles and the grid <= 4 waves of one program per SM: past
        # that the SMs are busy without splitting. Unlike the original kernel's space, every
        # split that fits is kept (not only the largest), so the data says when one pays.
        def split_fits(c: dict[str, Any]) -> bool:
            tiles = triton.cdiv(m, c["BLOCK_M"]) * triton.cdiv(n, c["BLOCK_N"])
            return (k >= c["SPLIT_K"] * c["BLOCK_K"] * 4
                    and tiles * c["SPLIT_K"] <= 4 * NUM_SMS)

        constraints["split_k_fits"] = lambda c: c["SPLIT_K"] == 1 or split_fits(c)
    return ConfigSpace(_SPACE, constraints=constraints)


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | np.ndarray:
    """The family's bound with both operands aligned (TMA descriptors count as aligned), or the
    TMA store's staging tile (fp32 with SPLIT_K > 1, else the input dtype) where that is
    larger: the store reuses the loads' buffers. Where the family's bound claims nothing (0),
    so does this. Vectorised like the family's."""
    base = _family.shared_memory_floor(problem, config, dtype=dtype,
                                       aligned={"a": True, "b": True}, arch=arch,
                                       warp_specialized=warp_specialized)
    bm, bn = (np.asarray(config[k], dtype=np.int64) for k in ("BLOCK_M", "BLOCK_N"))
    split = np.asarray(config.get("SPLIT_K", 1), dtype=np.int64)
    size = _family.dtype_of(dtype).itemsize if dtype in DTYPES else 0
    staging = bm * bn * np.where(split > 1, 4, size)
    out = np.where(np.asarray(base) > 0, np.maximum(base, staging), 0).astype(np.int64)
    return int(out) if out.ndim == 0 else out


def _interpreted() -> bool:
    """True under TRITON_INTERPRET=1 (see costtune.kernels.gemm._interpreted)."""
    return not isinstance(_partial_kernel, triton.runtime.jit.JITFunction)


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    """Flat dict of the kernel's parameters; unknown or missing names and bad values raise."""
    values = check_gemm_config(config, params=_PARAMS, launch=_LAUNCH_PARAMS, name=NAME,
                               bools=False)
    if values["SPLIT_K"] < 1:
        raise ValueError(f"config SPLIT_K={values['SPLIT_K']!r} must be >= 1")
    return values
