"""Attention forward, Triton tutorial-06 style, over host TMA descriptors.

Q, K, V and O (contiguous (B, H, S, D)) are viewed as ``[B*H*S, D]`` through host
``TensorDescriptor``s, so every tile moves by TMA (one bulk copy per tile into shared memory,
no address arithmetic in the kernel) and the output is stored by TMA too. Each program owns
``BLOCK_M`` query rows of one (batch, head) and streams ``BLOCK_N``-row K/V tiles through an
online softmax in exp2 (log2(e) folded into the scale, fp32 statistics and accumulator). Causal
programs run the blocks left of their diagonal unmasked and then the ``BLOCK_M / BLOCK_N``
diagonal blocks with the causal mask; blocks right of the diagonal are never loaded.
``WARP_SPECIALIZE=1`` asks Triton to warp-specialize the unmasked KV loop (producer warps issue
the TMA loads, consumer warps run the dots and softmax).

Rows of one (batch, head) must not bleed into the next head's rows in the flat view: there is
no row mask, so ``S`` must be a multiple of ``BLOCK_M`` and ``BLOCK_N`` (config_space enforces
it and ``launch`` refuses other configs). Suite shapes whose ``S`` is not a multiple of 64 have
no config and are dropped: S = 3000 (train), 197 (train), 777 and 577 (test).

``inputs``, ``make_inputs``, ``reference``, ``torch_op``, ``flops``, ``min_bytes`` and the
tolerance are the attention family's.
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from costtune.hardware import H200
from costtune.kernels import attention as _family
from costtune.kernels.attention import (
    DTYPES,
    HEAD_DIMS,
    LOG2E,
    PROBLEM_KEYS,
    TOLERANCE,
    flops,
    make_inputs,
    min_bytes,
    reference,
    torch_op,
)
from costtune.kernels.base import KernelCall
from costtune.space import ConfigSpace
from costtune.types import Config

__all__ = ["DESCRIPTION", "DTYPES", "FAMILY", "HEAD_DIMS", "NAME", "PROBLEM_KEYS",
           "TEST_SHAPES", "TOLERANCE", "TRAIN_SHAPES", "config_space", "flops", "grid",
           "implied_params", "kernel_calls", "launch", "make_inputs", "min_bytes", "reference",
           "shared_memory_floor", "torch_op"]

NAME = "attention_tma"
FAMILY = "attention"
DESCRIPTION = ("Fused attention (Triton tutorial 06) over host TMA descriptors: Q/K/V tiles and "
               "the output move by TMA bulk copies, with optional warp specialization of the "
               "KV loop into producer and consumer warps.")

_PARAMS = ("BLOCK_M", "BLOCK_N", "WARP_SPECIALIZE", "num_warps", "num_stages")
_BLOCK_M_MIN = 64  # the smallest BLOCK_M of the space: S must be a multiple of it
_ELSIZE = 2  # both DTYPES are 2-byte types

TRAIN_SHAPES = [p for p in _family.TRAIN_SHAPES if p["S"] % _BLOCK_M_MIN == 0]
TEST_SHAPES = [p for p in _family.TEST_SHAPES if p["S"] % _BLOCK_M_MIN == 0]


@triton.jit
def _tma_kv_loop(acc, l_i, m_i, q, desc_k, desc_v, row0, offs_m, lo, hi, qk_scale,
                 BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                 UPCAST_DOT: tl.constexpr):
    """Fold K/V rows [lo, hi) of this head into the running state; DIAGONAL masks causally."""
    offs_n = tl.arange(0, BLOCK_N)
    for n0 in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        k = desc_k.load([row0 + n0, 0])
        if UPCAST_DOT:
            s = tl.dot(q, tl.trans(k).to(tl.float32)) * qk_scale
        else:
            s = tl.dot(q, tl.trans(k)) * qk_scale
        if DIAGONAL:
            s = tl.where(offs_m[:, None] >= (n0 + offs_n)[None, :], s, -float("inf"))
        # Each row's first block holds a visible key (col 0, or its own position on the
        # diagonal), so m_new is finite and exp2(-inf - m_new) is 0, not NaN.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = desc_v.load([row0 + n0, 0])
        p_in = p.to(v.dtype)  # P @ V runs in the input dtype, as on the GPU
        if UPCAST_DOT:
            acc = tl.dot(p_in.to(tl.float32), v.to(tl.float32), acc * alpha[:, None])
        else:
            acc = tl.dot(p_in, v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_tma(desc_q, desc_k, desc_v, desc_o, S, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  CAUSAL: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                  UPCAST_DOT: tl.constexpr):
    pid_m = tl.program_id(0)
    if CAUSAL:
        # The longest query blocks (most KV blocks) first, so the last wave holds short ones.
        pid_m = tl.num_programs(0) - 1 - pid_m
    row0 = tl.program_id(1) * S  # this (batch, head)'s first row in the [B*H*S, D] views
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    q = desc_q.load([row0 + m0, 0])
    if UPCAST_DOT:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if CAUSAL:
        # BLOCK_M is a multiple of BLOCK_N: blocks before m0 are fully visible, the
        # BLOCK_M / BLOCK_N blocks from m0 on straddle the diagonal.
        acc, l_i, m_i = _tma_kv_loop(acc, l_i, m_i, q, desc_k, desc_v, row0, offs_m, 0, m0,
                                     qk_scale, BLOCK_N, False, WARP_SPECIALIZE, UPCAST_DOT)
        acc, l_i, m_i = _tma_kv_loop(acc, l_i, m_i, q, desc_k, desc_v, row0, offs_m, m0,
                                     m0 + BLOCK_M, qk_scale, BLOCK_N, True, False, UPCAST_DOT)
    else:
        acc, l_i, m_i = _tma_kv_loop(acc, l_i, m_i, q, desc_k, desc_v, row0, offs_m, 0, S,
                                     qk_scale, BLOCK_N, False, WARP_SPECIALIZE, UPCAST_DOT)
    desc_o.store([row0 + m0, 0], (acc / l_i[:, None]).to(desc_o.dtype))


def _interpreted() -> bool:
    """True under TRITON_INTERPRET=1 (whose tl.dot mishandles bf16 in triton 3.6, see the
    family module); compiled kernels never take the upcast branch."""
    return not isinstance(_attn_fwd_tma, triton.runtime.jit.JITFunction)


def _sizes(problem: dict[str, Any]) -> tuple[int, int, int, int, bool]:
    return _family._sizes(problem)


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    values = config.as_dict() if isinstance(config, Config) else dict(config)
    unknown = sorted(set(values) - set(_PARAMS))
    missing = sorted(set(_PARAMS) - set(values))
    if unknown or missing:
        raise ValueError(f"{NAME} config: unknown {unknown}, missing {missing}; "
                         f"expected {list(_PARAMS)}")
    for name, v in values.items():
        if not isinstance(v, Integral) or isinstance(v, bool):
            raise ValueError(f"{NAME} config: {name}={v!r} must be an integer")
    if values["WARP_SPECIALIZE"] not in (0, 1):
        raise ValueError(f"{NAME} config: WARP_SPECIALIZE={values['WARP_SPECIALIZE']!r} "
                         f"must be 0 or 1")
    for name in ("num_warps", "num_stages"):
        if values[name] < 1:
            raise ValueError(f"{NAME} config: {name}={values[name]!r} must be a positive "
                             f"integer")
    for name in ("BLOCK_M", "BLOCK_N"):
        v = values[name]
        if v < 16 or v & (v - 1):  # tl.dot needs power-of-two tiles of at least 16
            raise ValueError(f"{NAME} config: {name}={v} must be a power of two >= 16")
    return {k: int(v) for k, v in values.items()}


def _check_blocks(s: int, causal: bool, cfg: dict[str, int]) -> None:
    for name in ("BLOCK_M", "BLOCK_N"):
        if s % cfg[name]:
            raise ValueError(f"{NAME}: S={s} must be a multiple of {name}={cfg[name]} (the "
                             f"[B*H*S, D] TMA view has no row mask)")
    if causal and cfg["BLOCK_M"] % cfg["BLOCK_N"]:
        raise ValueError(f"{NAME}: causal needs BLOCK_M={cfg['BLOCK_M']} to be a multiple of "
                         f"BLOCK_N={cfg['BLOCK_N']}")


def grid(problem: dict[str, Any], config: Config | dict[str, Any]) -> tuple[int, ...]:
    """(S / BLOCK_M query blocks, B*H)."""
    b, h, s, _, _ = _sizes(problem)
    return (triton.cdiv(s, _config_values(config)["BLOCK_M"]), b * h)


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """BLOCK_M and BLOCK_N are tuned here, as in the family's original: nothing is fixed."""
    return {}


