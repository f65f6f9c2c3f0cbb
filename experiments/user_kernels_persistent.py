"""A persistent fused-attention forward as people write one (FlashAttention-3's scheduling in
Triton, tutorial 09's ``NUM_SMS`` persistent loop over tutorial 06's names): ``min(NUM_SMS,
tiles)`` programs loop over (query block, batch x head) tiles of pointer-loaded Q/K/V. A style
of ``experiments/user_kernels.py``; the code is our own.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def attn_fwd_persistent(Q, K, V, Out, sm_scale,
                        stride_qz, stride_qh, stride_qm, stride_qk,
                        stride_kz, stride_kh, stride_kn, stride_kk,
                        stride_vz, stride_vh, stride_vn, stride_vk,
                        stride_oz, stride_oh, stride_om, stride_ok,
                        Z, H, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, NUM_SMS: tl.constexpr):
    num_m = tl.cdiv(N_CTX, BLOCK_M)
    qk_scale = sm_scale * 1.4426950408889634  # exp2 instead of exp
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_m * Z * H, NUM_SMS):
        off_hz = tile // num_m
        start_m = tile % num_m
        off_z = (off_hz // H).to(tl.int64)
        off_h = (off_hz % H).to(tl.int64)
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        q = tl.load(Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm
                    + offs_d[None, :] * stride_qk, mask=offs_m[:, None] < N_CTX, other=0.0)
        k_base = K + off_z * stride_kz + off_h * stride_kh
        v_base = V + off_z * stride_vz + off_h * stride_vh
        m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX) if CAUSAL else N_CTX
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + offs_n
            k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kk,
                        mask=cols[None, :] < N_CTX, other=0.0)
            qk = tl.dot(q, k) * qk_scale
            keep = cols[None, :] < N_CTX
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= cols[None, :])
            qk = tl.where(keep, qk, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            p = tl.math.exp2(qk - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                        mask=cols[:, None] < N_CTX, other=0.0)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_new
        tl.store(Out + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om
                 + offs_d[None, :] * stride_ok, (acc / l_i[:, None]).to(Out.dtype.element_ty),
                 mask=offs_m[:, None] < N_CTX)


def persistent_attn_launch(tuned: Any, inputs: dict[str, Any], *, num_sms: int
                           ) -> torch.Tensor:
    q, k, v, o = inputs["q"], inputs["k"], inputs["v"], inputs["out"]
    z, h, n_ctx, d = q.shape
    grid = lambda meta: (min(num_sms, triton.cdiv(n_ctx, meta["BLOCK_M"]) * z * h),)  # noqa: E731
    tuned[grid](q, k, v, o, inputs["sm_scale"], *q.stride(), *k.stride(), *v.stride(),
                *o.stride(), z, h, n_ctx, HEAD_DIM=d, CAUSAL=bool(inputs["causal"]),
                NUM_SMS=num_sms)
    return o


def persistent_attn_configs(size: str) -> list[triton.Config]:
    """Every tile, warp and stage choice (CPU: eight at the interpreter's sizes)."""
    if size == "cpu":
        grid = itertools.product((64,), (32, 64), (2, 3), (4, 8))
    else:
        grid = itertools.product((64, 128), (32, 64, 128), (2, 3, 4), (4, 8))
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn, s, w in grid]
