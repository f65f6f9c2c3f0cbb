"""GEMM, tutorial-09 style: a persistent C = A @ B over host TMA tensor descriptors.

The family's problems, inputs and reference (costtune.kernels.gemm), computed by a persistent
kernel: min(#SMs, tiles) programs each loop over output tiles (stride #SMs, grouped order with
GROUP_SIZE_M = 8) and move A (M, K), B (K, N) and C (M, N) tiles with the Tensor Memory
Accelerator through host ``TensorDescriptor``s, whose block shapes come from the config. The
loop over tiles may be warp-specialized (producer warps issue the TMA loads) and the epilogue
may store C in two halves along N (less shared memory for the C tile). No split-K.

TMA needs 16-byte aligned global strides: with 2-byte dtypes K and N must be multiples of 8.
The suites drop the shapes where they are not: train (777, 4097, 1025), (4097, 4097, 512),
(1, 1000, 3001) and (333, 12345, 999); test (1500, 2999, 777) and (4099, 1001, 2049).
``launch`` refuses such inputs (and non-row-major or misaligned ones) with a ValueError.

>>> from costtune.kernels import gemm_tma as gt
>>> len(gt.TRAIN_SHAPES), len(gt.TEST_SHAPES)
(42, 20)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from costtune.hardware import H200
from costtune.kernels import gemm as _family
from costtune.kernels.base import KernelCall
from costtune.kernels.configs import check_gemm_config
from costtune.space import ConfigSpace
from costtune.types import Config

NAME = "gemm_tma"
FAMILY = "gemm"
DESCRIPTION = ("Persistent grid of min(#SMs, tiles) programs looping over output tiles, A/B/C "
               "moved by TMA through host tensor descriptors, optional warp specialization and "
               "half-width epilogue stores, no split-K.")

PROBLEM_KEYS = _family.PROBLEM_KEYS
DTYPES = _family.DTYPES
make_inputs = _family.make_inputs
reference = _family.reference
torch_op = _family.torch_op
flops = _family.flops
min_bytes = _family.min_bytes
# The family's: fp32 accumulation and one rounding of C to the output dtype, as there.
TOLERANCE = _family.TOLERANCE

GROUP_SIZE_M = 8  # grouped tile order, fixed as in tutorial 09
NUM_SMS = H200.num_sms
MAX_ACC_REGS = _family.MAX_ACC_REGS
ALIGN_BYTES = 16  # TMA: global strides and base address


def _supported(p: dict[str, int]) -> bool:
    # Row strides of A (K elements), B and C (N elements) must be 16-byte multiples (2-byte
    # dtypes: K and N multiples of 8).
    return p["K"] % 8 == 0 and p["N"] % 8 == 0


TRAIN_SHAPES = [p for p in _family.TRAIN_SHAPES if _supported(p)]
TEST_SHAPES = [p for p in _family.TEST_SHAPES if _supported(p)]
BF16_SUBSET = [p for p in _family.BF16_SUBSET if _supported(p)]

_KERNEL_PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "WARP_SPECIALIZE", "EPILOGUE_SUBTILE")
_LAUNCH_PARAMS = ("num_warps", "num_stages")
_FLAGS = ("WARP_SPECIALIZE", "EPILOGUE_SUBTILE")


@triton.jit
def _tile_of(tile, band_size, tiles_m, GROUP: tl.constexpr):
    band_first = (tile // band_size) * GROUP
    band_rows = min(tiles_m - band_first, GROUP)
    return band_first + (tile % band_size) % band_rows, (tile % band_size) // band_rows


@triton.jit
def _persistent_kernel(a_desc, b_desc, c_desc, M, N, K,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP: tl.constexpr, NUM_SMS: tl.constexpr,
                       WARP_SPECIALIZE: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
                       FLATTEN: tl.constexpr, UPCAST_DOT: tl.constexpr):
    first = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    band_size = GROUP * tiles_n
    # The epilogue's tile comes from its own counter, not from the loads' loop variable, so
    # a flattened or warp-specialized loop can run the next tile's loads ahead of it.
    store_tile = first - NUM_SMS
    for tile in tl.range(first, tiles_m * tiles_n, NUM_SMS, flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        tm, tn = _tile_of(tile, band_size, tiles_m, GROUP)
        row = tm * BLOCK_M
        col = tn * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            # TMA fills out-of-bounds rows, columns and the K tail with zeros.
            a = a_desc.load([row, kt * BLOCK_K])
            b = b_desc.load([kt * BLOCK_K, col])
            if UPCAST_DOT:
                # Interpreter only (bf16 dot bug): fp16/bf16 products are exact in fp32.
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        store_tile += NUM_SMS
        tm, tn = _tile_of(store_tile, band_size, tiles_m, GROUP)
        row = tm * BLOCK_M
        col = tn * BLOCK_N
        if EPILOGUE_SUBTILE:
            # Two BLOCK_N / 2 halves: the C staging buffer is half as large.
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([row, col], left.to(c_desc.dtype))
            c_desc.store([row, col + BLOCK_N // 2], right.to(c_desc.dtype))
        else:
            c_desc.store([row, col], acc.to(c_desc.dtype))


def grid(problem: dict[str, int], config: Config | dict[str, Any]) -> tuple[int]:
    """(min(#SMs, output tiles),): the persistent grid."""
    m, n, _ = _family._sizes(problem)
    c = _config_values(config)
    return (min(NUM_SMS, triton.cdiv(m, c["BLOCK_M"]) * triton.cdiv(n, c["BLOCK_N"])),)


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """No split-K (the family's SPLIT_K is 1) and the fixed GROUP_SIZE_M of 8."""
    return {"SPLIT_K": 1, "GROUP_SIZE_M": GROUP_SIZE_M}


def kernel_calls(inputs: dict[str, torch.Tensor],
                 config: Config | dict[str, Any]) -> list[KernelCall]:
    """The single launch ``launch`` makes: descriptors over A, B and a fresh C, their block
    shapes set from the config. FLATTEN is tied to WARP_SPECIALIZE=0 (as in tutorial 09)."""
    a, b = _family._check_inputs(inputs)
    c = _config_values(config)
    _check_tma(a, b)
    m, k = a.shape
    n = b.shape[1]
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    bm, bn, bk = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]
    c_cols = bn // 2 if c["EPILOGUE_SUBTILE"] else bn
    descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
             TensorDescriptor.from_tensor(out, [bm, c_cols]))
    call = KernelCall(
        fn=_persistent_kernel,
        grid=grid({"M": m, "N": n, "K": k}, c),
        args=(*descs, m, n, k),
        kwargs={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP": GROUP_SIZE_M,
                "NUM_SMS": NUM_SMS, "WARP_SPECIALIZE": bool(c["WARP_SPECIALIZE"]),
                "EPILOGUE_SUBTILE": bool(c["EPILOGUE_SUBTILE"]),
                "FLATTEN": not c["WARP_SPECIALIZE"],
                "UPCAST_DOT": _interpreted() and a.dtype == torch.bfloat16},
        num_warps=c["num_warps"], num_stages=c["num_stages"])
    return [call]