def kernel_calls(inputs: dict[str, Any], config: Config | dict[str, Any]) -> list[KernelCall]:
    """The one launch ``launch`` makes; allocates ``out`` unless ``inputs`` holds one."""
    cfg = _config_values(config)
    q = _family._check_inputs(inputs)
    k, v = inputs["k"], inputs["v"]
    out = inputs.get("out")
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (B, H, S, D): {NAME} views it as "
                             f"[B*H*S, D] through a TMA descriptor")
    b, h, s, d = q.shape
    causal = _family._causal(inputs)
    _check_blocks(s, causal, cfg)
    rows = b * h * s

    def desc(t: torch.Tensor, block_rows: int) -> TensorDescriptor:
        return TensorDescriptor(t, shape=[rows, d], strides=[d, 1], block_shape=[block_rows, d])

    args = (desc(q, cfg["BLOCK_M"]), desc(k, cfg["BLOCK_N"]), desc(v, cfg["BLOCK_N"]),
            desc(out, cfg["BLOCK_M"]), s, LOG2E / math.sqrt(d))
    kwargs = {"HEAD_DIM": d, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
              "CAUSAL": causal, "WARP_SPECIALIZE": bool(cfg["WARP_SPECIALIZE"]),
              "UPCAST_DOT": _interpreted() and q.dtype == torch.bfloat16}
    problem = {"B": b, "H": h, "S": s, "D": d, "causal": int(causal)}
    return [KernelCall(_attn_fwd_tma, grid(problem, cfg), args, kwargs,
                       num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])]


