"""Kernels written as people write them, none of them costtune's: in the styles of Triton's
tutorials 02 (fused softmax), 03 (matmul), 06 (fused attention, host TensorDescriptors) and 09
(TMA persistent matmul), a persistent fused attention (``user_kernels_persistent.py``), an
Inductor-generated looped softmax and matmul templates (``user_kernels_inductor.py``) and
flash-attn's (B, S, H, D) forward (``user_kernels_libs.py``). Each
``Style`` holds the @triton.jit kernel, its config lists (tiny ones for the CPU interpreter,
the tutorial-sized ones for the H200), its tuning key, inputs, launch and fp32 reference.

Written here from the tutorials' names and launch patterns (argument names, config names,
grids, pre-hooks that set descriptor block shapes); the code is our own. Used by
tests/test_user_kernels.py (CPU, ``TRITON_INTERPRET=1``) and
experiments/device/user_kernels_h200.py (cold tuning on the H200).

>>> style = STYLES["tutorial02_softmax"]
>>> inputs = style.make_inputs(style.cpu_problem, device="cpu")  # doctest: +SKIP
>>> out = style.launch(tuned_kernel, inputs)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parent))  # loaded by path from tests and scripts
import user_kernels_inductor as _ind  # noqa: E402
import user_kernels_libs as _libs  # noqa: E402
from user_kernels_configs import (  # noqa: E402
    _attn_configs,
    _inductor_configs,
    _matmul_configs,
    _softmax_configs,
    _tma_configs,
)
from user_kernels_persistent import (  # noqa: E402
    attn_fwd_persistent,
    persistent_attn_configs,
    persistent_attn_launch,
)


def num_sms(device: Any) -> int:
    """SMs of the GPU; 4 on the CPU, so persistent kernels loop at the interpreter's sizes."""
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.detach().float().cpu(), ref.detach().float().cpu()
    if out.shape != ref.shape or not bool(torch.isfinite(out).all()):
        return math.inf
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


# --- tutorial 02: fused softmax, BLOCK_SIZE given at the launch, configs vary only launch
# options (the tutorial picks num_warps / num_stages by hand; a user autotunes them) ---------

@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    # Persistent over rows: program p handles rows p, p + P, p + 2P, ...
    first = tl.program_id(0)
    step = tl.num_programs(0)
    for row in tl.range(first, n_rows, step, num_stages=num_stages):
        cols = tl.arange(0, BLOCK_SIZE)
        inside = cols < n_cols
        x = tl.load(input_ptr + row * input_row_stride + cols, mask=inside,
                    other=-float("inf"))
        shifted = x - tl.max(x, axis=0)
        numerator = tl.exp(shifted)
        y = numerator / tl.sum(numerator, axis=0)
        tl.store(output_ptr + row * output_row_stride + cols, y, mask=inside)