def launch(inputs: dict[str, torch.Tensor], config: Config | dict[str, Any]) -> torch.Tensor:
    """C = A @ B with one config; validates inputs and config (ValueError naming the problem)."""
    (call,) = kernel_calls(inputs, config)
    call.run()
    return call.args[2].base


_SPACE = {
    "BLOCK_M": (64, 128),
    "BLOCK_N": (64, 128, 256),
    "BLOCK_K": (64, 128),
    "WARP_SPECIALIZE": (0, 1),
    "EPILOGUE_SUBTILE": (0, 1),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
}


def tma_shared_bytes(c: dict[str, Any], itemsize: int = 2) -> int:
    """Shared memory of the pipelined A and B tiles plus the C staging tile (halved when
    subtiled), as AOT compiles for sm_90 with triton 3.6 show (they add < 200 B of mbarriers):
    a warp-specialized loop stages C twice, and 8 warps on a 64-row tile store a subtiled C
    through an extra BLOCK_M x BLOCK_N buffer."""
    loads = c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"]
    epilogue = c["BLOCK_M"] * c["BLOCK_N"] // (2 if c["EPILOGUE_SUBTILE"] else 1)
    if c["WARP_SPECIALIZE"]:
        epilogue *= 2
    elif c["EPILOGUE_SUBTILE"] and c["BLOCK_M"] == 64 and c["num_warps"] == 8:
        epilogue += c["BLOCK_M"] * c["BLOCK_N"]
    return (loads + epilogue) * itemsize


