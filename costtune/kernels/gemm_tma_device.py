"""GEMM, tutorial-09 "descriptor persistent" style: TMA descriptors built on the device.

The family's problems, inputs and reference (costtune.kernels.gemm), computed like gemm_tma
(min(#SMs, tiles) persistent programs, grouped tile order with GROUP_SIZE_M = 8, A/B/C moved by
TMA, optional half-width epilogue stores, no split-K), but the kernel takes raw pointers and
builds its descriptors itself with ``tl.make_tensor_descriptor``. Triton writes them into a
global scratch buffer it asks ``triton.set_allocator``'s allocator for at every launch:
``launch`` sets a torch-backed one (``ensure_allocator``) only when none is set. Compiling
needs no allocator, so ``KernelCall.warmup`` and costtune.build.aot (meta tensors) work as for
any kernel. FLATTEN (0/1) is tuned on its own.

Warp specialization on sm_90 (triton 3.6, AOT compiles, ``ttg.warp_specialize`` in TTGIR):
unlike host descriptors, 128- and 256-row tiles specialize: at num_warps=4 one producer warp
group issues the TMA loads and two 4-warp consumer groups split the tile (12 warps, 232
registers requested each), for 64x64, 64x128, 128x64, 128x128, 128x256, 256x64 and 256x128
tiles with BLOCK_K 64 or 128. It does not happen with 8 warps or a flattened loop (the plain
loop compiles; the space drops these duplicates), and it fails to compile with the half-width
epilogue on tiles of >= 128 rows (WSDataPartition.cpp:1205 UNREACHABLE in
NVGPUWarpSpecialization) and for 64 x 256 tiles (MMAHelpers.h:143 assertion "Instruction shape
is too large for the layout" in ConvertTritonGPUToLLVM).

TMA needs 16-byte aligned global strides: the suites are gemm_tma's (K and N multiples of 8;
see there for the dropped shapes). ``launch`` refuses other inputs with a ValueError.

>>> from costtune.kernels import gemm_tma_device as gd
>>> len(gd.TRAIN_SHAPES), len(gd.TEST_SHAPES)
(42, 20)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from costtune.hardware import H200
from costtune.kernels import gemm as _family
from costtune.kernels import gemm_tma as _host
from costtune.kernels.base import KernelCall
from costtune.space import ConfigSpace
from costtune.types import Config

NAME = "gemm_tma_device"
FAMILY = "gemm"
DESCRIPTION = ("Persistent grid of min(#SMs, tiles) programs whose A/B/C TMA descriptors are "
               "built in the kernel (tl.make_tensor_descriptor), optional warp specialization, "
               "half-width epilogue stores and loop flattening, no split-K.")

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
ALIGN_BYTES = _host.ALIGN_BYTES

# TMA's 16-byte aligned strides: the same shapes as gemm_tma (K and N multiples of 8).
TRAIN_SHAPES = _host.TRAIN_SHAPES
TEST_SHAPES = _host.TEST_SHAPES
BF16_SUBSET = _host.BF16_SUBSET

_KERNEL_PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "WARP_SPECIALIZE", "EPILOGUE_SUBTILE",
                  "FLATTEN")
_LAUNCH_PARAMS = ("num_warps", "num_stages")
_FLAGS = ("WARP_SPECIALIZE", "EPILOGUE_SUBTILE", "FLATTEN")


@triton.jit
def _tile_of(tile, band_size, tiles_m, GROUP: tl.constexpr):
    band_first = (tile // band_size) * GROUP
    band_rows = min(tiles_m - band_first, GROUP)
    return band_first + (tile % band_size) % band_rows, (tile % band_size) // band_rows


@triton.jit
def _device_desc_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_a, stride_b, stride_c,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP: tl.constexpr, NUM_SMS: tl.constexpr,
                        WARP_SPECIALIZE: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
                        FLATTEN: tl.constexpr, UPCAST_DOT: tl.constexpr):
    # The descriptors live in a global scratch the launch allocates (triton.set_allocator).
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_a, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1],
                                       block_shape=[BLOCK_K, BLOCK_N])
    C_COLS: tl.constexpr = BLOCK_N // 2 if EPILOGUE_SUBTILE else BLOCK_N
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_c, 1],
                                       block_shape=[BLOCK_M, C_COLS])
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
            c_desc.store([row, col], left.to(c_ptr.dtype.element_ty))
            c_desc.store([row, col + BLOCK_N // 2], right.to(c_ptr.dtype.element_ty))
        else:
            c_desc.store([row, col], acc.to(c_ptr.dtype.element_ty))


def grid(problem: dict[str, int], config: Config | dict[str, Any]) -> tuple[int]:
    """(min(#SMs, output tiles),): the persistent grid."""
    m, n, _ = _family._sizes(problem)
    c = _config_values(config)
    return (min(NUM_SMS, triton.cdiv(m, c["BLOCK_M"]) * triton.cdiv(n, c["BLOCK_N"])),)


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """No split-K (SPLIT_K 1) and the tile order's fixed GROUP_SIZE_M of 8."""
    return {"SPLIT_K": 1, "GROUP_SIZE_M": GROUP_SIZE_M}


def _torch_allocator(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Global scratch for the descriptors the kernel writes (128 B each per program)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def ensure_allocator() -> None:
    """Set a torch-backed ``triton.set_allocator`` unless the caller has set one: the kernel
    writes its TMA descriptors into global scratch that Triton asks the allocator for at each
    launch. ``triton.set_allocator`` is a context variable, so this runs per launch (a thread
    or context that set its own allocator keeps it)."""
    from triton.runtime import _allocation

    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        triton.set_allocator(_torch_allocator)


def kernel_calls(inputs: dict[str, torch.Tensor],
                 config: Config | dict[str, Any]) -> list[KernelCall]:
    """The single launch ``launch`` makes: raw pointers, sizes and row strides of A, B and a
    fresh C; the kernel builds the descriptors with the config's block shapes. Works with
    ``meta`` tensors (no allocator is needed to specialize or compile)."""
    a, b = _family._check_inputs(inputs)
    c = _config_values(config)
    _host._check_tma(a, b, NAME)
    m, k = a.shape
    n = b.shape[1]
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    call = KernelCall(
        fn=_device_desc_kernel,
        grid=grid({"M": m, "N": n, "K": k}, c),
        args=(a, b, out, m, n, k, a.stride(0), b.stride(0), out.stride(0)),
        kwargs={"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"], "BLOCK_K": c["BLOCK_K"],
                "GROUP": GROUP_SIZE_M, "NUM_SMS": NUM_SMS,
                "WARP_SPECIALIZE": bool(c["WARP_SPECIALIZE"]),
                "EPILOGUE_SUBTILE": bool(c["EPILOGUE_SUBTILE"]), "FLATTEN": bool(c["FLATTEN"]),
                "UPCAST_DOT": _interpreted() and a.dtype == torch.bfloat16},
        num_warps=c["num_warps"], num_stages=c["num_stages"])
    return [call]


def launch(inputs: dict[str, torch.Tensor], config: Config | dict[str, Any]) -> torch.Tensor:
    """C = A @ B with one config; validates inputs and config (ValueError naming the problem).
    Sets a torch allocator for the descriptor scratch if none is set (``ensure_allocator``)."""
    (call,) = kernel_calls(inputs, config)
    if call.args[0].is_cuda:
        ensure_allocator()
    call.run()
    return call.args[2]


_SPACE = {
    "BLOCK_M": (64, 128, 256),
    "BLOCK_N": (64, 128, 256),
    "BLOCK_K": (64, 128),
    "WARP_SPECIALIZE": (0, 1),
    "EPILOGUE_SUBTILE": (0, 1),
    "FLATTEN": (0, 1),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
}


def tma_shared_bytes(c: dict[str, Any], itemsize: int = 2) -> int:
    """Shared memory of the pipelined A and B tiles plus the C staging tile (halved when
    subtiled), as AOT compiles for sm_90 with triton 3.6 show (they add < 700 B of mbarriers):
    a warp-specialized 64-row tile splits N between its two consumer warp groups, each staging
    its own C, and 8 warps on a 64-row tile store a subtiled C through an extra BLOCK_M x
    BLOCK_N buffer when the loop is flattened."""
    loads = c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"]
    epilogue = c["BLOCK_M"] * c["BLOCK_N"] // (2 if c["EPILOGUE_SUBTILE"] else 1)
    if c["WARP_SPECIALIZE"] and c["BLOCK_M"] == 64:
        epilogue *= 2
    elif (c["FLATTEN"] and c["EPILOGUE_SUBTILE"] and c["BLOCK_M"] == 64
          and c["num_warps"] == 8):
        epilogue += c["BLOCK_M"] * c["BLOCK_N"]
    return (loads + epilogue) * itemsize


def _specializes(c: dict[str, Any]) -> bool:
    """Whether triton 3.6 warp-specializes the tile loop on sm_90 (AOT compiles, TTGIR with
    ``ttg.warp_specialize``): 4-warp groups only (8 warps compile the plain loop), not with a
    flattened loop (also plain), and without the NVGPUWarpSpecialization failures (the
    half-width epilogue on tiles of >= 128 rows: WSDataPartition UNREACHABLE) or the 64 x 256
    tile (its consumers' wgmma layout asserts in MMAHelpers.h)."""
    return (c["num_warps"] == 4 and not c["FLATTEN"]
            and not (c["BLOCK_M"] == 64 and c["BLOCK_N"] == 256)
            and (c["BLOCK_M"] == 64 or not c["EPILOGUE_SUBTILE"]))


def _acc_regs(c: dict[str, Any]) -> float:
    """fp32 accumulators per thread: a warp-specialized loop splits the tile over two consumer
    groups of num_warps (4) warps each."""
    threads = 32 * c["num_warps"] * (2 if c["WARP_SPECIALIZE"] else 1)
    return c["BLOCK_M"] * c["BLOCK_N"] / threads


def config_space(problem: dict[str, int] | None = None) -> ConfigSpace:
    """Tiles, warp specialization, epilogue subtiling, loop flattening and launch options;
    with ``problem``, drop tiles larger than the problem needs."""
    constraints = {
        "shared_memory": lambda c: tma_shared_bytes(c) + 1024 <= H200.max_shared_per_block,
        "accumulator_registers": lambda c: _acc_regs(c) <= MAX_ACC_REGS,
        "warp_specialization_compiles": lambda c: not c["WARP_SPECIALIZE"] or _specializes(c),
        # 8 warps on a 64 x 64 tile: 16 accumulators a thread, the 4-warp config does the same.
        "warps_have_work": lambda c: _acc_regs(c) >= 32 or c["WARP_SPECIALIZE"],
        # 256-row tiles only as 256 x 128 (the 128 x 256 tile transposed); 256 x 64 and the
        # 4-warp plain loop on 256 rows leave the accumulator too few warps.
        # At least 192 K columns in flight: two 64-wide stages leave TMA latency exposed.
        "pipeline_depth": lambda c: c["num_stages"] * c["BLOCK_K"] >= 192,
        "tall_tiles": lambda c: c["BLOCK_M"] < 256 or (
            c["BLOCK_N"] == 128 and (c["WARP_SPECIALIZE"] or c["num_warps"] == 8)),
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
    """gemm_tma's bound (the family's with both operands aligned, plus the C staging tile,
    half of it when EPILOGUE_SUBTILE is 1 or not given): the buffers are the same, only the
    descriptors move to global scratch. 0 where the family's bound claims nothing. The AOT
    compiles in tests/test_kernels_gemm_tma_device.py check it stays below the compiled size.
    Vectorised like the family's."""
    return _host.shared_memory_floor(problem, config, dtype=dtype, aligned=aligned, arch=arch,
                                     warp_specialized=warp_specialized)


def _interpreted() -> bool:
    """True under TRITON_INTERPRET=1 (see costtune.kernels.gemm._interpreted)."""
    return not isinstance(_device_desc_kernel, triton.runtime.jit.JITFunction)


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    """Flat dict of the kernel's parameters; unknown or missing names and bad values raise."""
    return _host.check_config(config, params=_KERNEL_PARAMS, flags=_FLAGS, name=NAME)
