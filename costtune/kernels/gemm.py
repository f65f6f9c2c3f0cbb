"""GEMM family: C = A @ B, fp16/bf16 in, fp32 accumulate, C in the input dtype.

The kernel tiles C in BLOCK_M x BLOCK_N blocks visited in grouped order (GROUP_M rows of tiles
share B columns in L2) and optionally splits K over grid axis 1 (SPLIT_K), where each split
atomically adds its fp32 partial sum into a zeroed workspace.

Shape suites (train and test are disjoint and use different model families):

- LLM projections: tokens M (16..2048: decode batches to prefill chunks) times the (N, K) of a
  decoder layer's fused QKV, attention output, fused gate+up and down projections. Train:
  Llama-2-7B (hidden 4096, MLP 11008; M 16/128/512/2048) and Llama-2-13B (5120, 13824; M 64/1024).
  Test: Mistral-7B (4096, 14336, 8 KV heads; M 16/2048) and Qwen2-7B (3584, 18944, 4 KV heads;
  M 128/512).
- Squares 512..6144 and 8192x8192x2048: benchmark-style dense matmuls (8192^3 is over the
  per-shape FLOP budget).
- Skinny M (1-64): decode-time batched GEMV and small-batch inference.
- K-heavy: small output, long reduction (weight gradients, low-rank adapters); where split-K pays.
- Odd sizes (not multiples of 16): masking and misaligned-row cost.

Every shape keeps 2*M*N*K <= 0.6 TFLOP so a full sweep of its space stays cheap on one H200.

>>> from costtune.kernels import gemm
>>> x = gemm.make_inputs({"M": 64, "N": 64, "K": 64}, "float16")
>>> c = gemm.launch(x, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 2,
...                     "num_warps": 4, "num_stages": 2})  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from costtune.hardware import H200
from costtune.kernels.base import PROBLEM_KEYS as FAMILY_PROBLEM_KEYS
from costtune.kernels.base import KernelCall, check_tensor, dtype_of
from costtune.kernels.configs import check_gemm_config
from costtune.space import ConfigSpace
from costtune.types import Config

NAME = "gemm"
FAMILY = NAME  # the family's original implementation
DESCRIPTION = ("Grouped output tiles with row/column-masked pointer loads and optional split-K, "
               "whose splits add fp32 partial sums with atomics.")
PROBLEM_KEYS = FAMILY_PROBLEM_KEYS[NAME]
DTYPES = ("float16", "bfloat16")

# Relative Frobenius error vs the fp32 reference. Inputs are exact in fp32 and the kernel
# accumulates in fp32, so the error is dominated by rounding C to the output dtype: rms relative
# ~2^-11/sqrt(3) = 2.8e-4 for fp16 and ~2^-8/sqrt(3) = 2.3e-3 for bf16. Split-K adds only fp32
# reordering (~1e-7). The thresholds leave >10x margin, while a dropped BLOCK_K slice of K=16384
# (error ~sqrt(32/16384) = 4.4e-2) or a transposed operand (~1.4) still fails.
TOLERANCE = {"float16": 5e-3, "bfloat16": 3e-2}

# Swizzle width of the grouped tile order: fixed, not tuned.
GROUP_M = 8
# H200 (sm_90) streaming multiprocessors: split-K only pays while the grid fills few waves.
NUM_SMS = H200.num_sms
MAX_ACC_REGS = 128  # fp32 accumulator registers per thread before spilling gets likely
# This kernel's space admits tiles up to twice that (128x256 / 256x128 at 4 warps, 256x256 at
# 8): they spill, and users' spaces hold them, so the dataset measures what they cost instead
# of leaving the model to extrapolate from tiles that fit (the other GEMM implementations'
# spaces stop at MAX_ACC_REGS).
SPACE_ACC_REGS = 2 * MAX_ACC_REGS

_KERNEL_PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K")
_LAUNCH_PARAMS = ("num_warps", "num_stages")


def _mnk(m: int, n: int, k: int) -> dict[str, int]:
    return {"M": m, "N": n, "K": k}


def _llm(models: list[list[tuple[int, int]]], tokens: list[list[int]]) -> list[dict[str, int]]:
    """Token counts x (N, K) projections, one token list per model."""
    pairs = zip(models, tokens, strict=True)
    return [_mnk(m, n, k) for projs, ms in pairs for n, k in projs for m in ms]


# (N, K) = (out features, in features) of qkv, o, gate+up, down.
_LLAMA2_7B = [(12288, 4096), (4096, 4096), (22016, 4096), (4096, 11008)]
_LLAMA2_13B = [(15360, 5120), (5120, 5120), (27648, 5120), (5120, 13824)]
_MISTRAL_7B = [(6144, 4096), (28672, 4096), (4096, 14336)]
_QWEN2_7B = [(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944)]

TRAIN_SHAPES: list[dict[str, int]] = [
    *_llm([_LLAMA2_7B, _LLAMA2_13B], [[16, 128, 512, 2048], [64, 1024]]),
    *[_mnk(s, s, s) for s in (512, 1024, 2048, 3072, 4096, 6144)],
    _mnk(8192, 8192, 2048),
    _mnk(1, 4096, 4096), _mnk(4, 11008, 4096), _mnk(8, 8192, 8192), _mnk(32, 16384, 2048),
    _mnk(64, 2048, 8192),
    _mnk(512, 512, 16384), _mnk(1024, 1024, 16384), _mnk(128, 256, 32768),
    _mnk(2048, 2048, 16384),
    _mnk(1000, 1000, 1000), _mnk(3000, 3000, 1000), _mnk(777, 4097, 1025),
    _mnk(4097, 4097, 512), _mnk(1, 1000, 3001), _mnk(333, 12345, 999),
]

TEST_SHAPES: list[dict[str, int]] = [
    *_llm([_MISTRAL_7B, _QWEN2_7B], [[16, 2048], [128, 512]]),
    _mnk(768, 768, 768), _mnk(5120, 5120, 5120),
    _mnk(1, 5120, 5120), _mnk(24, 3072, 12288),
    _mnk(768, 768, 24576), _mnk(256, 512, 32768),
    _mnk(1500, 2999, 777), _mnk(4099, 1001, 2049),
]

# Also measured in bf16 (every shape is measured in fp16): one or two per group and suite.
BF16_SUBSET: list[dict[str, int]] = [
    _mnk(16, 12288, 4096), _mnk(2048, 12288, 4096), _mnk(128, 22016, 4096),
    _mnk(512, 4096, 11008), _mnk(1024, 27648, 5120), _mnk(1024, 1024, 1024),
    _mnk(4096, 4096, 4096), _mnk(1, 4096, 4096), _mnk(512, 512, 16384),
    _mnk(1000, 1000, 1000),
    _mnk(16, 28672, 4096), _mnk(512, 4608, 3584), _mnk(5120, 5120, 5120),
    _mnk(768, 768, 24576), _mnk(1500, 2999, 777),
]


@triton.jit
def _gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                 stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 SPLIT_K: tl.constexpr, GROUP_M: tl.constexpr, UPCAST_DOT: tl.constexpr):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: consecutive programs sweep GROUP_M tile rows before moving to the next
    # tile column, so the B columns they share are still in L2.
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Masks rather than wrapped indices: loads stay in bounds for any strides, and Triton still
    # sees rows/cols as contiguous runs, so row-major operands keep vectorised loads.
    row_ok = rows < M
    col_ok = cols < N

    # Each split owns a contiguous run of whole K tiles; the last split may get fewer or none.
    k_tiles = tl.cdiv(K, BLOCK_K)
    split_tiles = tl.cdiv(k_tiles, SPLIT_K)
    k_begin = pid_k * split_tiles * BLOCK_K
    n_iters = tl.minimum(split_tiles, k_tiles - pid_k * split_tiles)
    kk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + (k_begin + kk)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_begin + kk)[:, None] * stride_bk + cols[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in range(0, n_iters):
        k_left = K - k_begin - i * BLOCK_K
        a = tl.load(a_ptrs, mask=row_ok[:, None] & (kk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(kk[:, None] < k_left) & col_ok[None, :], other=0.0)
        if UPCAST_DOT:
            # Products of fp16/bf16 values are exact in fp32, so this matches the GPU's dot.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    mask = row_ok[:, None] & col_ok[None, :]
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        # Partial sums only need to be summed, not ordered: relaxed atomics suffice.
        tl.atomic_add(c_ptrs, acc, mask=mask, sem="relaxed")


def make_inputs(problem: dict[str, int], dtype: str, *, seed: int = 0,
                device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Random A (M, K) and B (K, N); generated on CPU so every device sees the same values."""
    m, n, k = _sizes(problem)
    dt = dtype_of(dtype)
    if str(dt).removeprefix("torch.") not in DTYPES:
        raise ValueError(f"dtype {dtype!r} not supported; use one of {list(DTYPES)}")
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen)
    # Scaling B by 1/sqrt(K) keeps C ~ N(0, 1) so fp16 cannot overflow for any K.
    b = torch.randn(k, n, generator=gen) / math.sqrt(k)
    return {"a": a.to(dtype=dt, device=device), "b": b.to(dtype=dt, device=device)}