def launch(inputs: dict[str, Any], config: Config | dict[str, Any]) -> torch.Tensor:
    """Run the kernel; returns (B, H, S, D) in the input dtype."""
    calls = kernel_calls(inputs, config)
    for call in calls:
        call.run()
    return calls[-1].args[3].base


def _smem_estimate(c: dict[str, Any], d: int) -> int:
    # K and V tiles per pipeline stage plus the resident Q tile (the family's estimate).
    return (c["num_stages"] * c["BLOCK_N"] * d * 2 + c["BLOCK_M"] * d) * _ELSIZE


def config_space(problem: dict[str, Any] | None = None) -> ConfigSpace:
    """BLOCK_M x BLOCK_N x WARP_SPECIALIZE x num_warps x num_stages under a shared-memory
    estimate (largest head dim without a problem), warp specialization with 8 warps only; with
    a problem, S must be a multiple of both blocks and causal problems need BLOCK_M % BLOCK_N
    == 0."""
    d = max(HEAD_DIMS) if problem is None else _sizes(problem)[3]
    params = {"BLOCK_M": [64, 128], "BLOCK_N": [32, 64, 128], "WARP_SPECIALIZE": [0, 1],
              "num_warps": [4, 8], "num_stages": [2, 3, 4]}
    constraints = {
        # Compiled sizes on sm_90 (triton 3.6) were the estimate plus 24..1024 bytes (barriers,
        # the causal diagonal loop's own buffers).
        "shared_memory_le_sm90": (
            lambda c: _smem_estimate(c, d) + 1024 <= H200.max_shared_per_block),
        # 4-warp warp specialization fails in triton 3.6's NVGPUWarpSpecialization pass on
        # sm_90 (every causal config and every BLOCK_M=128 one); 8 warps compile.
        "warp_specialize_needs_8_warps": lambda c: not c["WARP_SPECIALIZE"] or c["num_warps"] == 8,
    }
    if problem is not None:
        _, _, s, _, causal = _sizes(problem)
        constraints["s_multiple_of_block_m"] = lambda c: s % c["BLOCK_M"] == 0
        constraints["s_multiple_of_block_n"] = lambda c: s % c["BLOCK_N"] == 0
        if causal:
            constraints["causal_block_m_multiple_of_block_n"] = (
                lambda c: c["BLOCK_M"] % c["BLOCK_N"] == 0)
    return ConfigSpace(params, constraints=constraints)


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | np.ndarray:
    """A lower bound on compiled shared memory: the family's (Q tile plus ``num_stages`` K and
    V tiles, claimed on sm_90 with 4 or 8 warps and more than one stage), which the family notes
    a tutorial-06-style TMA kernel compiles to plus 1 KiB. The descriptors here are always
    16-aligned (D = 64 or 128 two-byte values per row), so K and V count as aligned.
    Vectorised: config values may be arrays.
    """
    cfg = {k: config[k] for k in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")}
    ws = config.get("WARP_SPECIALIZE", warp_specialized)
    return _family.shared_memory_floor(problem, cfg, dtype=dtype,
                                       aligned={"k": True, "v": True}, arch=arch,
                                       warp_specialized=np.asarray(ws, dtype=bool))
