"""Attention variants the hook reads with a doubt or without one, written as people write them:
a grouped-query attention forward (keys and values shared by ``nheads // nheads_k`` query
heads, as Llama-style models run it) and a sliding-window forward (each query sees the last
``window_size`` keys, as Mistral-style models run it), both over flash-attn's (B, S, H, D)
layout with strides passed as arguments and grid (query blocks, batch * heads). The code is our
own.

Not in ``user_kernels.STYLES`` (whose test asserts each style is read without a doubt): the
sliding window widens k ("shape" doubt) and GQA is read as plain attention over the query
heads. ``ALL_STYLES`` is both, for experiments/device/hook_user_spaces_h200.py, which times
their whole lists on the H200 to see what the widening costs and what the missing GQA doubt
loses.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from user_kernels import STYLES, Style  # noqa: E402
from user_kernels_libs import flash_configs  # noqa: E402


@triton.jit
def gqa_fwd_kernel(Q, K, V, Out, softmax_scale, stride_qb, stride_qh, stride_qm,
                   stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                   stride_ob, stride_oh, stride_om, nheads, nheads_k, seqlen_q, seqlen_k,
                   IS_CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_hb = tl.program_id(1)
    off_b = off_hb // nheads
    off_h = off_hb % nheads
    off_hk = off_h // (nheads // nheads_k)  # the query head's shared key/value head
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qm
                + offs_d[None, :], mask=offs_m[:, None] < seqlen_q, other=0.0)
    k_base = K + off_b * stride_kb + off_hk * stride_kh
    v_base = V + off_b * stride_vb + off_hk * stride_vh
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    end_n = tl.minimum((start_m + 1) * BLOCK_M, seqlen_k) if IS_CAUSAL else seqlen_k
    for start_n in range(0, end_n, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :],
                    mask=cols[:, None] < seqlen_k, other=0.0)
        qk = tl.dot(q, tl.trans(k)) * softmax_scale
        keep = cols[None, :] < seqlen_k
        if IS_CAUSAL:
            keep = keep & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_ij[:, None])
        alpha = tl.exp(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :],
                    mask=cols[:, None] < seqlen_k, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om
             + offs_d[None, :], acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < seqlen_q)


@triton.jit
def swa_fwd_kernel(Q, K, V, Out, softmax_scale, stride_qb, stride_qh, stride_qm,
                   stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                   stride_ob, stride_oh, stride_om, nheads, seqlen_q, seqlen_k,
                   window_size_left, HEAD_DIM: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_hb = tl.program_id(1)
    off_b = off_hb // nheads
    off_h = off_hb % nheads
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qm
                + offs_d[None, :], mask=offs_m[:, None] < seqlen_q, other=0.0)
    k_base = K + off_b * stride_kb + off_h * stride_kh
    v_base = V + off_b * stride_vb + off_h * stride_vh
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # Causal, and no key more than window_size_left before its query: only the band's blocks.
    lo = tl.maximum(start_m * BLOCK_M - window_size_left, 0) // BLOCK_N * BLOCK_N
    hi = tl.minimum((start_m + 1) * BLOCK_M, seqlen_k)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :],
                    mask=cols[:, None] < seqlen_k, other=0.0)
        qk = tl.dot(q, tl.trans(k)) * softmax_scale
        keep = ((cols[None, :] < seqlen_k) & (offs_m[:, None] >= cols[None, :])
                & (offs_m[:, None] - cols[None, :] <= window_size_left))
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        # A row whose keys so far all lie before its window: nothing to add yet (no NaN).
        m_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = tl.exp(qk - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :],
                    mask=cols[:, None] < seqlen_k, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om
             + offs_d[None, :], acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < seqlen_q)


def variant_configs(size: str) -> list[triton.Config]:
    """A library's kind of list: BLOCK_M x BLOCK_N, warps, stages (tiny on the CPU)."""
    if size != "cpu":
        return flash_configs(size)  # flash-attn's list: the same on the GPU
    grid = itertools.product((64,), (32, 64), (4,), (2, 3))
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
            for m, n, w, s in grid]


