"""The matmul `costtune demo` tunes: written the way Triton's tutorial 03 writes it (its names
BLOCK_SIZE_M/N/K and GROUP_SIZE_M, its grouped tile order, its launch grid), with the config
list a user would write for it: every tile, warp and stage count of a few hundred configs.

Kept apart from ``costtune.cli.demo`` so the CLI starts without importing triton.

>>> import torch
>>> a, b = torch.randn(48, 72).half(), torch.randn(72, 40).half()
>>> c = matmul(a, b, BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32,
...            GROUP_SIZE_M=8)  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
from typing import Any

import triton
import triton.language as tl

# Tutorial names -> the GEMM family's names. The hook reads these names by itself; the demo
# uses the mapping only to look the kept configs up in the dataset. GROUP_SIZE_M has no family
# counterpart (the family's kernel fixes its own GROUP_M).
TUTORIAL_PARAMS = {"BLOCK_SIZE_M": "BLOCK_M", "BLOCK_SIZE_N": "BLOCK_N",
                   "BLOCK_SIZE_K": "BLOCK_K"}


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                  BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    # Grouped order: GROUP_SIZE_M rows of tiles share the B columns they read while in L2.
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    # Rows and columns past the edge wrap around (their results are masked at the store).
    a_ptrs = a_ptr + (offs_m[:, None] % M) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + (offs_n[None, :] % N) * stride_bn
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        left = K - k * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def tutorial_configs() -> list[triton.Config]:
    """Every tile (32..256 in M and N, 32..128 in K) x num_warps 4, 8 x num_stages 2..5 at
    the tutorial's GROUP_SIZE_M=8: 384 configs, as written without pruning any by hand."""
    return [triton.Config({"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k,
                           "GROUP_SIZE_M": 8}, num_warps=w, num_stages=s)
            for m, n, k, w, s in itertools.product((32, 64, 128, 256), (32, 64, 128, 256),
                                                   (32, 64, 128), (4, 8), (2, 3, 4, 5))]


def launch(a: Any, b: Any, c: Any) -> tuple[tuple, Any]:
    """The tutorial's launch of C = A @ B: (positional args, grid)."""
    m, k = a.shape
    n = b.shape[1]
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_SIZE_M"])
                         * triton.cdiv(n, meta["BLOCK_SIZE_N"]),)
    return (a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride()), grid


def matmul(a: Any, b: Any, **meta: Any) -> Any:
    """C = A @ B with one config given as keyword args (no autotuning)."""
    import torch

    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"need a (M, K) and b (K, N); got {tuple(a.shape)} and {tuple(b.shape)}")
    c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    args, grid = launch(a, b, c)
    matmul_kernel[grid](*args, **meta)
    return c
