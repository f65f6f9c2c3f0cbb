"""Attention forward over host TMA descriptors on a persistent grid: the tile body of
``attention_tma`` (tutorial 06 over TMA, exp2 online softmax, causal diagonal blocks masked,
blocks past it never loaded) inside the tile loop of ``attention_persistent`` (one program per
SM of the H200 walking (query block, head) tiles, the heaviest causal tiles first, head by head
otherwise), as the persistent TMA variants of tutorial 06 in tritonbench are written.

So every tile moves by TMA bulk copies and one resident program per SM runs tile after tile:
no second CTA hides a program's softmax, no launch tail. Warp specialization is not offered
(the family's TMA kernel specializes its KV loop; here that loop sits in the persistent loop).

As in ``attention_tma``, Q/K/V/O must be contiguous (B, H, S, D), viewed as ``[B*H*S, D]``
with no row mask: ``S`` must be a multiple of ``BLOCK_M`` and ``BLOCK_N``, and causal problems
need ``BLOCK_M % BLOCK_N == 0``; suite shapes whose ``S`` is not a multiple of 64 are dropped.

>>> from costtune.kernels import attention_tma_persistent as atp
>>> atp.grid({"B": 1, "H": 32, "S": 4096, "D": 128, "causal": 1},
...          {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3})
(132,)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from costtune.hardware import H200
from costtune.kernels import attention as _family
from costtune.kernels import attention_tma as _tma
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
from costtune.kernels.attention_tma import TEST_SHAPES, TRAIN_SHAPES, _tma_kv_loop
from costtune.kernels.base import KernelCall
from costtune.space import ConfigSpace
from costtune.types import Config

__all__ = ["DESCRIPTION", "DTYPES", "FAMILY", "HEAD_DIMS", "NAME", "PROBLEM_KEYS",
           "TEST_SHAPES", "TOLERANCE", "TRAIN_SHAPES", "config_space", "flops", "grid",
           "implied_params", "kernel_calls", "launch", "make_inputs", "min_bytes", "reference",
           "shared_memory_floor", "tiles", "torch_op"]

NAME = "attention_tma_persistent"
FAMILY = "attention"
DESCRIPTION = ("Fused attention over host TMA descriptors on a persistent grid: one program per "
               "SM loops over (query block, head) tiles, each moving Q/K/V/O by TMA bulk "
               "copies, heaviest causal tiles first.")

# Persistent programs: one per SM of the H200 (a module constant, so a test under the
# interpreter can make tiles outnumber programs).
PROGRAMS = H200.num_sms
_PARAMS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
_ELSIZE = 2  # both DTYPES are 2-byte types


@triton.jit
def _attn_fwd_tma_persistent(desc_q, desc_k, desc_v, desc_o, S, qk_scale, n_m_blocks, n_tiles,
                             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                             UPCAST_DOT: tl.constexpr):
    n_bh = n_tiles // n_m_blocks
    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        if CAUSAL:
            # Round r runs the r-th last query block of every head: long tiles first.
            pid_m = n_m_blocks - 1 - tile // n_bh
            bh = tile % n_bh
        else:
            pid_m = tile % n_m_blocks
            bh = tile // n_m_blocks
        row0 = bh * S  # this (batch, head)'s first row in the [B*H*S, D] views
        m0 = pid_m * BLOCK_M
        offs_m = m0 + tl.arange(0, BLOCK_M)
        q = desc_q.load([row0 + m0, 0])
        if UPCAST_DOT:
            q = q.to(tl.float32)
        m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        if CAUSAL:
            acc, l_i, m_i = _tma_kv_loop(acc, l_i, m_i, q, desc_k, desc_v, row0, offs_m, 0, m0,
                                         qk_scale, BLOCK_N, False, False, UPCAST_DOT)
            acc, l_i, m_i = _tma_kv_loop(acc, l_i, m_i, q, desc_k, desc_v, row0, offs_m, m0,
                                         m0 + BLOCK_M, qk_scale, BLOCK_N, True, False,
                                         UPCAST_DOT)
        else:
            acc, l_i, m_i = _tma_kv_loop(acc, l_i, m_i, q, desc_k, desc_v, row0, offs_m, 0, S,
                                         qk_scale, BLOCK_N, False, False, UPCAST_DOT)
        desc_o.store([row0 + m0, 0], (acc / l_i[:, None]).to(desc_o.dtype))


def _interpreted() -> bool:
    """True under TRITON_INTERPRET=1 (whose tl.dot mishandles bf16 in triton 3.6, see the
    family module); compiled kernels never take the upcast branch."""
    return not isinstance(_attn_fwd_tma_persistent, triton.runtime.jit.JITFunction)


def _sizes(problem: dict[str, Any]) -> tuple[int, int, int, int, bool]:
    return _family._sizes(problem)


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    values = config.as_dict() if isinstance(config, Config) else dict(config)
    if "WARP_SPECIALIZE" in values:
        raise ValueError(f"{NAME} config: unknown ['WARP_SPECIALIZE']; expected "
                         f"{list(_PARAMS)} (no warp specialization in the persistent loop)")
    try:
        return _family._config_values(values)
    except ValueError as err:  # the family's message, under this implementation's name
        raise ValueError(str(err).replace("attention config", f"{NAME} config", 1)) from None


def tiles(problem: dict[str, Any], config: Config | dict[str, Any]) -> int:
    """(query blocks) x B*H: the work items the persistent programs share."""
    b, h, s, _, _ = _sizes(problem)
    return triton.cdiv(s, _config_values(config)["BLOCK_M"]) * b * h


def grid(problem: dict[str, Any], config: Config | dict[str, Any]) -> tuple[int, ...]:
    """(min(tiles, SMs),): one persistent program per SM of the H200."""
    return (min(tiles(problem, config), PROGRAMS),)


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """BLOCK_M and BLOCK_N are tuned, as in the family's original: nothing is fixed."""
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
    try:
        _tma._check_blocks(s, causal, cfg)
    except ValueError as err:
        raise ValueError(str(err).replace(_tma.NAME, NAME, 1)) from None
    rows = b * h * s

    def desc(t: torch.Tensor, block_rows: int) -> TensorDescriptor:
        return TensorDescriptor(t, shape=[rows, d], strides=[d, 1], block_shape=[block_rows, d])

    problem = {"B": b, "H": h, "S": s, "D": d, "causal": int(causal)}
    args = (desc(q, cfg["BLOCK_M"]), desc(k, cfg["BLOCK_N"]), desc(v, cfg["BLOCK_N"]),
            desc(out, cfg["BLOCK_M"]), s, LOG2E / math.sqrt(d), s // cfg["BLOCK_M"],
            tiles(problem, cfg))
    kwargs = {"HEAD_DIM": d, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
              "CAUSAL": causal, "UPCAST_DOT": _interpreted() and q.dtype == torch.bfloat16}
    return [KernelCall(_attn_fwd_tma_persistent, grid(problem, cfg), args, kwargs,
                       num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])]