def reference(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """A @ B in fp32 (fp16/bf16 inputs are exact in fp32)."""
    return inputs["a"].float() @ inputs["b"].float()


def torch_op(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The torch (cuBLAS on GPU) equivalent, in the input dtype."""
    return inputs["a"] @ inputs["b"]


def flops(problem: dict[str, int]) -> int:
    m, n, k = _sizes(problem)
    return 2 * m * n * k


def min_bytes(problem: dict[str, int], dtype: str) -> int:
    """Bytes moved if A and B are read and C written exactly once."""
    m, n, k = _sizes(problem)
    return (m * k + k * n + m * n) * dtype_of(dtype).itemsize


def grid(problem: dict[str, int], config: Config | dict[str, Any]) -> tuple[int, int]:
    """(output tiles, SPLIT_K)."""
    m, n, _ = _sizes(problem)
    c = _config_values(config)
    return (triton.cdiv(m, c["BLOCK_M"]) * triton.cdiv(n, c["BLOCK_N"]), c["SPLIT_K"])


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """The family's canonical parameters are this kernel's own; the grouped tile order's width
    (GROUP_M, the tutorials' GROUP_SIZE_M) is fixed at 8."""
    return {"GROUP_SIZE_M": GROUP_M}


def kernel_calls(inputs: dict[str, torch.Tensor],
                 config: Config | dict[str, Any]) -> list[KernelCall]:
    """The single Triton launch ``launch`` makes, with a freshly allocated, unfilled output.

    With SPLIT_K > 1 the output is an fp32 workspace the kernel accumulates into: ``launch``
    zeroes it first and casts it after. Left uninitialised here so compile-only callers
    (precompile, compiled features) pay no memset.
    """
    a, b = _check_inputs(inputs)
    c = _config_values(config)
    m, k = a.shape
    n = b.shape[1]
    out_dtype = a.dtype if c["SPLIT_K"] == 1 else torch.float32
    out = torch.empty((m, n), dtype=out_dtype, device=a.device)
    call = KernelCall(
        fn=_gemm_kernel,
        grid=grid({"M": m, "N": n, "K": k}, c),
        args=(a, b, out, m, n, k, *a.stride(), *b.stride(), *out.stride()),
        kwargs={"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"], "BLOCK_K": c["BLOCK_K"],
                "SPLIT_K": c["SPLIT_K"], "GROUP_M": GROUP_M,
                "UPCAST_DOT": _interpreted() and a.dtype == torch.bfloat16},
        num_warps=c["num_warps"], num_stages=c["num_stages"])
    return [call]


def launch(inputs: dict[str, torch.Tensor], config: Config | dict[str, Any]) -> torch.Tensor:
    """C = A @ B with one config; validates inputs and config (ValueError naming the problem).

    For SPLIT_K > 1 the zeroing and the final cast are part of the op (and of its timing).
    """
    calls = kernel_calls(inputs, config)
    out = calls[0].args[2]
    split = calls[0].kwargs["SPLIT_K"] > 1
    if split:
        out.zero_()
    for call in calls:
        call.run()
    return out.to(inputs["a"].dtype) if split else out


_SPACE = {
    "BLOCK_M": (32, 64, 128, 256),
    "BLOCK_N": (32, 64, 128, 256),
    "BLOCK_K": (32, 64, 128),
    "SPLIT_K": (1, 2, 4, 8),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
}


def config_space(problem: dict[str, int] | None = None) -> ConfigSpace:
    """Tiles, split-K and launch options; with ``problem``, drop configs that cannot pay off.

    >>> len(config_space({"M": 512, "N": 512, "K": 16384}))
    620
    """
    constraints = {
        "shared_memory": lambda c: c["num_stages"] * (c["BLOCK_M"] * c["BLOCK_K"]
                                                      + c["BLOCK_K"] * c["BLOCK_N"]) * 2
        <= H200.max_shared_per_block,
        "accumulator_registers": lambda c: c["BLOCK_M"] * c["BLOCK_N"] / (32 * c["num_warps"])
        <= SPACE_ACC_REGS,
    }
    if problem is not None:
        m, n, k = _sizes(problem)
        cap_m, cap_n, cap_k = (max(32, triton.next_power_of_2(x)) for x in (m, n, k))
        constraints["tile_fits_problem"] = lambda c: (
            c["BLOCK_M"] <= cap_m and c["BLOCK_N"] <= cap_n and c["BLOCK_K"] <= cap_k)

        def split_fits(c: dict[str, Any], split: int) -> bool:
            # Each split needs >= 4 K iterations to amortise its atomics, and the grid should
            # stay within two waves: beyond that the SMs are busy without splitting.
            tiles = triton.cdiv(m, c["BLOCK_M"]) * triton.cdiv(n, c["BLOCK_N"])
            return (split in _SPACE["SPLIT_K"] and k >= split * c["BLOCK_K"] * 4
                    and tiles * split <= 2 * NUM_SMS)

        # With N (C's row stride) not a multiple of 16 the split-K epilogue's atomics take the
        # fp32 tile through shared memory: a 256x256 tile needs 262,144 B there, over the
        # H200's limit (out_of_resources measured 2026-12-02; N = 1001 and 1032 fail, M does
        # not matter: AOT compiles of 1024x1001 and 1001x1024).
        constraints["split_k_epilogue"] = lambda c: (
            c["SPLIT_K"] == 1 or n % 16 == 0
            or c["BLOCK_M"] * c["BLOCK_N"] * 4 <= H200.max_shared_per_block)

        # Of the splits that fit, only the largest is kept: smaller ones leave SMs idle that
        # the largest fills, and keeping one split per tile shape holds every space <= 650.
        constraints["split_k_pays"] = lambda c: c["SPLIT_K"] == 1 or (
            split_fits(c, c["SPLIT_K"]) and not split_fits(c, 2 * c["SPLIT_K"]))
    return ConfigSpace(_SPACE, constraints=constraints)


def _interpreted() -> bool:
    """True under TRITON_INTERPRET=1, whose tl.dot multiplies bf16 bit patterns (triton 3.6,
    triton-lang/triton#11584); compiled kernels never take the upcast branch."""
    return not isinstance(_gemm_kernel, triton.runtime.jit.JITFunction)


def _sizes(problem: dict[str, Any]) -> tuple[int, int, int]:
    # Extra keys (a store row's dtype, config columns) are ignored, as in the other families.
    missing = [key for key in PROBLEM_KEYS if key not in problem]
    if missing:
        raise ValueError(f"problem lacks {missing}; gemm needs {list(PROBLEM_KEYS)}")
    m, n, k = (int(problem[key]) for key in PROBLEM_KEYS)
    if min(m, n, k) < 1:
        raise ValueError(f"M, N, K must be >= 1, got M={m} N={n} K={k}")
    return m, n, k


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    """Flat dict of the kernel's parameters; unknown or missing names and bad values raise."""
    values = check_gemm_config(config, params=_KERNEL_PARAMS, launch=_LAUNCH_PARAMS, name=NAME)
    if values["SPLIT_K"] < 1:
        raise ValueError(f"config SPLIT_K={values['SPLIT_K']!r} must be >= 1")
    return values



def _check_inputs(inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    unknown = sorted(set(inputs) - {"a", "b"})
    missing = sorted({"a", "b"} - set(inputs))
    if unknown or missing:
        raise ValueError(f"inputs need keys 'a' and 'b'; missing {missing}, unknown {unknown}")
    a, b = inputs["a"], inputs["b"]
    check_tensor("a", a, dtypes=DTYPES, ndim=2)
    check_tensor("b", b, dtypes=DTYPES, ndim=2, device=a.device)
    if b.dtype != a.dtype:
        raise ValueError(f"b has dtype {b.dtype} but a has {a.dtype}; they must match")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"b has {b.shape[0]} rows but a has {a.shape[1]} columns "
                         f"(a {tuple(a.shape)} @ b {tuple(b.shape)})")
    if a.numel() == 0 or b.numel() == 0:
        raise ValueError(f"a {tuple(a.shape)} and b {tuple(b.shape)} must be non-empty")
    return a, b


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | np.ndarray:
    """Bytes of shared memory a GEMM of this tiling needs at least once compiled: the feasibility
    check drops a config only when this lower bound exceeds the GPU's limit.

    tl.dot stages its A (BLOCK_M x BLOCK_K) and B (BLOCK_K x BLOCK_N) tiles in shared memory.
    An operand whose loads are 16-aligned (``aligned["a"]``/``["b"]``: every stride 1 or a
    multiple of 16 elements, as Triton's specialization sees them) is multi-buffered by the
    pipeliner: ``num_stages`` copies on sm_90's wgmma path (BLOCK_M >= 64, 4 or 8 warps),
    ``num_stages - 1`` otherwise; an unaligned operand is loaded through registers and staged
    once; a TMA descriptor operand counts as aligned. On the dataset's 27,456 compiled GEMM
    rows the bound never exceeds the compiled size and equals it on 96%, and it holds on AOT
    compiles of tutorial-style and TMA matmuls (experiments/feasibility.py). Outside what was
    checked it claims nothing (0): other dtypes, warp-specialized loops off the wgmma path
    (there a TMA matmul with BLOCK_M=32 keeps only the B tile), and the split-K epilogue of
    this suite's kernel (a 256x256 fp32 tile through shared memory when N is not a multiple
    of 16: ``config_space``'s ``split_k_epilogue``), which other GEMMs lack. Unpipelined
    (``num_stages <= 1``, or dots ``features.pipelining.dot_stages`` reads as 1) it claims one
    copy of each tile on sm_90: 144 AOT compiles (fp16, 2-8 warps, 0-1 stages, aligned or
    not) used at least that; 256x256x256 needed 262,144 B on the GPU (NOTES, 2026-12-05).

    >>> cfg = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 5}
    >>> shared_memory_floor({}, cfg, dtype="float16", aligned={"a": True, "b": True})
    245760
    >>> shared_memory_floor({}, cfg, dtype="float16", aligned={"a": False, "b": False})
    49152

    Vectorised: config values may be numpy arrays (one entry per config).
    """
    stages = np.asarray(config["num_stages"], dtype=float)
    bm, bn, bk, warps = (np.asarray(config[k], dtype=float)
                         for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"))
    wgmma = (arch == 90) & (bm >= 64) & np.isin(warps, (4, 8))
    once = stages <= 1
    buffers = np.where(once, 1, np.where(wgmma, stages, stages - 1))
    copies_a = buffers if aligned.get("a", False) else 1
    copies_b = buffers if aligned.get("b", False) else 1
    size = dtype_of(dtype).itemsize if dtype in DTYPES else 0
    unclaimed = (once & (arch != 90)) | (np.asarray(warp_specialized, dtype=bool) & ~wgmma)
    out = np.where(unclaimed, 0, (copies_a * bm + copies_b * bn) * bk * size).astype(np.int64)
    return int(out) if out.ndim == 0 else out