def variant_inputs(problem: dict[str, int], *, device: Any, dtype: torch.dtype
                   ) -> dict[str, Any]:
    """q (B, S, H, D); k and v (B, S, Hkv, D), Hkv = H without grouping."""
    g = torch.Generator().manual_seed(0)
    b, s, h, d = problem["B"], problem["S"], problem["H"], problem["D"]
    hkv = problem.get("Hkv", h)
    q = torch.randn((b, s, h, d), generator=g).to(device=device, dtype=dtype)
    k, v = (torch.randn((b, s, hkv, d), generator=g).to(device=device, dtype=dtype)
            for _ in range(2))
    return {"q": q, "k": k, "v": v, "out": torch.empty_like(q),
            "causal": problem.get("causal", 1), "window": problem.get("window")}


def _strides(inputs: dict[str, Any]) -> list[int]:
    return [x for n in ("q", "k", "v", "out")
            for x in (inputs[n].stride(0), inputs[n].stride(2), inputs[n].stride(1))]


def gqa_launch(tuned: Any, inputs: dict[str, Any]) -> torch.Tensor:
    q, k, o = inputs["q"], inputs["k"], inputs["out"]
    batch, seqlen_q, nheads, d = q.shape
    grid = lambda meta: (triton.cdiv(seqlen_q, meta["BLOCK_M"]), batch * nheads)  # noqa: E731
    tuned[grid](q, k, inputs["v"], o, 1.0 / math.sqrt(d), *_strides(inputs), nheads,
                k.shape[2], seqlen_q, k.shape[1], IS_CAUSAL=bool(inputs["causal"]), HEAD_DIM=d)
    return o


def swa_launch(tuned: Any, inputs: dict[str, Any]) -> torch.Tensor:
    q, k, o = inputs["q"], inputs["k"], inputs["out"]
    batch, seqlen_q, nheads, d = q.shape
    grid = lambda meta: (triton.cdiv(seqlen_q, meta["BLOCK_M"]), batch * nheads)  # noqa: E731
    tuned[grid](q, k, inputs["v"], o, 1.0 / math.sqrt(d), *_strides(inputs), nheads,
                seqlen_q, k.shape[1], inputs["window"], HEAD_DIM=d)
    return o


def variant_reference(inputs: dict[str, Any]) -> torch.Tensor:
    """fp32 attention over (B, H, S, D), keys and values repeated per group, the window as a
    mask."""
    q, k, v = (inputs[n].float().transpose(1, 2) for n in "qkv")
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = q.shape[2]
    i = torch.arange(s, device=q.device)
    keep = i[:, None] >= i[None, :] if inputs["causal"] else torch.ones(s, s, dtype=torch.bool,
                                                                           device=q.device)
    if inputs["window"] is not None:
        keep = keep & (i[:, None] - i[None, :] <= inputs["window"])
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    return out.transpose(1, 2)


def _sdpa(inputs: dict[str, Any]) -> torch.Tensor:
    """torch's equivalent, for timing: SDPA with grouped heads (enable_gqa) or a window mask."""
    q, k, v = (inputs[n].transpose(1, 2) for n in "qkv")
    if inputs["window"] is None:
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=bool(inputs["causal"]), enable_gqa=True)
    i = torch.arange(q.shape[2], device=q.device)
    keep = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] <= inputs["window"])
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)


VARIANTS: dict[str, Style] = {s.name: s for s in (
    Style("gqa_attention", gqa_fwd_kernel, variant_configs, ("seqlen_q", "seqlen_k"),
          "attention", variant_inputs, gqa_launch, variant_reference,
          {"B": 1, "H": 4, "Hkv": 2, "S": 128, "D": 64, "causal": 1},
          {"B": 4, "H": 32, "Hkv": 8, "S": 2048, "D": 128, "causal": 1}, torch.float16,
          torch.float16, 5e-3, _sdpa),
    Style("sliding_window_attention", swa_fwd_kernel, variant_configs, ("seqlen_q",),
          "attention", variant_inputs, swa_launch, variant_reference,
          {"B": 1, "H": 2, "S": 192, "D": 64, "causal": 1, "window": 80},
          {"B": 4, "H": 16, "S": 4096, "D": 64, "causal": 1, "window": 512}, torch.float16,
          torch.float16, 5e-3, _sdpa),
)}
ALL_STYLES: dict[str, Style] = {**STYLES, **VARIANTS}
