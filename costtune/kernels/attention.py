"""Attention forward, FlashAttention-2 style: softmax(q k^T / sqrt(D)) v without materialising
the S x S scores.

Each program owns ``BLOCK_M`` query rows of one (batch, head) and streams ``BLOCK_N``-row K/V
blocks through an online softmax (running max and sum, exp2 with log2(e) folded into the scale,
fp32 accumulators). Causal programs stop at their diagonal and mask only the diagonal blocks.

``inputs`` is ``{"q", "k", "v"}`` of shape (B, H, S, D), D in {64, 128}, any strides, plus
``"causal"`` (a bool; an int or a 0-dim tensor is accepted too; absent means not causal) and
optionally ``"out"`` to write into.

>>> from costtune.kernels import attention
>>> p = {"B": 1, "H": 2, "S": 40, "D": 64, "causal": 1}
>>> inputs = attention.make_inputs(p, "float16")
>>> cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2}
>>> attention.launch(inputs, cfg).shape  # doctest: +SKIP
torch.Size([1, 2, 40, 64])
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from costtune.hardware import H200
from costtune.kernels.base import PROBLEM_KEYS as FAMILY_PROBLEM_KEYS
from costtune.kernels.base import KernelCall, check_tensor, dtype_of
from costtune.space import ConfigSpace
from costtune.types import Config

NAME = "attention"
FAMILY = NAME  # the family's original implementation
DESCRIPTION = ("FlashAttention-2 style forward with pointer loads: one program per BLOCK_M query "
               "rows of a head streams BLOCK_N-row K/V blocks through an online softmax.")
PROBLEM_KEYS = FAMILY_PROBLEM_KEYS[NAME]
DTYPES = ("float16", "bfloat16")
HEAD_DIMS = (64, 128)

# Norm-wise relative error against fp32 attention on the same (rounded) inputs. The kernel
# rounds P to the input dtype before P @ V and rounds the output, each ~2^-11 (fp16) / ~2^-8
# (bf16) relative per element; measured under the interpreter: ~2.6e-4 (fp16), ~5e-3 (bf16).
# The bounds leave ~4x margin; a dropped KV block or a wrong mask is off by > 1e-1.
TOLERANCE = {"float16": 1e-3, "bfloat16": 2e-2}


def _p(b: int, h: int, s: int, d: int, causal: int) -> dict[str, int]:
    return {"B": b, "H": h, "S": s, "D": d, "causal": causal}


# Suites keep 4*B*H*S^2*D <= ~2.2 TFLOP per shape. They stand for LLM prefill with 7B (32 heads),
# 13B (40), 70B-like (48/64, no GQA) head counts at D=128; encoders and GPT-2-sized models at
# D=64 (12/16/25 heads, batched, incl. ViT's 197/577 tokens); long context (8K-16K tokens, few
# heads); and small batch x heads where a single wave does not fill the GPU.
TRAIN_SHAPES = [
    _p(1, 32, 1024, 128, 1), _p(1, 32, 2048, 128, 1), _p(1, 32, 4096, 128, 1),
    _p(2, 32, 512, 128, 0), _p(4, 32, 1024, 128, 0), _p(1, 32, 640, 128, 1),
    _p(2, 32, 3000, 128, 1),
    _p(1, 40, 2048, 128, 1), _p(2, 40, 1024, 128, 1), _p(1, 40, 4096, 128, 0),
    _p(1, 64, 1024, 128, 1), _p(1, 64, 4096, 128, 1), _p(1, 64, 2048, 128, 0),
    _p(1, 48, 2048, 128, 1),
    _p(1, 8, 16384, 128, 1), _p(1, 8, 8192, 128, 0), _p(1, 4, 16384, 64, 0),
    _p(1, 16, 8192, 64, 1),
    _p(16, 12, 512, 64, 0), _p(32, 12, 128, 64, 0), _p(8, 16, 1024, 64, 1),
    _p(4, 25, 1024, 64, 1), _p(2, 12, 2048, 64, 1), _p(1, 16, 384, 64, 0),
    _p(1, 12, 197, 64, 0), _p(64, 16, 128, 64, 1),
    _p(8, 8, 256, 128, 0), _p(1, 1, 4096, 64, 1),
]
TEST_SHAPES = [
    _p(2, 32, 1536, 128, 1), _p(1, 32, 8192, 128, 1), _p(1, 32, 512, 128, 1),
    _p(2, 40, 2048, 128, 1), _p(1, 64, 512, 128, 0), _p(2, 64, 1024, 128, 0),
    _p(1, 8, 12288, 128, 1), _p(1, 16, 16384, 64, 1),
    _p(8, 12, 1024, 64, 0), _p(16, 16, 256, 64, 1), _p(1, 25, 777, 64, 0),
    _p(1, 12, 577, 64, 0), _p(4, 8, 4096, 64, 0), _p(1, 2, 4096, 128, 1),
]

LOG2E = 1.4426950408889634
_PARAMS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
_ELSIZE = 2  # both DTYPES are 2-byte types


@triton.jit
def _attn_kv_blocks(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd, stride_vs,
                    stride_vd, offs_m, offs_d, lo, hi, S, qk_scale,
                    BLOCK_N: tl.constexpr, MASK: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """Fold K/V rows [lo, hi) into the running state. MASK: 0 none, 1 cols < S, 2 causal."""
    offs_n = tl.arange(0, BLOCK_N)
    for n0 in tl.range(lo, hi, BLOCK_N):
        cols = n0 + offs_n
        k_ptrs = k_base + cols[None, :] * stride_ks + offs_d[:, None] * stride_kd  # (D, BLOCK_N)
        v_ptrs = v_base + cols[:, None] * stride_vs + offs_d[None, :] * stride_vd  # (BLOCK_N, D)
        if MASK == 0:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        else:
            in_seq = cols < S
            k = tl.load(k_ptrs, mask=in_seq[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=in_seq[:, None], other=0.0)
        s = tl.dot(q, k.to(q.dtype)) * qk_scale  # log2-scaled scores; q is fp32 if UPCAST_DOT
        if MASK == 1:
            s = tl.where(in_seq[None, :], s, -float("inf"))
        if MASK == 2:
            s = tl.where((cols[None, :] <= offs_m[:, None]) & in_seq[None, :], s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # Every row sees a finite score in its first block (col 0 is never masked), so m_new is
        # finite from then on and exp2(-inf - m_new) = 0 rather than NaN.
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        p_in = p.to(v.dtype)  # P @ V runs in the input dtype, as on the GPU
        if UPCAST_DOT:
            acc = tl.dot(p_in.to(tl.float32), v.to(tl.float32), acc * alpha[:, None])
        else:
            acc = tl.dot(p_in, v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(q_ptr, k_ptr, v_ptr, o_ptr,
              stride_qb, stride_qh, stride_qs, stride_qd,
              stride_kb, stride_kh, stride_ks, stride_kd,
              stride_vb, stride_vh, stride_vs, stride_vd,
              stride_ob, stride_oh, stride_os, stride_od,
              H, S, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, UPCAST_DOT: tl.constexpr):
    pid_m = tl.program_id(0)
    if CAUSAL:
        # Query blocks near the end have the most KV blocks: launch them first so the last wave
        # holds short programs.
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    q_base = q_ptr + b * stride_qb + h * stride_qh
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh
    o_base = o_ptr + b * stride_ob + h * stride_oh

    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = (offs_m < S)[:, None]
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                mask=row_ok, other=0.0)
    if UPCAST_DOT:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if CAUSAL:
        # KV blocks ending at or before row m0 are visible to every row: no mask. Blocks past
        # the last row of this query block are skipped entirely.
        full_end = ((m0 + 1) // BLOCK_N) * BLOCK_N
        hi = tl.minimum(m0 + BLOCK_M, S)
        acc, l_i, m_i = _attn_kv_blocks(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd,
                                        stride_vs, stride_vd, offs_m, offs_d, 0, full_end, S,
                                        qk_scale, BLOCK_N, 0, UPCAST_DOT)
        acc, l_i, m_i = _attn_kv_blocks(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd,
                                        stride_vs, stride_vd, offs_m, offs_d, full_end, hi, S,
                                        qk_scale, BLOCK_N, 2, UPCAST_DOT)
    else:
        full_end = (S // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _attn_kv_blocks(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd,
                                        stride_vs, stride_vd, offs_m, offs_d, 0, full_end, S,
                                        qk_scale, BLOCK_N, 0, UPCAST_DOT)
        acc, l_i, m_i = _attn_kv_blocks(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd,
                                        stride_vs, stride_vd, offs_m, offs_d, full_end, S, S,
                                        qk_scale, BLOCK_N, 1, UPCAST_DOT)
    out = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=row_ok)


def _interpreted() -> bool:
    """True under TRITON_INTERPRET=1, whose tl.dot multiplies bf16 bit patterns (triton 3.6);
    compiled kernels never take the upcast branch."""
    return not isinstance(_attn_fwd, triton.runtime.jit.JITFunction)


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _sizes(problem: dict[str, Any]) -> tuple[int, int, int, int, bool]:
    missing = [k for k in PROBLEM_KEYS if k not in problem]
    if missing:
        raise ValueError(f"problem lacks {missing}; attention needs {list(PROBLEM_KEYS)}")
    b, h, s, d = (int(problem[k]) for k in ("B", "H", "S", "D"))
    if min(b, h, s) < 1:
        raise ValueError(f"B, H, S must be >= 1, got B={b} H={h} S={s}")
    if d not in HEAD_DIMS:
        raise ValueError(f"D={d} is not supported; use one of {list(HEAD_DIMS)}")
    return b, h, s, d, bool(problem["causal"])


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    values = config.as_dict() if isinstance(config, Config) else dict(config)
    unknown = sorted(set(values) - set(_PARAMS))
    missing = sorted(set(_PARAMS) - set(values))
    if unknown or missing:
        raise ValueError(f"attention config: unknown {unknown}, missing {missing}; "
                         f"expected {list(_PARAMS)}")
    for name, v in values.items():
        if not isinstance(v, Integral) or v < 1:
            raise ValueError(f"attention config: {name}={v!r} must be a positive integer")
    for name in ("BLOCK_M", "BLOCK_N"):
        v = values[name]
        if v < 16 or v & (v - 1):  # tl.dot needs power-of-two tiles of at least 16
            raise ValueError(f"attention config: {name}={v} must be a power of two >= 16")
    return {k: int(v) for k, v in values.items()}


def make_inputs(problem: dict[str, Any], dtype: str, *, seed: int = 0,
                device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """q, k, v ~ N(0, 1) from a seeded CPU generator (CPU and GPU inputs match), and the
    causal flag as a bool."""
    b, h, s, d, causal = _sizes(problem)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dt = dtype_of(dtype)
    out = {name: torch.randn(b, h, s, d, generator=gen).to(dt).to(device)
           for name in ("q", "k", "v")}
    out["causal"] = bool(causal)
    return out


def _causal(inputs: dict[str, Any]) -> bool:
    c = inputs.get("causal", False)
    if not isinstance(c, torch.Tensor):
        return bool(c)
    if c.ndim == 0:
        return bool(c.item())
    raise ValueError(f"causal must be a bool, an int or a 0-dim tensor, got shape "
                     f"{tuple(c.shape)}")


def reference(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    q, k, v = (inputs[n].float() for n in ("q", "k", "v"))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=_causal(inputs))


def torch_op(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    causal = _causal(inputs)
    if q.is_cuda:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def grid(problem: dict[str, Any], config: Config | dict[str, Any]) -> tuple[int, ...]:
    """(query blocks, B*H)."""
    b, h, s, _, _ = _sizes(problem)
    return (triton.cdiv(s, _config_values(config)["BLOCK_M"]), b * h)


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """BLOCK_M and BLOCK_N are both tuned here: nothing is fixed."""
    return {}


def _check_inputs(inputs: dict[str, Any]) -> torch.Tensor:
    q = inputs.get("q")
    check_tensor("q", q, dtypes=DTYPES, ndim=4)
    same = (str(q.dtype).removeprefix("torch."),)
    for name in ("k", "v", "out"):
        t = inputs.get(name)
        if name == "out" and t is None:
            continue
        check_tensor(name, t, dtypes=same, ndim=4, device=q.device)
        if t.shape != q.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but q has {tuple(q.shape)}")
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"q has head dim {q.shape[-1]}; supported: {list(HEAD_DIMS)}")
    if q.numel() == 0:
        raise ValueError(f"q must be non-empty, got shape {tuple(q.shape)}")
    return q


def kernel_calls(inputs: dict[str, Any], config: Config | dict[str, Any]) -> list[KernelCall]:
    """The one launch ``launch`` makes; allocates ``out`` unless ``inputs`` holds one."""
    cfg = _config_values(config)
    q = _check_inputs(inputs)
    k, v = inputs["k"], inputs["v"]
    out = inputs.get("out")
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    b, h, s, d = q.shape
    causal = _causal(inputs)
    problem = _p(b, h, s, d, int(causal))
    args = (q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(), h, s,
            LOG2E / math.sqrt(d))
    kwargs = {"HEAD_DIM": d, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
              "CAUSAL": causal, "UPCAST_DOT": _interpreted() and q.dtype == torch.bfloat16}
    return [KernelCall(_attn_fwd, grid(problem, cfg), args, kwargs,
                       num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])]


def launch(inputs: dict[str, Any], config: Config | dict[str, Any]) -> torch.Tensor:
    """Run the kernel; returns (B, H, S, D) in the input dtype."""
    calls = kernel_calls(inputs, config)
    for call in calls:
        call.run()
    return calls[-1].args[3]


def flops(problem: dict[str, Any]) -> float:
    """Two S x S x D matmuls per head (4*B*H*S^2*D), halved when causal."""
    b, h, s, d, causal = _sizes(problem)
    return 4.0 * b * h * s * s * d / (2 if causal else 1)


def min_bytes(problem: dict[str, Any], dtype: str) -> float:
    """Read q, k, v once and write the output once."""
    b, h, s, d, _ = _sizes(problem)
    return 4.0 * b * h * s * d * dtype_of(dtype).itemsize


def config_space(problem: dict[str, Any] | None = None) -> ConfigSpace:
    """BLOCK_M x BLOCK_N x num_warps x num_stages under a shared-memory estimate; without a
    problem the estimate assumes the largest head dim (128)."""
    d = max(HEAD_DIMS) if problem is None else _sizes(problem)[3]
    params = {"BLOCK_M": [64, 128], "BLOCK_N": [32, 64, 128], "num_warps": [4, 8],
              "num_stages": [2, 3, 4]}

    def shared_memory(c: dict[str, Any]) -> bool:
        # K and V tiles per pipeline stage, plus the resident Q tile.
        smem = (c["num_stages"] * c["BLOCK_N"] * d * 2 * _ELSIZE + c["BLOCK_M"] * d * _ELSIZE)
        return smem <= H200.max_shared_per_block

    constraints = {"shared_memory_le_sm90": shared_memory}
    if problem is not None:
        cap = _next_pow2(_sizes(problem)[2])
        constraints["block_m_le_next_pow2_s"] = lambda c: c["BLOCK_M"] <= max(64, cap)
        constraints["block_n_le_next_pow2_s"] = lambda c: c["BLOCK_N"] <= max(32, cap)
    return ConfigSpace(params, constraints=constraints)


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | np.ndarray:
    """Bytes of shared memory this attention tiling needs at least once compiled (the
    feasibility check's lower bound): the resident Q tile plus ``num_stages`` K and V tiles
    when K and V load 16-aligned (``aligned["k"]`` and ``["v"]``, TMA descriptors included) on
    sm_90 with 4 or 8 warps. On the dataset's 1,784 compiled attention rows this equals the
    compiled size on every row, and a tutorial-06-style TMA kernel compiles to it plus 1 KiB
    (experiments/feasibility.py). Where nothing was checked (unaligned K/V, other dtypes or
    archs, num_stages <= 1, warp specialization with other than 8 warps) it claims nothing
    (0). Vectorised: config values may be arrays.

    >>> cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4}
    >>> p = {"B": 1, "H": 1, "S": 1024, "D": 128, "causal": 0}
    >>> shared_memory_floor(p, cfg, dtype="float16", aligned={"k": True, "v": True})
    294912
    """
    stages = np.asarray(config["num_stages"], dtype=float)
    bm, bn, warps = (np.asarray(config[k], dtype=float) for k in ("BLOCK_M", "BLOCK_N",
                                                                  "num_warps"))
    claim = ((arch == 90) & np.isin(warps, (4, 8)) & (stages > 1) & (dtype in DTYPES)
             & bool(aligned.get("k", False) and aligned.get("v", False))
             & ~(np.asarray(warp_specialized, dtype=bool) & (warps != 8)))
    d = int(problem["D"])
    size = dtype_of(dtype).itemsize if dtype in DTYPES else 0
    out = np.where(claim, (stages * 2 * bn * d + bm * d) * size, 0).astype(np.int64)
    return int(out) if out.ndim == 0 else out
