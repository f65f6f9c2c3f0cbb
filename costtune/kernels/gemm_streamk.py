"""GEMM, stream-K: a persistent TMA kernel that splits its last partial wave along K.

The family's problems, inputs and reference (costtune.kernels.gemm), computed like gemm_tma
(persistent programs over host TMA descriptors, grouped tile order with GROUP_SIZE_M = 8,
optional half-width epilogue stores) with one difference, aimed at wave quantization: with
T output tiles on S SMs, the first T - T % S tiles run data-parallel (whole tiles, S at a time)
and the remaining T % S tiles may be shared out as K iterations ("stream-K", Osama et al.,
PPoPP 2023), an equal run of (tile, K block) iterations per program. A program that covers only
part of a tile adds its fp32 partial sum to a per-tile workspace with atomics, then adds its K
iterations to the tile's counter; the program that completes the count reads the sum, zeroes it
and the counter and stores C. No program ever waits for another, and the workspace is left
zeroed for the next launch (CUDA-graph replay reuses it).

Whether the remainder is shared out is decided at launch from the problem and the tile
(``split_work``): only when it cuts the K iterations the busiest SM runs by SK_GAIN (x1.2) with
at least a full wave of tiles, or by SK_GAIN_FEW_TILES (x3) with fewer tiles than SMs (K split
over the whole GPU); else every tile runs data-parallel. The atomics cost: measured on the H200
with every remainder shared out, gemm_tma's config beat this kernel's on 4096^3 (remainder
116 of 132 SMs) by 12%, while a small remainder (5120^3 with 128 x 256 tiles: 8 tiles) or few
tiles on a long K (256 x 512 x 32768) won by 7% and 2x. The two gains are the pair that did
best on the train suite's shapes in those measurements (experiments/NOTES.md, thirteenth
session); they forgo the first of these wins (its gain is 1.16).

On 1024 x 5120 x 5120 with 128 x 256 tiles (160 tiles, 132 SMs) a data-parallel kernel runs two
waves of 80 K iterations; this one runs 80 + 17.

TMA needs 16-byte aligned global strides: the suites are gemm_tma's (K and N multiples of 8).

>>> from costtune.kernels import gemm_streamk as sk
>>> sk.split_work({"M": 1024, "N": 5120, "K": 5120}, {"BLOCK_M": 128, "BLOCK_N": 256,
...               "BLOCK_K": 64})
{'tiles': 160, 'dp_tiles': 132, 'sk_tiles': 28, 'sk_programs': 132, 'sk_iters': 17}
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
from costtune.kernels import gemm_tma as _host
from costtune.kernels.base import KernelCall
from costtune.space import ConfigSpace
from costtune.types import Config

NAME = "gemm_streamk"
FAMILY = "gemm"
DESCRIPTION = ("Persistent grid over host TMA descriptors: full waves of output tiles run "
               "data-parallel, the last partial wave is split along K over every SM when that "
               "pays (stream-K: fp32 partial sums combined with atomics), optional half-width "
               "epilogue stores.")

PROBLEM_KEYS = _family.PROBLEM_KEYS
DTYPES = _family.DTYPES
make_inputs = _family.make_inputs
reference = _family.reference
torch_op = _family.torch_op
flops = _family.flops
min_bytes = _family.min_bytes
# The family's: fp32 accumulation (partial sums added in fp32) and one rounding of C.
TOLERANCE = _family.TOLERANCE

GROUP_SIZE_M = 8  # grouped tile order, as gemm_tma
NUM_SMS = H200.num_sms
MAX_ACC_REGS = _family.MAX_ACC_REGS
# A program shares out at least this many K iterations: a tile is never split into runs so
# short that the workspace atomics cost more than the loads they spread.
MIN_SK_ITERS = 4
# Share the remainder out only when the busiest SM's K iterations fall by this factor (with at
# least a full wave of tiles), or by the second one with fewer tiles than SMs.
SK_GAIN = 1.2
SK_GAIN_FEW_TILES = 3.0

# TMA's 16-byte aligned strides: the same shapes as gemm_tma (K and N multiples of 8).
TRAIN_SHAPES = _host.TRAIN_SHAPES
TEST_SHAPES = _host.TEST_SHAPES
BF16_SUBSET = _host.BF16_SUBSET

_KERNEL_PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "EPILOGUE_SUBTILE")
_FLAGS = ("EPILOGUE_SUBTILE",)


@triton.jit
def _tile_of(tile, band_size, tiles_m, GROUP: tl.constexpr):
    band_first = (tile // band_size) * GROUP
    band_rows = min(tiles_m - band_first, GROUP)
    return band_first + (tile % band_size) % band_rows, (tile % band_size) // band_rows


@triton.jit
def _store_c(c_desc, acc, row, col, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             EPILOGUE_SUBTILE: tl.constexpr):
    if EPILOGUE_SUBTILE:
        # Two BLOCK_N / 2 halves: the C staging buffer is half as large.
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([row, col], left.to(c_desc.dtype))
        c_desc.store([row, col + BLOCK_N // 2], right.to(c_desc.dtype))
    else:
        c_desc.store([row, col], acc.to(c_desc.dtype))


@triton.jit
def _streamk_kernel(a_desc, b_desc, c_desc, work_ptr, count_ptr, M, N, K, dp_tiles, sk_iters,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    GROUP: tl.constexpr, NUM_SMS: tl.constexpr,
                    EPILOGUE_SUBTILE: tl.constexpr, UPCAST_DOT: tl.constexpr):
    first = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    band_size = GROUP * tiles_n
    # Data-parallel part: whole tiles, NUM_SMS at a time (all of them when none is shared out).
    # The epilogue's tile comes from its own counter so the flattened loop can run the next
    # tile's loads ahead of it (as gemm_tma).
    store_tile = first - NUM_SMS
    for tile in tl.range(first, dp_tiles, NUM_SMS, flatten=True):
        tm, tn = _tile_of(tile, band_size, tiles_m, GROUP)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k_tiles):
            # TMA fills out-of-bounds rows, columns and the K tail with zeros.
            a = a_desc.load([tm * BLOCK_M, kt * BLOCK_K])
            b = b_desc.load([kt * BLOCK_K, tn * BLOCK_N])
            if UPCAST_DOT:
                # Interpreter only (bf16 dot bug): fp16/bf16 products are exact in fp32.
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        store_tile += NUM_SMS
        tm, tn = _tile_of(store_tile, band_size, tiles_m, GROUP)
        _store_c(c_desc, acc, tm * BLOCK_M, tn * BLOCK_N, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
    # Stream-K part (empty unless split_work shares tiles out): this program's run of sk_iters
    # (tile, K block) iterations over the remaining tiles; it may end one tile, start the next.
    sk_total = (tiles_m * tiles_n - dp_tiles) * k_tiles
    it = first * sk_iters
    end = tl.minimum(it + sk_iters, sk_total)
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    while it < end:
        slot = it // k_tiles
        k0 = it - slot * k_tiles
        k1 = tl.minimum(k_tiles, k0 + end - it)
        tm, tn = _tile_of(dp_tiles + slot, band_size, tiles_m, GROUP)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(k0, k1):
            a = a_desc.load([tm * BLOCK_M, kt * BLOCK_K])
            b = b_desc.load([kt * BLOCK_K, tn * BLOCK_N])
            if UPCAST_DOT:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        if (k0 == 0) & (k1 == k_tiles):
            _store_c(c_desc, acc, tm * BLOCK_M, tn * BLOCK_N, BLOCK_M, BLOCK_N,
                     EPILOGUE_SUBTILE)
        else:
            work = work_ptr + slot.to(tl.int64) * (BLOCK_M * BLOCK_N) + offs
            tl.atomic_add(work, acc, sem="relaxed")
            # Every thread's partial sum is in before the count says so (release), and the
            # program that completes the count sees all of them (acquire).
            tl.debug_barrier()
            done = tl.atomic_add(count_ptr + slot, k1 - k0, sem="acq_rel")
            if done + (k1 - k0) == k_tiles:
                # The sum lives in L2 (atomics): read it past L1, then leave it zeroed.
                total = tl.load(work, cache_modifier=".cg")
                tl.store(work, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
                tl.store(count_ptr + slot, 0)
                _store_c(c_desc, total, tm * BLOCK_M, tn * BLOCK_N, BLOCK_M, BLOCK_N,
                         EPILOGUE_SUBTILE)
        it += k1 - k0


def split_work(problem: dict[str, int], config: Config | dict[str, Any], *,
               num_sms: int = NUM_SMS) -> dict[str, int]:
    """How the launch shares the work: output tiles, the data-parallel ones, the stream-K ones
    (the last T % S tiles when sharing them out pays, see the module doc; else none), how many
    programs share those out and how many (tile, K block) iterations each takes (at least
    MIN_SK_ITERS)."""
    m, n, k = _family._sizes(problem)
    c = config.as_dict() if isinstance(config, Config) else dict(config)
    tiles = triton.cdiv(m, c["BLOCK_M"]) * triton.cdiv(n, c["BLOCK_N"])
    k_tiles = triton.cdiv(k, c["BLOCK_K"])
    waves, rem = divmod(tiles, num_sms)
    data_parallel = (waves + (rem > 0)) * k_tiles  # the busiest SM's K iterations, each way
    shared = waves * k_tiles + triton.cdiv(rem * k_tiles, num_sms)
    gain = SK_GAIN if waves else SK_GAIN_FEW_TILES
    sk_tiles = rem if rem and data_parallel >= gain * shared else 0
    total = sk_tiles * k_tiles
    programs = min(num_sms, triton.cdiv(total, MIN_SK_ITERS))
    return {"tiles": tiles, "dp_tiles": tiles - sk_tiles, "sk_tiles": sk_tiles,
            "sk_programs": programs, "sk_iters": triton.cdiv(total, programs) if total else 0}


def grid(problem: dict[str, int], config: Config | dict[str, Any]) -> tuple[int]:
    """The persistent grid: min(#SMs, tiles) programs, or, when every tile is shared out
    (fewer tiles than SMs), the programs that share out K."""
    return _grid(split_work(problem, _config_values(config)))


def _grid(w: dict[str, int]) -> tuple[int]:
    return (min(NUM_SMS, w["dp_tiles"]) if w["dp_tiles"] else w["sk_programs"],)


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """The family's parameters this launch fixes: GROUP_SIZE_M 8, and SPLIT_K the number of
    K runs a tile is split into when every tile is shared out (fewer tiles than SMs: the
    whole problem split along K, as the original kernel's split-K does), else 1 (the bulk of
    the tiles runs whole; a shared-out remainder is not a split of the problem)."""
    # Only the tile is read: rows may carry the family's parameters filled in already.
    c = config.as_dict() if isinstance(config, Config) else dict(config)
    tile = {k: int(c[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
    w = split_work(problem, tile)
    split = 1
    if w["sk_tiles"] and not w["dp_tiles"]:
        k_tiles = triton.cdiv(_family._sizes(problem)[2], tile["BLOCK_K"])
        split = max(1, round(k_tiles / w["sk_iters"]))
    return {"SPLIT_K": split, "GROUP_SIZE_M": GROUP_SIZE_M}


def kernel_calls(inputs: dict[str, torch.Tensor],
                 config: Config | dict[str, Any]) -> list[KernelCall]:
    """The single launch ``launch`` makes: descriptors over A, B and a fresh C (block shapes
    from the config), and the device's zeroed fp32 workspace (one tile per stream-K tile) and
    int32 counters from ``workspace`` (the kernel leaves both zeroed, so the call can be
    replayed)."""
    a, b = _family._check_inputs(inputs)
    c = _config_values(config)
    _host._check_tma(a, b, NAME)
    m, k = a.shape
    n = b.shape[1]
    problem = {"M": m, "N": n, "K": k}
    w = split_work(problem, c)
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    bm, bn, bk = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]
    work, count = workspace(a.device, max(w["sk_tiles"], 1) * bm * bn, max(w["sk_tiles"], 1))
    c_cols = bn // 2 if c["EPILOGUE_SUBTILE"] else bn
    descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
             TensorDescriptor.from_tensor(out, [bm, c_cols]))
    call = KernelCall(
        fn=_streamk_kernel,
        grid=_grid(w),
        args=(*descs, work, count, m, n, k, w["dp_tiles"], w["sk_iters"]),
        kwargs={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP": GROUP_SIZE_M,
                "NUM_SMS": NUM_SMS, "EPILOGUE_SUBTILE": bool(c["EPILOGUE_SUBTILE"]),
                "UPCAST_DOT": _interpreted() and a.dtype == torch.bfloat16},
        num_warps=c["num_warps"], num_stages=c["num_stages"])
    return [call]


_WORKSPACE: dict[tuple[str, int | None], tuple[torch.Tensor, torch.Tensor]] = {}


def workspace(device: torch.device, floats: int, counters: int) -> tuple[torch.Tensor,
                                                                         torch.Tensor]:
    """Zeroed fp32 partial sums and int32 counters of at least these sizes, kept per device
    and reused by every launch (each launch leaves them zeroed), as a BLAS library keeps its
    workspace: no memset per launch. Launches that share a device must not overlap in time
    (one stream), as for any library workspace. Grown outside CUDA-graph capture only; a
    capture that needs more gets buffers of its own (zeroed in the graph)."""
    key = (device.type, device.index)
    work, count = _WORKSPACE.get(key, (None, None))
    if work is not None and work.numel() >= floats and count.numel() >= counters:
        return work, count
    work = torch.zeros(floats, dtype=torch.float32, device=device)
    count = torch.zeros(counters, dtype=torch.int32, device=device)
    if device.type != "cuda" or not torch.cuda.is_current_stream_capturing():
        _WORKSPACE[key] = (work, count)
    return work, count


def launch(inputs: dict[str, torch.Tensor], config: Config | dict[str, Any]) -> torch.Tensor:
    """C = A @ B with one config; validates inputs and config (ValueError naming the problem)."""
    (call,) = kernel_calls(inputs, config)
    call.run()
    return call.args[2].base


_SPACE = {
    "BLOCK_M": (64, 128, 256),
    "BLOCK_N": (64, 128, 256),
    "BLOCK_K": (64, 128),
    "EPILOGUE_SUBTILE": (0, 1),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
}


def tma_shared_bytes(c: dict[str, Any], itemsize: int = 2) -> int:
    """gemm_tma's estimate without warp specialization: the pipelined A and B tiles plus the C
    staging tile (halved when subtiled); the two K loops share their buffers."""
    return _host.tma_shared_bytes({**c, "WARP_SPECIALIZE": 0}, itemsize)


def config_space(problem: dict[str, int] | None = None) -> ConfigSpace:
    """Tiles, epilogue subtiling and launch options; with ``problem``, drop tiles larger than
    the problem needs."""
    acc = lambda c: c["BLOCK_M"] * c["BLOCK_N"] / (32 * c["num_warps"])  # noqa: E731
    constraints = {
        "shared_memory": lambda c: tma_shared_bytes(c) + 1024 <= H200.max_shared_per_block,
        "accumulator_registers": lambda c: acc(c) <= MAX_ACC_REGS,
        # 8 warps on a 64 x 64 tile: 16 accumulators a thread, the 4-warp config does the same.
        "warps_have_work": lambda c: acc(c) >= 32,
        # At least 192 K columns in flight: two 64-wide stages leave TMA latency exposed.
        "pipeline_depth": lambda c: c["num_stages"] * c["BLOCK_K"] >= 192,
        # 256-row tiles only as 256 x 128 at 8 warps (128 x 256 transposed).
        "tall_tiles": lambda c: c["BLOCK_M"] < 256 or (
            c["BLOCK_N"] == 128 and c["num_warps"] == 8),
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
    half of it when EPILOGUE_SUBTILE is 1 or not given). Vectorised like the family's."""
    return _host.shared_memory_floor(problem, config, dtype=dtype, aligned=aligned, arch=arch,
                                     warp_specialized=warp_specialized)


def _interpreted() -> bool:
    """True under TRITON_INTERPRET=1 (see costtune.kernels.gemm._interpreted)."""
    return not isinstance(_streamk_kernel, triton.runtime.jit.JITFunction)


def _config_values(config: Config | dict[str, Any]) -> dict[str, int]:
    """Flat dict of the kernel's parameters; unknown or missing names and bad values raise."""
    return _host.check_config(config, params=_KERNEL_PARAMS, flags=_FLAGS, name=NAME)