def _softmax_launch(tuned: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    x, y = inputs["x"], inputs["out"]
    n_rows, n_cols = x.shape
    # The tutorial's persistent grid, capped by the rows (occupancy is unknown before tuning).
    programs = min(n_rows, 4 * num_sms(x.device))
    tuned[(programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols,
                            BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return y


def _rows_inputs(problem: dict[str, int], *, device: Any, dtype: torch.dtype
                 ) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(problem["rows"], problem["cols"], generator=g).to(device=device,
                                                                      dtype=dtype)
    return {"x": x, "out": torch.empty_like(x)}


def _softmax_reference(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.softmax(inputs["x"].float(), dim=-1)


# --- tutorial 03: matmul with grouped ordering -------------------------------------------

@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                  BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                  ACTIVATION: tl.constexpr):
    pid = tl.program_id(axis=0)
    tiles_m = tl.cdiv(M, BLOCK_SIZE_M)
    tiles_n = tl.cdiv(N, BLOCK_SIZE_N)
    # Consecutive programs sweep a band of GROUP_SIZE_M row tiles, for L2 reuse of B.
    per_group = GROUP_SIZE_M * tiles_n
    band = pid // per_group
    first_m = band * GROUP_SIZE_M
    band_rows = min(tiles_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + ((pid % per_group) % band_rows)
    pid_n = (pid % per_group) // band_rows
    rm = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    rn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    rk = tl.arange(0, BLOCK_SIZE_K)
    a_tile = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_tile = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        left = K - k * BLOCK_SIZE_K
        a = tl.load(a_tile, mask=rk[None, :] < left, other=0.0)
        b = tl.load(b_tile, mask=rk[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_SIZE_K * stride_ak
        b_tile += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        acc = tl.where(acc >= 0, acc, 0.01 * acc)
    c = acc.to(c_ptr.dtype.element_ty)
    cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn, c,
             mask=(cm[:, None] < M) & (cn[None, :] < N))


def _matmul_launch(tuned: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    a, b, c = inputs["a"], inputs["b"], inputs["out"]
    (m, k), n = a.shape, b.shape[1]
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_SIZE_M"]) *  # noqa: E731
                         triton.cdiv(n, meta["BLOCK_SIZE_N"]),)
    tuned[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                c.stride(0), c.stride(1), ACTIVATION="")
    return c


def _matmul_inputs(problem: dict[str, int], *, device: Any, dtype: torch.dtype,
                   b_transposed: bool = False) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    m, n, k = problem["M"], problem["N"], problem["K"]
    a = torch.randn(m, k, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(*((n, k) if b_transposed else (k, n)), generator=g).to(device=device,
                                                                         dtype=dtype)
    return {"a": a, "b": b, "out": torch.empty(m, n, device=device, dtype=dtype)}


# --- tutorial 06: fused attention forward over host TensorDescriptors ---------------------

@triton.jit
def _attn_fwd(sm_scale, M, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              FP8_OUTPUT: tl.constexpr, STAGE: tl.constexpr, warp_specialize: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    row0 = off_hz * N_CTX  # this (batch, head) in the [Z*H*N_CTX, HEAD_DIM] views
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # exp2 instead of exp
    q = desc_q.load([row0 + start_m * BLOCK_M, 0])
    if STAGE == 3:  # causal: keys up to this query block's last row
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_CTX)
    else:
        hi = N_CTX
    for start_n in tl.range(0, hi, BLOCK_N, warp_specialize=warp_specialize):
        k = desc_k.load([row0 + start_n, 0])
        qk = tl.dot(q, k.T) * qk_scale
        if STAGE == 3:
            qk = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], qk, -1.0e6)
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = desc_v.load([row0 + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    tl.store(M + off_hz * N_CTX + offs_m, m_i + tl.math.log2(l_i))
    desc_o.store([row0 + start_m * BLOCK_M, 0], (acc / l_i[:, None]).to(desc_o.dtype))


def _attn_launch(tuned: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    q, k, v, o = inputs["q"], inputs["k"], inputs["v"], inputs["out"]
    z, h, n_ctx, d = q.shape
    rows = z * h * n_ctx
    descs = [TensorDescriptor(t, shape=[rows, d], strides=[d, 1], block_shape=[1, 1])
             for t in (q, k, v, o)]
    lse = inputs["lse"]
    grid = lambda meta: (triton.cdiv(n_ctx, meta["BLOCK_M"]), z * h, 1)  # noqa: E731
    tuned[grid](inputs["sm_scale"], lse, z, h, *descs, N_CTX=n_ctx, HEAD_DIM=d,
                FP8_OUTPUT=False, STAGE=3 if inputs["causal"] else 1, warp_specialize=False)
    return o


def _attn_inputs(problem: dict[str, int], *, device: Any, dtype: torch.dtype) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    shape = (problem["B"], problem["H"], problem["S"], problem["D"])
    q, k, v = (torch.randn(shape, generator=g).to(device=device, dtype=dtype)
               for _ in range(3))
    return {"q": q, "k": k, "v": v, "out": torch.empty_like(q), "causal": problem["causal"],
            "lse": torch.empty(shape[:3], device=device, dtype=torch.float32),
            "sm_scale": 1.0 / math.sqrt(problem["D"])}


def _attn_reference(inputs: dict[str, Any]) -> torch.Tensor:
    q, k, v = (inputs[n].float() for n in "qkv")
    scores = (q @ k.transpose(-1, -2)) * inputs["sm_scale"]
    if inputs["causal"]:
        n = q.shape[2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device)
                                    .triu(1), -math.inf)
    return torch.softmax(scores, dim=-1) @ v


# --- tutorial 09: persistent matmul over host TensorDescriptors (b given as N x K) ---------

@triton.jit
def _tile_coords(tile, per_group, tiles_m, GROUP_SIZE_M):
    band = tile // per_group
    first_m = band * GROUP_SIZE_M
    band_rows = min(tiles_m - first_m, GROUP_SIZE_M)
    return first_m + (tile % band_rows), (tile % per_group) // band_rows


@triton.jit
def matmul_kernel_tma_persistent(a_desc, b_desc, c_desc, M, N, K,
                                 BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                                 BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                                 FP8_OUTPUT: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
                                 NUM_SMS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                                 FLATTEN: tl.constexpr):
    out_type = tl.float8e4nv if FP8_OUTPUT else tl.float16
    tiles_m = tl.cdiv(M, BLOCK_SIZE_M)
    tiles_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    per_group = GROUP_SIZE_M * tiles_n
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_SMS, flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _tile_coords(tile, per_group, tiles_m, GROUP_SIZE_M)
        row = pid_m * BLOCK_SIZE_M
        col = pid_n * BLOCK_SIZE_N
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for kt in range(k_tiles):
            a = a_desc.load([row, kt * BLOCK_SIZE_K])
            b = b_desc.load([col, kt * BLOCK_SIZE_K])
            acc = tl.dot(a, b.T, acc)
        if EPILOGUE_SUBTILE:  # two half-width stores: less shared memory for the epilogue
            halves = tl.permute(tl.reshape(acc, (BLOCK_SIZE_M, 2, BLOCK_SIZE_N // 2)),
                                (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([row, col], left.to(out_type))
            c_desc.store([row, col + BLOCK_SIZE_N // 2], right.to(out_type))
        else:
            c_desc.store([row, col], acc.to(out_type))


def _tma_launch(tuned: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    a, b, c = inputs["a"], inputs["b"], inputs["out"]
    (m, k), n = a.shape, b.shape[0]
    descs = [TensorDescriptor.from_tensor(t, [1, 1]) for t in (a, b, c)]
    sms = num_sms(a.device)
    grid = lambda meta: (min(sms, triton.cdiv(m, meta["BLOCK_SIZE_M"]) *  # noqa: E731
                             triton.cdiv(n, meta["BLOCK_SIZE_N"])),)
    tuned[grid](*descs, m, n, k, FP8_OUTPUT=False, NUM_SMS=sms, WARP_SPECIALIZE=False,
                FLATTEN=True)
    return c


# --- the styles ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Style:
    """One way of writing a kernel: ``configs(size)`` for size "cpu" or "gpu"; ``family``:
    the costtune family it should read as; problems in that family's terms."""

    name: str
    kernel: Any
    configs: Callable[[str], list[triton.Config]]
    key: tuple[str, ...]
    family: str
    make_inputs: Callable[..., dict[str, Any]]
    launch: Callable[[Any, dict[str, Any]], torch.Tensor]
    reference: Callable[[dict[str, Any]], torch.Tensor]
    cpu_problem: dict[str, int]
    gpu_problem: dict[str, int]
    cpu_dtype: torch.dtype
    gpu_dtype: torch.dtype
    tolerance: float
    torch_op: Callable[[dict[str, Any]], torch.Tensor]  # the torch equivalent, for timing

    def inputs(self, size: str, *, device: Any) -> dict[str, Any]:
        problem = self.cpu_problem if size == "cpu" else self.gpu_problem
        dtype = self.cpu_dtype if size == "cpu" else self.gpu_dtype
        return self.make_inputs(problem, device=device, dtype=dtype)


def _gemm_reference(inputs: dict[str, torch.Tensor], *, b_transposed: bool = False
                    ) -> torch.Tensor:
    b = inputs["b"].float()
    return inputs["a"].float() @ (b.T if b_transposed else b)


STYLES: dict[str, Style] = {s.name: s for s in (
    Style("tutorial02_softmax", softmax_kernel, _softmax_configs, ("n_cols",), "softmax",
          _rows_inputs, _softmax_launch, _softmax_reference,
          {"rows": 48, "cols": 200}, {"rows": 8192, "cols": 3000}, torch.float32,
          torch.float32, 1e-5, lambda x: torch.softmax(x["x"], dim=-1)),
    Style("tutorial03_matmul", matmul_kernel, _matmul_configs, ("M", "N", "K"), "gemm",
          _matmul_inputs, _matmul_launch, _gemm_reference,
          {"M": 32, "N": 128, "K": 256}, {"M": 4096, "N": 4096, "K": 4096}, torch.float16,
          torch.float16, 2e-3, lambda x: x["a"] @ x["b"]),
    Style("tutorial06_attention", _attn_fwd, _attn_configs,
          ("N_CTX", "HEAD_DIM", "FP8_OUTPUT", "warp_specialize"), "attention",
          _attn_inputs, _attn_launch, _attn_reference,
          {"B": 1, "H": 2, "S": 64, "D": 32, "causal": 1},
          {"B": 4, "H": 16, "S": 2048, "D": 64, "causal": 1}, torch.float16, torch.float16,
          5e-3, lambda x: torch.nn.functional.scaled_dot_product_attention(
              x["q"], x["k"], x["v"], is_causal=bool(x["causal"]))),
    Style("tutorial09_tma_matmul", matmul_kernel_tma_persistent, _tma_configs,
          ("M", "N", "K"), "gemm",
          lambda problem, *, device, dtype: _matmul_inputs(problem, device=device, dtype=dtype,
                                                           b_transposed=True),
          _tma_launch, lambda inputs: _gemm_reference(inputs, b_transposed=True),
          {"M": 32, "N": 128, "K": 256}, {"M": 4096, "N": 4096, "K": 4096}, torch.float16,
          torch.float16, 2e-3, lambda x: x["a"] @ x["b"].T),
    Style("persistent_attention", attn_fwd_persistent, persistent_attn_configs,
          ("Z", "H", "N_CTX", "HEAD_DIM", "CAUSAL"), "attention", _attn_inputs,
          lambda tuned, inputs: persistent_attn_launch(tuned, inputs,
                                                       num_sms=num_sms(inputs["q"].device)),
          _attn_reference, {"B": 3, "H": 2, "S": 64, "D": 32, "causal": 1},
          {"B": 4, "H": 16, "S": 2048, "D": 64, "causal": 1}, torch.float16, torch.float16,
          5e-3, lambda x: torch.nn.functional.scaled_dot_product_attention(
              x["q"], x["k"], x["v"], is_causal=bool(x["causal"]))),
    Style("inductor_mm", _ind.inductor_mm_kernel, _ind.inductor_mm_configs, ("M", "N", "K"),
          "gemm", _matmul_inputs, _ind.inductor_mm_launch, _gemm_reference,
          {"M": 48, "N": 160, "K": 272}, {"M": 4096, "N": 4096, "K": 4096}, torch.float16,
          torch.float16, 2e-3, lambda x: x["a"] @ x["b"]),
    Style("inductor_linear", _ind.inductor_linear_kernel, _ind.inductor_mm_configs,
          ("ks0", "ks1", "ks2"), "gemm", _ind.linear_inputs, _ind.inductor_linear_launch,
          _ind.linear_reference, {"M": 48, "N": 160, "K": 272},
          {"M": 4096, "N": 4096, "K": 4096}, torch.float16, torch.float16, 2e-3,
          lambda x: torch.relu(torch.nn.functional.linear(x["x"], x["w"], x["bias"]))),
    Style("flashattn_bshd", _libs._fwd_kernel, _libs.flash_configs,
          ("CACHE_KEY_SEQLEN_Q", "CACHE_KEY_SEQLEN_K", "IS_CAUSAL", "BLOCK_HEADDIM"),
          "attention", _libs.bshd_inputs, _libs.flash_launch, _libs.bshd_reference,
          {"B": 1, "H": 2, "S": 128, "D": 64, "causal": 1},
          {"B": 4, "H": 16, "S": 2048, "D": 64, "causal": 1}, torch.float16, torch.float16,
          5e-3, lambda x: torch.nn.functional.scaled_dot_product_attention(
              x["q"].transpose(1, 2), x["k"].transpose(1, 2), x["v"].transpose(1, 2),
              is_causal=bool(x["causal"])).transpose(1, 2)),
    Style("inductor_softmax", _ind.triton_red_fused__softmax_0, _inductor_configs,
          ("xnumel", "r0_numel"), "softmax", _rows_inputs, _ind.inductor_softmax_launch,
          _softmax_reference, {"rows": 16, "cols": 300}, {"rows": 32768, "cols": 2048},
          torch.float32, torch.float16, 2e-3, lambda x: torch.softmax(x["x"], dim=-1)),
)}