def launch(inputs: dict[str, Any], config: Config | dict[str, Any]) -> torch.Tensor:
    """Run the kernel; returns (B, H, S, D) in the input dtype."""
    (call,) = kernel_calls(inputs, config)
    call.run()
    return call.args[3].base


def config_space(problem: dict[str, Any] | None = None) -> ConfigSpace:
    """``attention_tma``'s space without warp specialization: BLOCK_M x BLOCK_N x num_warps x
    num_stages under its shared-memory estimate plus the output tile (the persistent loop keeps
    a staging buffer for the O store: 128x128x64 at 3 stages compiled to 262,200 B on sm_90,
    the estimate plus 32,824); with a problem, S a multiple of both blocks and, causal,
    BLOCK_M a multiple of BLOCK_N."""
    d = max(HEAD_DIMS) if problem is None else _sizes(problem)[3]
    params = {"BLOCK_M": [64, 128], "BLOCK_N": [32, 64, 128], "num_warps": [4, 8],
              "num_stages": [2, 3, 4]}
    constraints = {"shared_memory_le_sm90": (
        lambda c: (_tma._smem_estimate(c, d) + c["BLOCK_M"] * d * _ELSIZE + 1024
                   <= H200.max_shared_per_block))}
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
    """``attention_tma``'s lower bound (the family's Q tile plus ``num_stages`` K and V tiles;
    the descriptors are always 16-aligned). Vectorised: config values may be arrays."""
    return _tma.shared_memory_floor(problem, {**config, "WARP_SPECIALIZE": 0}, dtype=dtype,
                                    aligned=aligned, arch=arch)
