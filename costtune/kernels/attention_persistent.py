"""Attention forward on a persistent grid: one program per SM walks a list of (query block,
head) tiles.

The tile body is the family's FlashAttention-2 loop (pointer loads, online softmax in exp2,
fp32 statistics and accumulator, causal blocks past the diagonal skipped), but instead of one
program per tile the grid is ``min(tiles, SMs)`` programs and program ``p`` runs tiles ``p,
p + SMs, ...`` (the scheduling of tutorial 09's persistent matmul and FlashAttention-3). So the
hardware is used differently from the original: one resident program per SM at a time (no
second CTA hides another's softmax or its loads: 4-warp and small-tile configs lose more here),
no launch-tail of short programs, and the tile order is the kernel's own choice. Causal tiles
run heaviest first (the last query block of every head, then the one before, ...) so the last
round holds short tiles; non-causal tiles run head by head, so the programs resident at once
share one head's K and V through L2.

The launch is sized for the H200 (``hardware.H200.num_sms`` programs), the suite's target.
``inputs``, ``make_inputs``, ``reference``, ``torch_op``, ``flops``, ``min_bytes``, the
tolerance and the shapes are the attention family's.

>>> from costtune.kernels import attention_persistent as ap
>>> ap.grid({"B": 1, "H": 32, "S": 4096, "D": 128, "causal": 1},
...         {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3})
(132,)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from costtune.hardware import H200
from costtune.kernels import attention as _family
from costtune.kernels.attention import (
    DTYPES,
    HEAD_DIMS,
    LOG2E,
    PROBLEM_KEYS,
    TEST_SHAPES,
    TOLERANCE,
    TRAIN_SHAPES,
    _attn_kv_blocks,
    flops,
    implied_params,
    make_inputs,
    min_bytes,
    reference,
    torch_op,
)
from costtune.kernels.base import KernelCall
from costtune.space import ConfigSpace  # noqa: F401  (the return type, documented)
from costtune.types import Config

# Persistent programs: one per SM of the H200, the suite's target (a module constant, so a test
# under the interpreter can make tiles outnumber programs).
PROGRAMS = H200.num_sms

__all__ = ["DESCRIPTION", "DTYPES", "FAMILY", "HEAD_DIMS", "NAME", "PROBLEM_KEYS",
           "TEST_SHAPES", "TOLERANCE", "TRAIN_SHAPES", "config_space", "flops", "grid",
           "implied_params", "kernel_calls", "launch", "make_inputs", "min_bytes", "reference",
           "shared_memory_floor", "torch_op"]

NAME = "attention_persistent"
FAMILY = "attention"
DESCRIPTION = ("FlashAttention-2 forward on a persistent grid: one program per SM loops over "
               "(query block, head) tiles, heaviest causal tiles first, head by head otherwise.")


@triton.jit
def _attn_fwd_persistent(q_ptr, k_ptr, v_ptr, o_ptr,
                         stride_qb, stride_qh, stride_qs, stride_qd,
                         stride_kb, stride_kh, stride_ks, stride_kd,
                         stride_vb, stride_vh, stride_vs, stride_vd,
                         stride_ob, stride_oh, stride_os, stride_od,
                         H, S, qk_scale, n_m_blocks, n_tiles,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr, UPCAST_DOT: tl.constexpr):
    n_bh = n_tiles // n_m_blocks
    offs_d = tl.arange(0, HEAD_DIM)
    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        if CAUSAL:
            # Round r runs the r-th last query block of every head: long tiles first.
            pid_m = n_m_blocks - 1 - tile // n_bh
            bh = tile % n_bh
        else:
            pid_m = tile % n_m_blocks
            bh = tile // n_m_blocks
        b = (bh // H).to(tl.int64)
        h = (bh % H).to(tl.int64)
        q_base = q_ptr + b * stride_qb + h * stride_qh
        k_base = k_ptr + b * stride_kb + h * stride_kh
        v_base = v_ptr + b * stride_vb + h * stride_vh
        o_base = o_ptr + b * stride_ob + h * stride_oh

        m0 = pid_m * BLOCK_M
        offs_m = m0 + tl.arange(0, BLOCK_M)
        row_ok = (offs_m < S)[:, None]
        q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                    mask=row_ok, other=0.0)
        if UPCAST_DOT:
            q = q.to(tl.float32)
        m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        if CAUSAL:
            full_end = ((m0 + 1) // BLOCK_N) * BLOCK_N
            hi = tl.minimum(m0 + BLOCK_M, S)
        else:
            full_end = (S // BLOCK_N) * BLOCK_N
            hi = S
        acc, l_i, m_i = _attn_kv_blocks(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd,
                                        stride_vs, stride_vd, offs_m, offs_d, 0, full_end, S,
                                        qk_scale, BLOCK_N, 0, UPCAST_DOT)
        # The last blocks: masked at S (mode 1), or on the causal diagonal (mode 2).
        acc, l_i, m_i = _attn_kv_blocks(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd,
                                        stride_vs, stride_vd, offs_m, offs_d, full_end, hi, S,
                                        qk_scale, BLOCK_N, 1 + CAUSAL, UPCAST_DOT)
        out = acc / l_i[:, None]
        tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od,
                 out.to(o_ptr.dtype.element_ty), mask=row_ok)


def _interpreted() -> bool:
    """True under TRITON_INTERPRET=1 (whose tl.dot mishandles bf16 in triton 3.6, see the
    family module); compiled kernels never take the upcast branch."""
    return not isinstance(_attn_fwd_persistent, triton.runtime.jit.JITFunction)


def _sizes(problem: dict[str, Any]) -> tuple[int, int, int, int, bool]:
    return _family._sizes(problem)


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    try:
        return _family._config_values(config)
    except ValueError as err:  # the family's message, under this implementation's name
        raise ValueError(str(err).replace("attention config", f"{NAME} config", 1)) from None


def tiles(problem: dict[str, Any], config: Config | dict[str, Any]) -> int:
    """(query blocks) x B*H: the work items the persistent programs share."""
    b, h, s, _, _ = _sizes(problem)
    return triton.cdiv(s, _config_values(config)["BLOCK_M"]) * b * h


def grid(problem: dict[str, Any], config: Config | dict[str, Any]) -> tuple[int, ...]:
    """(min(tiles, SMs),): one persistent program per SM of the H200."""
    return (min(tiles(problem, config), PROGRAMS),)


def kernel_calls(inputs: dict[str, Any], config: Config | dict[str, Any]) -> list[KernelCall]:
    """The one launch ``launch`` makes; allocates ``out`` unless ``inputs`` holds one."""
    cfg = _config_values(config)
    q = _family._check_inputs(inputs)
    k, v = inputs["k"], inputs["v"]
    out = inputs.get("out")
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    b, h, s, d = q.shape
    causal = _family._causal(inputs)
    problem = {"B": b, "H": h, "S": s, "D": d, "causal": int(causal)}
    n_tiles = tiles(problem, cfg)
    args = (q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(), h, s,
            LOG2E / math.sqrt(d), triton.cdiv(s, cfg["BLOCK_M"]), n_tiles)
    kwargs = {"HEAD_DIM": d, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
              "CAUSAL": causal, "UPCAST_DOT": _interpreted() and q.dtype == torch.bfloat16}
    return [KernelCall(_attn_fwd_persistent, grid(problem, cfg), args, kwargs,
                       num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])]


def launch(inputs: dict[str, Any], config: Config | dict[str, Any]) -> torch.Tensor:
    """Run the kernel; returns (B, H, S, D) in the input dtype."""
    (call,) = kernel_calls(inputs, config)
    call.run()
    return call.args[3]


def config_space(problem: dict[str, Any] | None = None) -> ConfigSpace:
    """The family's space (BLOCK_M x BLOCK_N x num_warps x num_stages under its shared-memory
    estimate and, with a problem, blocks no larger than S needs)."""
    return _family.config_space(problem)


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | np.ndarray:
    """The family's lower bound (Q tile plus ``num_stages`` K and V tiles): the tile body is
    the family's, only the loop around it differs. Vectorised: config values may be arrays."""
    return _family.shared_memory_floor(problem, config, dtype=dtype, aligned=aligned, arch=arch,
                                       warp_specialized=warp_specialized)
