"""Kernels in the styles torch.compile (Inductor) generates: a looped ("red") softmax reduction,
an nn.Linear + ReLU as its addmm template takes it (dynamic-shape size symbols, the (B, S, K)
activation and the (N, K) weight as they are), and a GEMM in the style of the matmul template
Inductor emits under
``max-autotune``: one program per output tile in a grouped order, row and column indices taken
modulo M and N so that A and B load without masks (the tail tiles re-read valid rows), an
``EVEN_K`` constexpr that drops the K masks when BLOCK_K divides K (set here by a
``triton.heuristics`` under the autotuner, as a user who lifts the template into their own code
writes it), ``ACC_TYPE`` and ``ALLOW_TF32`` passed at the launch, and one masked store through a
flattened index. Its names are the template's (``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``,
``GROUP_M``, ``EVEN_K``); the code and the config lists are our own.

Used through ``experiments/user_kernels.py``'s ``STYLES["inductor_softmax"]`` and
``STYLES["inductor_mm"]``.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def triton_tem_fused_mm_0(arg_A, arg_B, out_ptr0, M, N, K, stride_am, stride_ak, stride_bk,
                          stride_bn, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
                          ALLOW_TF32: tl.constexpr, ACC_TYPE: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    # grouped order: GROUP_M tile rows share each column sweep
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = arg_A + (ram[:, None] * stride_am + rk[None, :] * stride_ak)
    b_ptrs = arg_B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=rk[None, :] < k, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    xindex = idx_n + N * idx_m
    tl.store(out_ptr0 + xindex, acc.to(out_ptr0.dtype.element_ty), mask)


# EVEN_K follows from the problem and the config: a heuristic under the autotuner.
inductor_mm_kernel = triton.heuristics(
    {"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})(triton_tem_fused_mm_0)


def inductor_mm_configs(size: str) -> list[triton.Config]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps) lists: a tiny one for the CPU
    interpreter (values the training data has) and the H200's, a max-autotune-sized list from
    skinny 32-wide tiles to 128 x 256, each with GROUP_M = 8."""
    if size == "cpu":
        rows = [(32, 32, 32, 2, 4), (32, 64, 32, 2, 4), (64, 32, 32, 2, 4), (64, 64, 32, 2, 4)]
    else:
        rows = [(32, 32, 32, 2, 4), (32, 64, 64, 3, 4), (64, 32, 64, 3, 4),
                (64, 64, 32, 2, 4), (64, 64, 64, 3, 4), (64, 64, 128, 4, 4)]
        rows += [(bm, bn, bk, s, w) for (bm, bn), bk, s, w in itertools.product(
            ((64, 128), (128, 64), (128, 128)), (32, 64), (3, 4, 5), (4, 8))]
        rows += [(128, 256, 32, 3, 8), (128, 256, 64, 3, 8), (256, 128, 32, 3, 8),
                 (256, 128, 64, 3, 8), (64, 256, 32, 4, 4), (64, 256, 64, 4, 8)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                          num_stages=s, num_warps=w) for bm, bn, bk, s, w in rows]


def inductor_mm_launch(tuned: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    a, b, c = inputs["a"], inputs["b"], inputs["out"]
    (m, k), n = a.shape, b.shape[1]
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),  # noqa: E731
                         1, 1)
    tuned[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                ALLOW_TF32=False, ACC_TYPE=tl.float32)
    return c


# --- Inductor: nn.Linear + ReLU as torch.compile's addmm template passes it --------------
# What max-autotune emits for relu(x @ w.T + b) with dynamic shapes: the sizes arrive as
# symbols (ks0 = B*S, ks1 = N, ks2 = K) and in no argument named like a GEMM size; arg_A is
# the activation buffer as the model holds it, (B, S, K); arg_B the Linear's (N, K) weight read
# transposed through its strides; the bias in in_ptr0; the ReLU fused after the dot.

