"""A kernel written as a kernel library writes it: flash-attn's Triton forward
(``flash_attn_triton.py``'s ``_fwd_kernel``): q, k, v laid out (batch, seqlen, nheads,
headdim), strides passed as arguments, sizes as ``nheads`` / ``seqlen_q`` / ``seqlen_k`` /
``headdim``, ``EVEN_M`` / ``EVEN_N`` / ``EVEN_HEADDIM`` from a ``triton.heuristics``, the
tuning key on ``seqlen // 32``, grid (query blocks, batch * heads). The names and launch
pattern are the library's; the code is our own. Used through ``experiments/user_kernels.py``'s
``STYLES["flashattn_bshd"]``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import triton
import triton.language as tl


@triton.heuristics({
    "EVEN_M": lambda args: args["seqlen_q"] % args["BLOCK_M"] == 0,
    "EVEN_N": lambda args: args["seqlen_k"] % args["BLOCK_N"] == 0,
    "EVEN_HEADDIM": lambda args: args["headdim"] == args["BLOCK_HEADDIM"],
})
@triton.jit
def _fwd_kernel(Q, K, V, Out, Lse, softmax_scale, stride_qb, stride_qh, stride_qm,
                stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                stride_ob, stride_oh, stride_om, nheads, seqlen_q, seqlen_k, seqlen_q_rounded,
                headdim, CACHE_KEY_SEQLEN_Q, CACHE_KEY_SEQLEN_K, IS_CAUSAL: tl.constexpr,
                BLOCK_HEADDIM: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
                EVEN_HEADDIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_hb = tl.program_id(1)
    off_b = off_hb // nheads
    off_h = off_hb % nheads
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_HEADDIM)
    q_ptrs = (Q + off_b * stride_qb + off_h * stride_qh
              + (offs_m[:, None] * stride_qm + offs_d[None, :]))
    k_base = K + off_b * stride_kb + off_h * stride_kh
    v_base = V + off_b * stride_vb + off_h * stride_vh
    if EVEN_M and EVEN_HEADDIM:
        q = tl.load(q_ptrs)
    else:
        q = tl.load(q_ptrs, mask=(offs_m[:, None] < seqlen_q) & (offs_d[None, :] < headdim),
                    other=0.0)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_HEADDIM], dtype=tl.float32)
    end_n = seqlen_k if not IS_CAUSAL else tl.minimum((start_m + 1) * BLOCK_M, seqlen_k)
    for start_n in range(0, end_n, BLOCK_N):
        cols = start_n + offs_n
        if EVEN_N and EVEN_HEADDIM:
            k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :])
        else:
            k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :],
                        mask=(cols[:, None] < seqlen_k) & (offs_d[None, :] < headdim),
                        other=0.0)
        qk = tl.dot(q, tl.trans(k)).to(tl.float32) * softmax_scale
        if not EVEN_N:
            qk = tl.where(cols[None, :] < seqlen_k, qk, float("-inf"))
        if IS_CAUSAL:
            qk = tl.where(offs_m[:, None] >= cols[None, :], qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_ij[:, None])
        alpha = tl.exp(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        if EVEN_N and EVEN_HEADDIM:
            v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :])
        else:
            v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :],
                        mask=(cols[:, None] < seqlen_k) & (offs_d[None, :] < headdim),
                        other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Lse + off_hb * seqlen_q_rounded + offs_m, m_i + tl.log(l_i))
    o_ptrs = (Out + off_b * stride_ob + off_h * stride_oh
              + (offs_m[:, None] * stride_om + offs_d[None, :]))
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty),
             mask=(offs_m[:, None] < seqlen_q) & (offs_d[None, :] < headdim))


def flash_configs(size: str) -> list[triton.Config]:
    """The library's kind of list: BLOCK_M x BLOCK_N, warps, stages (tiny on the CPU)."""
    if size == "cpu":
        grid = itertools.product((64,), (32, 64), (4, 8), (2,))
    else:
        grid = itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3))
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
            for m, n, w, s in grid]


def bshd_inputs(problem: dict[str, int], *, device: Any, dtype: torch.dtype
                ) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    shape = (problem["B"], problem["S"], problem["H"], problem["D"])
    q, k, v = (torch.randn(shape, generator=g).to(device=device, dtype=dtype)
               for _ in range(3))
    rounded = math.ceil(problem["S"] / 128) * 128
    return {"q": q, "k": k, "v": v, "out": torch.empty_like(q), "causal": problem["causal"],
            "lse": torch.empty(problem["B"], problem["H"], rounded, device=device,
                               dtype=torch.float32)}


def flash_launch(tuned: Any, inputs: dict[str, Any]) -> torch.Tensor:
    q, k, v, o = inputs["q"], inputs["k"], inputs["v"], inputs["out"]
    batch, seqlen_q, nheads, d = q.shape
    seqlen_k = k.shape[1]
    grid = lambda meta: (triton.cdiv(seqlen_q, meta["BLOCK_M"]), batch * nheads)  # noqa: E731
    tuned[grid](q, k, v, o, inputs["lse"], 1.0 / math.sqrt(d),
                q.stride(0), q.stride(2), q.stride(1), k.stride(0), k.stride(2), k.stride(1),
                v.stride(0), v.stride(2), v.stride(1), o.stride(0), o.stride(2), o.stride(1),
                nheads, seqlen_q, seqlen_k, inputs["lse"].shape[-1], d,
                seqlen_q // 32, seqlen_k // 32, bool(inputs["causal"]),
                max(triton.next_power_of_2(d), 16))
    return o


def bshd_reference(inputs: dict[str, Any]) -> torch.Tensor:
    q, k, v = (inputs[n].float().transpose(1, 2) for n in "qkv")
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                           is_causal=bool(inputs["causal"]))
    return out.transpose(1, 2)