def config_space(problem: dict[str, int] | None = None) -> ConfigSpace:
    """Tiles, warp specialization, epilogue subtiling and launch options; with ``problem``,
    drop tiles larger than the problem needs."""
    constraints = {
        "shared_memory": lambda c: tma_shared_bytes(c) + 1024 <= H200.max_shared_per_block,
        "accumulator_registers": lambda c: c["BLOCK_M"] * c["BLOCK_N"] / (32 * c["num_warps"])
        <= MAX_ACC_REGS,
        # 8 warps split a 64 x 64 tile into 64 x 32 wgmma slices, 16 accumulators a thread:
        # the 4-warp config does the same work with half the threads idle less.
        # triton 3.6 on sm_90 specializes only 4-warp loops over 64-row tiles up to 128 wide
        # (3 warp groups: TMA producer and two consumers); with 8 warps it silently compiles
        # the plain loop, and 128-row tiles or 256-wide ones fail in NVGPUWarpSpecialization.
        "warp_specialization_compiles": lambda c: not c["WARP_SPECIALIZE"] or (
            c["num_warps"] == 4 and c["BLOCK_M"] == 64 and c["BLOCK_N"] <= 128),
        "warps_have_work": lambda c: c["BLOCK_M"] * c["BLOCK_N"] / (32 * c["num_warps"]) >= 32,
    }
    if problem is not None:
        m, n, _ = _family._sizes(problem)
        cap_m, cap_n = (max(64, triton.next_power_of_2(x)) for x in (m, n))
        constraints["tile_fits_problem"] = lambda c: (
            c["BLOCK_M"] <= cap_m and c["BLOCK_N"] <= cap_n)
    return ConfigSpace(_SPACE, constraints=constraints)


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | np.ndarray:
    """The family's bound with both operands aligned (TMA descriptors count as aligned), plus
    the C staging tile every TMA store needs (half of it when EPILOGUE_SUBTILE is 1 or not
    given). Where the family's bound claims nothing (0), so does this. On 40 AOT compiles for
    sm_90 (the 30 largest configs of the space and the 10 smallest it drops for shared memory,
    tests/test_kernels_gemm_tma.py repeats some) the compiled size exceeds this by the
    warp-specialized second C tile, the 64-row 8-warp subtile buffer and < 200 B of mbarriers.
    Vectorised like the family's."""
    base = _family.shared_memory_floor(problem, config, dtype=dtype,
                                       aligned={"a": True, "b": True}, arch=arch,
                                       warp_specialized=warp_specialized)
    bm, bn = (np.asarray(config[k], dtype=np.int64) for k in ("BLOCK_M", "BLOCK_N"))
    subtile = np.asarray(config.get("EPILOGUE_SUBTILE", 1), dtype=bool)
    size = _family.dtype_of(dtype).itemsize if dtype in DTYPES else 0
    staging = np.where(subtile, bm * bn // 2, bm * bn) * size
    out = np.where(np.asarray(base) > 0, base + staging, 0).astype(np.int64)
    return int(out) if out.ndim == 0 else out


def _interpreted() -> bool:
    """True under TRITON_INTERPRET=1 (see costtune.kernels.gemm._interpreted)."""
    return not isinstance(_persistent_kernel, triton.runtime.jit.JITFunction)


def _check_tma(a: torch.Tensor, b: torch.Tensor, name: str = NAME) -> None:
    """TMA descriptors need row-major operands with 16-byte aligned row strides and bases
    (``name``: the implementation the error names)."""
    for label, t in (("a", a), ("b", b)):
        if t.stride(1) != 1:
            raise ValueError(f"{label} must be row-major (stride {t.stride()}); {name} moves "
                             f"it with TMA")
        row_bytes = t.stride(0) * t.element_size()
        if row_bytes % ALIGN_BYTES:
            raise ValueError(f"{label} row stride {t.stride(0)} is not a multiple of "
                             f"{ALIGN_BYTES} bytes, which TMA needs (K and N multiples of 8)")
        if t.data_ptr() % ALIGN_BYTES:
            raise ValueError(f"{label} data pointer is not {ALIGN_BYTES}-byte aligned, which "
                             f"TMA needs")
    n_bytes = b.shape[1] * b.element_size()
    if n_bytes % ALIGN_BYTES:
        raise ValueError(f"N={b.shape[1]} gives C rows of {n_bytes} bytes; TMA needs "
                         f"multiples of {ALIGN_BYTES} (N a multiple of 8)")


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    """Flat dict of the kernel's parameters; unknown or missing names and bad values raise."""
    return check_config(config, params=_KERNEL_PARAMS, flags=_FLAGS, name=NAME)


def check_config(config: Config | dict[str, Any], *, params: tuple[str, ...],
                 flags: tuple[str, ...], name: str) -> dict[str, int]:
    """The family's check, booleans refused, ``flags`` 0 or 1, and a half-width epilogue only
    on BLOCK_N >= 32: shared by the TMA GEMMs."""
    values = check_gemm_config(config, params=params, launch=_LAUNCH_PARAMS, name=name,
                               bools=False)
    for flag in flags:
        if values[flag] not in (0, 1):
            raise ValueError(f"config {flag}={values[flag]!r} must be 0 or 1")
    if values["EPILOGUE_SUBTILE"] and values["BLOCK_N"] < 32:
        raise ValueError(f"config EPILOGUE_SUBTILE=1 needs BLOCK_N >= 32, got "
                         f"{values['BLOCK_N']}")
    return values