@triton.jit
def triton_tem_fused_addmm_relu_0(in_ptr0, arg_A, arg_B, out_ptr0, ks0, ks1, ks2,
                                  GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
                                  ALLOW_TF32: tl.constexpr, ACC_TYPE: tl.constexpr,
                                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                  BLOCK_K: tl.constexpr):
    M, N, K = ks0, ks1, ks2
    pid = tl.program_id(0)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = arg_A + (ram[:, None] * K + rk[None, :])
    b_ptrs = arg_B + (rk[:, None] + rbn[None, :] * K)  # B[k, n] = weight[n, k]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=rk[None, :] < k, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    bias = tl.load(in_ptr0 + idx_n, mask, eviction_policy="evict_last").to(tl.float32)
    out = tl.maximum(acc + bias, 0.0)
    tl.store(out_ptr0 + (idx_n + N * idx_m), out.to(out_ptr0.dtype.element_ty), mask)


inductor_linear_kernel = triton.heuristics(
    {"EVEN_K": lambda args: args["ks2"] % args["BLOCK_K"] == 0})(triton_tem_fused_addmm_relu_0)


def linear_inputs(problem: dict[str, int], *, device: Any, dtype: torch.dtype
                  ) -> dict[str, torch.Tensor]:
    """A (2, M/2, K) activation, an (N, K) weight, an (N,) bias and the (2, M/2, N) output."""
    g = torch.Generator().manual_seed(0)
    m, n, k = problem["M"], problem["N"], problem["K"]
    x = torch.randn(2, m // 2, k, generator=g).to(device=device, dtype=dtype)
    w = torch.randn(n, k, generator=g).to(device=device, dtype=dtype) / k ** 0.5
    bias = torch.randn(n, generator=g).to(device=device, dtype=dtype)
    return {"x": x, "w": w, "bias": bias,
            "out": torch.empty(2, m // 2, n, device=device, dtype=dtype)}


def inductor_linear_launch(tuned: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    x, w, out = inputs["x"], inputs["w"], inputs["out"]
    m, (n, k) = x.shape[0] * x.shape[1], w.shape
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),  # noqa: E731
                         1, 1)
    tuned[grid](inputs["bias"], x, w, out, m, n, k, ALLOW_TF32=False, ACC_TYPE=tl.float32)
    return out.reshape(m, n)


def linear_reference(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    x = inputs["x"].float().reshape(-1, inputs["x"].shape[-1])
    return torch.relu(x @ inputs["w"].float().T + inputs["bias"].float())


# --- Inductor: a looped ("red") softmax reduction as torch.compile generates it -----------

@triton.jit
def triton_red_fused__softmax_0(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK: tl.constexpr,
                                R0_BLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    x0 = xindex
    _tmp2 = tl.full([XBLOCK, R0_BLOCK], float("-inf"), tl.float32)
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        tmp0 = tl.load(in_ptr0 + (r0_index + r0_numel * x0), r0_mask & xmask,
                       eviction_policy="evict_last", other=float("-inf")).to(tl.float32)
        _tmp2 = tl.where(r0_mask & xmask, tl.maximum(_tmp2, tmp0), _tmp2)
    tmp2 = tl.max(_tmp2, 1)[:, None]
    _tmp5 = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        tmp3 = tl.load(in_ptr0 + (r0_index + r0_numel * x0), r0_mask & xmask,
                       eviction_policy="evict_last", other=0.0).to(tl.float32)
        tmp4 = tl.exp(tmp3 - tmp2)
        _tmp5 = tl.where(r0_mask & xmask, _tmp5 + tmp4, _tmp5)
    tmp5 = tl.sum(_tmp5, 1)[:, None]
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        tmp6 = tl.load(in_ptr0 + (r0_index + r0_numel * x0), r0_mask & xmask,
                       eviction_policy="evict_first", other=0.0).to(tl.float32)
        tmp8 = tl.exp(tmp6 - tmp2) / tmp5
        tl.store(out_ptr2 + (r0_index + r0_numel * x0),
                 tmp8.to(out_ptr2.dtype.element_ty), r0_mask & xmask)


def inductor_softmax_launch(tuned: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    x, y = inputs["x"], inputs["out"]
    xnumel, r0_numel = x.shape
    tuned[lambda meta: (triton.cdiv(xnumel, meta["XBLOCK"]), 1, 1)](x, y, xnumel, r0_numel)
    return y
