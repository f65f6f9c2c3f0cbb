"""Analytical roofline baseline: predicted time per (workload, config) from the problem and the
config alone, the max of a compute, a DRAM and a tile-load time.

- compute: FLOPs of the *padded* tiles (tile padding waste counts), quantized to whole waves
  over the SMs (each SM runs ``ceil(programs / SMs)`` programs, as many at once as shared
  memory, warps and estimated registers allow), at 790 TFLOP/s (measured bf16 matmul rate on
  the H200) for tensor-core work and 60 TFLOP/s for fp32 CUDA-core work. Pipelined loops
  (GEMM K, attention KV) are also latency bound: with ``num_stages - 1`` tiles in flight an
  iteration takes at least 0.8 us / (num_stages - 1) (Little's law).
- memory: DRAM bytes including tile re-reads (GEMM A/B panels are re-read per wave of
  concurrently resident programs unless A and B fit in half the L2), over 4.3 TB/s (measured
  copy bandwidth), capped by Little's law: programs in flight x bytes each has outstanding
  (its pipeline stages) / DRAM latency.
- tile loads: every byte each program loads into shared memory (all re-reads, padded tiles)
  over an L2 bandwidth of 12 TB/s; this is what makes small GEMM tiles slow.

The predicted time is the bound term plus 10% of the others (imperfect overlap). It ignores
instruction-level effects (MMA shape efficiency, register spills, bank conflicts); configs it
cannot tell apart tie and fall back to config-key order. Constants are physical figures or
guesses, never fitted to the dataset.

>>> import pandas as pd
>>> rows = pd.DataFrame({"kernel": "gemm", "dtype": "float16", "M": 4096, "N": 4096,
...     "K": 4096, "BLOCK_M": [128, 32], "BLOCK_N": [128, 32], "BLOCK_K": 64, "SPLIT_K": 1,
...     "num_warps": 4, "num_stages": 3, "config": ["big", "small"]})
>>> Roofline().rank(rows).tolist()
[0, 1]
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from costtune.evaluate.metrics import rank_positions
from costtune.hardware import H200

PEAK_TENSOR_FLOPS = H200.peak_tensor_flops
PEAK_FP32_FLOPS = H200.peak_fp32_flops
DRAM_BW = H200.dram_bw
DRAM_LATENCY_S = 0.8e-6  # load-to-use latency used for Little's law
LOAD_LATENCY_S = 0.8e-6  # global -> shared tile load issued by a pipelined K loop (a guess)
REGS_PER_SM = H200.regs_per_sm
L2_BW = H200.l2_bw
NUM_SMS = H200.num_sms
L2_BYTES = H200.l2_bytes
SM_SHARED = H200.shared_per_sm
MAX_WARPS_PER_SM = H200.max_warps_per_sm
MAX_CTAS_PER_SM = H200.max_ctas_per_sm
GROUP_M = 8  # the GEMM kernel's fixed tile-group width
OVERLAP_LEAK = 0.1  # share of the non-bound terms that is not hidden (a guess, not fitted)
SOFTMAX_OPS_PER_ELEMENT = 6  # max, sub, exp2, add, mul, compare on the fp32 path
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}


class Roofline:
    """Ranks configs by ``predict_time`` (seconds), fastest first; see the module docstring."""

    def fit(self, data: pd.DataFrame | None = None) -> Roofline:
        return self

    def predict_time(self, rows: pd.DataFrame) -> np.ndarray:
        """Predicted seconds per row (NaN for an unknown family or missing columns)."""
        out = np.full(len(rows), np.nan)
        kernels = rows["kernel"].astype(str).to_numpy()
        for kernel, fn in (("gemm", gemm_time), ("softmax", softmax_time),
                           ("attention", attention_time)):
            mask = kernels == kernel
            if mask.any():
                out[mask] = fn(rows.loc[mask])
        return out

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        """Higher = predicted faster (``-time``), like ``CostModel.predict``."""
        return -self.predict_time(rows)

    def rank(self, rows: pd.DataFrame) -> np.ndarray:
        return rank_positions(self.predict(rows), rows["config"].astype(str).to_numpy())


def _col(rows: pd.DataFrame, name: str) -> np.ndarray:
    return pd.to_numeric(rows[name], errors="coerce").to_numpy(dtype=float)


def _itemsize(rows: pd.DataFrame) -> np.ndarray:
    return rows["dtype"].astype(str).map(_ITEMSIZE).fillna(2).to_numpy(dtype=float)


def _ctas_per_sm(smem: np.ndarray, warps: np.ndarray, regs: np.ndarray | None = None
                 ) -> np.ndarray:
    by_smem = np.floor(SM_SHARED / (smem + 1024))
    limits = [by_smem, MAX_WARPS_PER_SM // warps, np.full_like(smem, MAX_CTAS_PER_SM)]
    if regs is not None:
        limits.append(np.floor(REGS_PER_SM / (regs * 32 * warps)))
    return np.maximum(1, np.minimum.reduce(limits))


def _pipelined_compute(programs, ctas, iters, iter_s, stages) -> np.ndarray:
    """Tensor-core time of a K loop on each SM: its ``ceil(programs / SMs)`` programs run
    ``ctas`` at a time, sharing the SM's peak. Little's law: a load issued ``stages - 1``
    iterations ahead must arrive in time, so an iteration lasts at least latency / (stages-1).
    ``iter_s``: one iteration running alone on an SM.
    """
    per_sm = np.ceil(programs / NUM_SMS)
    together = np.minimum(ctas, per_sm)
    t_mma = iter_s * together
    t_iter = np.maximum(t_mma, LOAD_LATENCY_S / np.maximum(stages - 1, 1))
    return np.ceil(per_sm / together) * iters * t_iter


def _memory_time(dram_bytes, programs, ctas, inflight_per_program) -> np.ndarray:
    resident = np.minimum(programs, NUM_SMS * ctas)
    bandwidth = np.minimum(DRAM_BW, resident * inflight_per_program / DRAM_LATENCY_S)
    return dram_bytes / bandwidth


def _overlap(*terms: np.ndarray) -> np.ndarray:
    """The bound term plus ``OVERLAP_LEAK`` of the others: overlap is never perfect, and this
    also orders configs that tie on the bound (less traffic wins)."""
    stacked = np.stack(terms)
    bound = stacked.max(axis=0)
    return bound + OVERLAP_LEAK * (stacked.sum(axis=0) - bound)


def gemm_time(rows: pd.DataFrame) -> np.ndarray:
    """C = A @ B with BLOCK_M x BLOCK_N tiles, BLOCK_K steps and SPLIT_K atomic splits."""
    m, n, k = _col(rows, "M"), _col(rows, "N"), _col(rows, "K")
    bm, bn, bk = _col(rows, "BLOCK_M"), _col(rows, "BLOCK_N"), _col(rows, "BLOCK_K")
    split = np.nan_to_num(_col(rows, "SPLIT_K"), nan=1.0)
    warps, stages = _col(rows, "num_warps"), _col(rows, "num_stages")
    e = _itemsize(rows)
    tm, tn, kt = np.ceil(m / bm), np.ceil(n / bn), np.ceil(k / bk)
    tiles = tm * tn
    programs = tiles * split
    k_iters = np.ceil(kt / split)  # per program; the last split may have fewer
    # Registers: the fp32 accumulator plus ~40 for addresses and operands.
    regs = np.minimum(255, bm * bn / (32 * warps) + 40)
    ctas = _ctas_per_sm(stages * (bm * bk + bk * bn) * e, warps, regs)
    iter_s = 2 * bm * bn * bk / (PEAK_TENSOR_FLOPS / NUM_SMS)
    t_compute = _pipelined_compute(programs, ctas, k_iters, iter_s, stages)

    resident = np.minimum(programs, NUM_SMS * ctas)
    # A wave of resident programs covers consecutive tiles in grouped order: up to GROUP_M
    # tile rows, then whole tile columns. Panels shared inside a wave come from L2 once.
    in_wave = np.minimum(tiles, resident)
    rows_cov = np.where(in_wave > GROUP_M * tn, np.ceil(in_wave / tn),
                        np.minimum(np.minimum(tm, GROUP_M), in_wave))
    cols_cov = np.minimum(tn, np.ceil(in_wave / rows_cov))
    waves = np.ceil(programs / resident)
    panel_k = bk * k_iters
    reread = waves * (rows_cov * bm + cols_cov * bn) * panel_k * e
    once = (m * k + k * n) * e
    ab_bytes = np.where(once <= L2_BYTES / 2, once, np.maximum(reread, once))
    # launch() zeroes an fp32 workspace, atomically adds each split, then casts it back.
    c_bytes = np.where(split > 1, m * n * (4 + 2 * 4 * split + 4 + e), m * n * e)
    inflight = np.maximum(stages - 1, 1) * (bm + bn) * bk * e
    t_memory = _memory_time(ab_bytes + c_bytes, programs, ctas, inflight)
    t_l2 = programs * (bm + bn) * panel_k * e / L2_BW
    return _overlap(t_compute, t_memory, t_l2)


def softmax_time(rows: pd.DataFrame) -> np.ndarray:
    """Row softmax: one pass when BLOCK_N >= cols, otherwise an online pass plus a second loop
    that re-reads each row (from L2 when the resident rows fit in half of it)."""
    n_rows, cols = _col(rows, "rows"), _col(rows, "cols")
    block, rpp = _col(rows, "BLOCK_N"), np.nan_to_num(_col(rows, "ROWS_PER_PROG"), nan=1.0)
    warps, stages = _col(rows, "num_warps"), np.nan_to_num(_col(rows, "num_stages"), nan=1.0)
    e = _itemsize(rows)
    programs = np.ceil(n_rows / rpp)
    one_pass = block >= cols
    cols_pad = np.ceil(cols / block) * block
    passes = np.where(one_pass, 1, 2)
    per_sm = np.ceil(programs / NUM_SMS)
    t_compute = (per_sm * rpp * cols_pad * passes * SOFTMAX_OPS_PER_ELEMENT
                 / (PEAK_FP32_FLOPS / NUM_SMS))
    ctas = _ctas_per_sm(np.zeros_like(block), warps)
    resident = np.minimum(programs, NUM_SMS * ctas)
    fits_l2 = resident * rpp * cols * e <= L2_BYTES / 2
    reads = np.where(one_pass | fits_l2, 1, 2)
    dram = n_rows * cols * e * (reads + 1)
    inflight = rpp * block * e * np.where(one_pass, 1, np.maximum(stages, 1))
    t_memory = _memory_time(dram, programs, ctas, inflight)
    return _overlap(t_compute, t_memory)


def attention_time(rows: pd.DataFrame) -> np.ndarray:
    """FlashAttention forward: programs = query blocks x B*H, each streaming K/V blocks (causal
    programs stop at their diagonal block)."""
    b, h, s, d = (_col(rows, c) for c in ("B", "H", "S", "D"))
    causal = np.nan_to_num(_col(rows, "causal"), nan=0.0) > 0
    bm, bn = _col(rows, "BLOCK_M"), _col(rows, "BLOCK_N")
    warps, stages = _col(rows, "num_warps"), _col(rows, "num_stages")
    e = _itemsize(rows)
    q_blocks = np.ceil(s / bm)
    kv_per_head = np.array([_kv_visits(*a) for a in zip(s, bm, bn, causal, strict=True)])
    bh = b * h
    programs = q_blocks * bh
    # Per KV block: QK^T and PV on tensor cores, the online softmax on CUDA cores.
    iter_s = (4 * bm * bn * d / (PEAK_TENSOR_FLOPS / NUM_SMS)
              + bm * bn * SOFTMAX_OPS_PER_ELEMENT / (PEAK_FP32_FLOPS / NUM_SMS))
    regs = np.minimum(255, bm * (bn + d) / (32 * warps) + 40)  # fp32 scores and output
    ctas = _ctas_per_sm((stages * bn * d * 2 + bm * d) * e, warps, regs)
    # Causal programs differ in length; the mean trip count stands for all of them.
    t_compute = _pipelined_compute(programs, ctas, kv_per_head / q_blocks, iter_s, stages)
    # Consecutive programs are query blocks of one head, so they share its K/V through L2:
    # Q, K, V and O cross DRAM about once.
    dram = bh * s * d * e * 4
    inflight = np.maximum(stages - 1, 1) * 2 * bn * d * e
    t_memory = _memory_time(dram, programs, ctas, inflight)
    t_l2 = bh * (q_blocks * bm * d + kv_per_head * 2 * bn * d) * e / L2_BW
    return _overlap(t_compute, t_memory, t_l2)


@functools.lru_cache(maxsize=4096)
def _kv_visits(s: float, bm: float, bn: float, causal: bool) -> float:
    """KV blocks visited by all query blocks of one head; causal block i stops at its diagonal."""
    if not all(np.isfinite([s, bm, bn])):
        return float("nan")
    q_blocks, kv_blocks = int(np.ceil(s / bm)), int(np.ceil(s / bn))
    if not causal:
        return float(q_blocks * kv_blocks)
    return float(sum(np.ceil(min(s, (i + 1) * bm) / bn) for i in range(q_blocks)))
