"""On the H200: a batched matmul written as users write one (``bmm_kernel``, grid
``(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N), BATCH)``), tuned through ``costtune.autotune(top_k=8)``
with no mapping, against every config of its list timed in the same process.

The hook reads the kernel as a GEMM of M x N x K; the grid's third axis counts BATCH
programs, which no GEMM workload has. Since a7de579 that is a "grid" doubt (k widens)
instead of SPLIT_K = BATCH read from the grid. Per shape, one JSON line in
``$OUT/batched_gemm.jsonl``: what the hook read (family, sizes, k, notes), the config it
picked, its time and the best time of the whole list (costtune's graph timing, L2 flushed),
the pick's output error against torch, the kept list and every config's time.

    python3 experiments/device/check_batched_gemm_h200.py --out $OUT
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SHAPES = [(8, 1024, 1024, 1024), (32, 512, 512, 512), (4, 2048, 2048, 2048),
          (64, 256, 256, 1024)]


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, BATCH, M, N, K, stride_ab, stride_am, stride_ak,
               stride_bb, stride_bk, stride_bn, stride_cb, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + batch * stride_ab + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k0 * BLOCK_K), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k0 * BLOCK_K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + batch * stride_cb + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def configs() -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
            for m, n, k, w, s in itertools.product((64, 128), (64, 128, 256), (32, 64), (4, 8),
                                                   (3, 4))
            if not (m == 128 and n == 256 and w == 4)]


def launch(fn, a, b, c):
    batch, m, k = a.shape
    n = b.shape[2]
    fn[lambda meta: (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]), batch)](
        a, b, c, batch, m, n, k, *a.stride(), *b.stride(), *c.stride())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import costtune
    from costtune.measure.bench import graph_bench

    args.out.mkdir(parents=True, exist_ok=True)
    cfgs = configs()
    for batch, m, n, k in SHAPES:
        a = torch.randn(batch, m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(batch, k, n, device="cuda", dtype=torch.float16)
        c = torch.empty(batch, m, n, device="cuda", dtype=torch.float16)
        ref = torch.bmm(a, b)
        tuner = costtune.autotune(cfgs, key=["BATCH", "M", "N", "K"], top_k=8)(bmm_kernel)
        start = time.perf_counter()
        launch(tuner, a, b, c)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        err = (c.float() - ref.float()).abs().max().item()
        last = tuner.early_config_prune.last
        times = {}
        for cfg in cfgs:  # the whole list, each config as its own one-config kernel
            one = triton.autotune([cfg], key=[])(bmm_kernel)
            try:
                launch(one, a, b, c)
                times[str(cfg)] = graph_bench(lambda one=one, a=a, b=b, c=c: launch(one, a, b, c))
            except Exception as e:  # failures are data
                times[str(cfg)] = f"{type(e).__name__}"
        ok = {key: t for key, t in times.items() if isinstance(t, float)}
        picked = str(tuner.best_config)
        record = {"shape": [batch, m, n, k], "seconds": seconds, "family": last.family,
                  "problem": last.problem, "k": last.k, "n_configs": last.n_configs,
                  "notes": [list(x) for x in last.notes], "picked": picked,
                  "picked_ms": ok.get(picked), "best_ms": min(ok.values()),
                  "best": min(ok, key=ok.get), "score": min(ok.values()) / ok[picked]
                  if picked in ok else None, "max_err": err, "torch_ms": graph_bench(
                      lambda a=a, b=b: torch.bmm(a, b)), "gpu": torch.cuda.get_device_name(),
                  "torch": torch.__version__, "triton": triton.__version__,
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "kept": list(last.kept), "times": times}
        with (args.out / "batched_gemm.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps({x: record[x] for x in ("shape", "k", "n_configs", "picked", "score",
                                                  "max_err", "seconds")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
