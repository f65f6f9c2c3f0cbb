"""GPU checks of issue 21 on the H200: pruning never makes tuning fail or pick a wrong config.

(a) The unfiltered GEMM list (384 configs: BLOCK_M, BLOCK_N in 32..256, BLOCK_K in 32..128, 4 or
    8 warps, 2..5 stages; 56 over 232,448 B by the tutorial's estimate) on a Triton-tutorial-03
    matmul at 8192^3: ``costtune.autotune`` with top_k = 1, 4, 8 tunes and runs (it raised
    OutOfResources before), with its pick's time and error; ``--exhaustive`` adds plain
    ``triton.autotune`` over all 384 (~3 min cold).
(b) A Triton-tutorial-06-style fused attention (TMA descriptors, its names and launch pattern)
    whose configs include warp_specialize with 2..4 stages (reported to give NaN or wrong
    output on triton 3.6 on the H200) and, when causal, BLOCK_M < BLOCK_N (wrong everywhere:
    the off-band loop then crosses the diagonal unmasked; the tutorial prunes them). Tuned with
    ``check=True``: the pick is compared with torch's attention, and what check= rejected is
    listed with each config's error; the same configs tuned without check show what would
    have been picked. A third run benchmarks every BLOCK_M=64 config (causal), wrong ones
    included, so check= must reject them.

Results go to ``$OUT/safety_h200.jsonl`` (or --out), one JSON line per run, written as each
finishes; a rerun skips runs already there. ``--dry-run`` prints the plan (CPU).

    python experiments/device/safety_h200.py --out "$OUT" [--exhaustive] [--deadline-s 360]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import costtune  # noqa: E402

GEMM_SHAPE = (8192, 8192, 8192)
ATTN_SHAPES = [(4, 32, 4096, 128, True), (4, 32, 4096, 128, False)]  # Z, H, N_CTX, D, causal
GEMM_PARAMS = {"BLOCK_SIZE_M": "BLOCK_M", "BLOCK_SIZE_N": "BLOCK_N", "BLOCK_SIZE_K": "BLOCK_K"}


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                  BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    """Triton tutorial 03's matmul, as users copy it."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def gemm_configs() -> list:
    return [triton.Config({"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k,
                           "GROUP_SIZE_M": 8}, num_warps=w, num_stages=s)
            for m, n, k, w, s in itertools.product((32, 64, 128, 256), (32, 64, 128, 256),
                                                   (32, 64, 128), (4, 8), (2, 3, 4, 5))]


def matmul(kernel, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) *  # noqa: E731
                         triton.cdiv(N, META["BLOCK_SIZE_N"]),)
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 c.stride(0), c.stride(1))
    return c


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype: tl.constexpr, start_m,
                    qk_scale, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr,
                    BLOCK_N: tl.constexpr, STAGE: tl.constexpr, offs_m, offs_n, N_CTX,
                    warp_specialize: tl.constexpr):
    if STAGE == 1:  # causal, off the diagonal band
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:  # causal, on the band
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:
        lo, hi = 0, N_CTX
    offsetk_y = offset_y + lo
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=warp_specialize):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([offsetk_y, 0]).T
        qk = tl.dot(q, k)
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([offsetk_y, 0])
        acc = tl.dot(p.to(dtype), v, acc)
        l_i = l_i * alpha + l_ij
        m_i = m_ij
        offsetk_y += BLOCK_N
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(sm_scale, M, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              STAGE: tl.constexpr, warp_specialize: tl.constexpr):
    """Tutorial 06's forward pass: one program per BLOCK_M queries of one (batch, head)."""
    dtype = tl.float16
    tl.static_assert(BLOCK_N <= HEAD_DIM)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    offset_y = off_z * (N_CTX * H) + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # 1/log(2)
    q = desc_q.load([qo_offset_y, 0])
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype,
                                        start_m, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N,
                                        4 - STAGE, offs_m, offs_n, N_CTX, warp_specialize)
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, dtype,
                                        start_m, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N,
                                        2, offs_m, offs_n, N_CTX, warp_specialize)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(dtype))


def _host_descriptor_pre_hook(nargs):
    BLOCK_M, BLOCK_N, HEAD_DIM = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
    nargs["desc_q"].block_shape = [BLOCK_M, HEAD_DIM]
    nargs["desc_v"].block_shape = [BLOCK_N, HEAD_DIM]
    nargs["desc_k"].block_shape = [BLOCK_N, HEAD_DIM]
    nargs["desc_o"].block_shape = [BLOCK_M, HEAD_DIM]


def attention_configs(head_dim: int = 128) -> list:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "warp_specialize": ws}, num_stages=s,
                          num_warps=w, pre_hook=_host_descriptor_pre_hook)
            for bm, bn, s, w, ws in itertools.product((64, 128), (32, 64, 128), (2, 3, 4), (4, 8),
                                                      (False, True)) if bn <= head_dim]


def attention(kernel, q, k, v, causal: bool, sm_scale: float) -> torch.Tensor:
    """The tutorial's launch: host TMA descriptors over (Z*H*N_CTX, HEAD_DIM) views."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    Z, H, N_CTX, HEAD_DIM = q.shape
    o = torch.empty_like(q)
    M = torch.empty((Z, H, N_CTX), device=q.device, dtype=torch.float32)
    dummy = [1, 1]
    desc = {name: TensorDescriptor(t, shape=[Z * H * N_CTX, HEAD_DIM], strides=[HEAD_DIM, 1],
                                   block_shape=dummy) for name, t in
            (("desc_q", q), ("desc_k", k), ("desc_v", v), ("desc_o", o))}
    grid = lambda args: (triton.cdiv(N_CTX, args["BLOCK_M"]), Z * H, 1)  # noqa: E731
    kernel[grid](sm_scale, M, Z, H, desc["desc_q"], desc["desc_k"], desc["desc_v"],
                 desc["desc_o"], N_CTX, HEAD_DIM=HEAD_DIM, STAGE=3 if causal else 1)
    return o


def attention_problem(args: dict) -> dict:
    return {"B": args["Z"], "H": args["H"], "S": args["N_CTX"], "D": args["HEAD_DIM"],
            "causal": int(args["STAGE"] == 3)}


def attention_tuner(configs, **options):
    return costtune.autotune(configs, key=["N_CTX", "HEAD_DIM", "STAGE"], family="attention",
                             problem=attention_problem, dtype="float16", **options)(_attn_fwd)


def gemm_tuner(top_k, **options):
    return costtune.autotune(gemm_configs(), key=["M", "N", "K"], top_k=top_k, family="gemm",
                             params=GEMM_PARAMS, **options)(matmul_kernel)


def plan(exhaustive: bool) -> list[dict]:
    """The runs in order, each with the seconds it is expected to take on the H200."""
    runs = [{"id": f"gemm_top{k}", "kind": "gemm", "top_k": k, "expect_s": 30}
            for k in (1, 4, 8)]
    runs += [{"id": f"attention_Z{z}_H{h}_S{s}_D{d}_causal{int(c)}", "kind": "attention",
              "shape": [z, h, s, d, c], "top_k": 8, "expect_s": 70}
             for z, h, s, d, c in ATTN_SHAPES]
    # Every config benchmarked, wrong ones included: BLOCK_M=64, 8 warps, causal.
    runs.append({"id": "attention_all_block_m64_causal", "kind": "attention",
                 "shape": list(ATTN_SHAPES[0]), "top_k": 1.0, "block_m": 64, "warps": 8,
                 "expect_s": 90})
    if exhaustive:
        runs.append({"id": "gemm_exhaustive", "kind": "gemm_exhaustive", "expect_s": 200})
    return runs


def timed(fn) -> float:
    """Median ms by CUDA-graph replay (the dataset's timing), else Triton's do_bench."""
    from costtune.measure.bench import graph_bench

    try:
        return float(graph_bench(fn))
    except Exception:
        torch.cuda.synchronize()
        return float(triton.testing.do_bench(fn))


def rel_err(out, ref) -> float:
    out, ref = out.float(), ref.float()
    if not bool(torch.isfinite(out).all()):
        return math.inf
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


def text(config) -> str:
    return costtune.Config.from_triton(config).key if config is not None else ""


def run_gemm(run: dict) -> dict:
    from costtune.measure.bench import graph_bench

    m, n, k = GEMM_SHAPE
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).half().cuda()
    b = (torch.randn(k, n, generator=gen) / math.sqrt(k)).half().cuda()
    ref = a @ b
    if run["kind"] == "gemm_exhaustive":
        kernel = triton.autotune(gemm_configs(), key=["M", "N", "K"], do_bench=graph_bench)(
            matmul_kernel)
    else:
        kernel = gemm_tuner(run["top_k"])
    start = time.perf_counter()
    c = matmul(kernel, a, b)
    torch.cuda.synchronize()
    tune_s = time.perf_counter() - start
    ms = timed(lambda: matmul(kernel, a, b))
    last = getattr(getattr(kernel, "early_config_prune", None), "last", None)
    return {"tune_s": tune_s, "chosen": text(kernel.best_config), "chosen_ms": ms,
            "torch_ms": timed(lambda: a @ b), "rel_err": rel_err(c, ref),
            "benchmarked": len(kernel.configs_timings),
            "kept": None if last is None else last.k,
            "dropped": None if last is None else len(last.dropped),
            "rejected": getattr(kernel, "rejected", {}),
            "warnings": [] if last is None else last.warnings}


def run_attention(run: dict) -> dict:
    z, h, s, d, causal = run["shape"]
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(z, h, s, d, generator=gen).half().cuda() for _ in range(3))
    sm_scale = 1 / math.sqrt(d)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    configs = [c for c in attention_configs(d)
               if run.get("block_m") in (None, c.kwargs["BLOCK_M"])
               and run.get("warps") in (None, c.num_warps)]
    out = {"n_configs": len(configs)}
    for label, options in (("checked", {"check": True}), ("unchecked", {})):
        kernel = attention_tuner(configs, top_k=run["top_k"], **options)
        start = time.perf_counter()
        o = attention(kernel, q, k, v, causal, sm_scale)
        torch.cuda.synchronize()
        last = kernel.early_config_prune.last
        again = lambda kernel=kernel: attention(kernel, q, k, v, causal, sm_scale)  # noqa: E731
        out[label] = {"tune_s": time.perf_counter() - start, "chosen": text(kernel.best_config),
                      "rel_err": rel_err(o, ref), "benchmarked": len(kernel.configs_timings),
                      "kept": last.k, "knobs": {name: [str(x) for x in values]
                                                for name, values in last.knobs.items()},
                      "rejected": dict(kernel.rejected), "warnings": last.warnings,
                      "chosen_ms": timed(again)}
        ran = [c for c in configs if c in kernel.configs_timings
               or "wrong output" in kernel.rejected.get(text(c), "")]
        out[label]["errors"] = config_errors(kernel, ran, q, k, v, causal, sm_scale, ref)
    return out


def config_errors(kernel, configs, q, k, v, causal, sm_scale, ref) -> dict:
    """Each config's error against torch's attention, launched on its own (benchmarked ones
    and those check= rejected)."""
    out = {}
    for config in configs:
        single = triton.autotune([config], key=["N_CTX"])(kernel.fn)
        try:
            out[text(config)] = rel_err(attention(single, q, k, v, causal, sm_scale), ref)
        except Exception as exc:
            out[text(config)] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def done_ids(log: Path) -> set[str]:
    if not log.exists():
        return set()
    return {json.loads(line)["id"] for line in log.read_text().splitlines() if line.strip()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "results")))
    parser.add_argument("--exhaustive", action="store_true")
    parser.add_argument("--deadline-s", type=float, default=360.0)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    from costtune.env import environment

    env = environment() if not args.dry_run else {"gpu": "dry run"}
    print(json.dumps({"provenance": env}, default=str), flush=True)
    runs = plan(args.exhaustive)
    log = args.out / "safety_h200.jsonl"
    todo = [r for r in runs if r["id"] not in done_ids(log)]
    print("plan:", ", ".join(r["id"] for r in runs), f"({len(todo)} to run)", flush=True)
    if args.dry_run:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for run in todo:
        if time.perf_counter() - start + run["expect_s"] > args.deadline_s:
            print(f"deadline: {run['id']} left for a rerun", flush=True)
            continue
        t0 = time.perf_counter()
        try:
            result = run_gemm(run) if run["kind"].startswith("gemm") else run_attention(run)
            status = "ok"
        except Exception as exc:  # a failure is a result: the point of this check
            result, status = {"error": f"{type(exc).__name__}: {exc}",
                              "traceback": traceback.format_exc()[-2000:]}, "error"
        record = {"id": run["id"], "run": run, "status": status, "wall_s":
                  time.perf_counter() - t0, "result": result, "env": env}
        with log.open("a") as f:
            f.write(json.dumps(record, default=str) + "\n")
        print(json.dumps({k: record[k] for k in ("id", "status", "wall_s")}),
              json.dumps(result, default=str)[:1500], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
