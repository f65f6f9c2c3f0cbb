"""Device probe (issue 18, GEMM vs cuBLAS): do thread-block clusters (``num_ctas=2``) or
256-row tiles close the gap where the suite trails cuBLAS most?

probe_cublas_kernels.py showed what cuBLAS launches there: nvjet kernels with 320 x 128,
192 x 192 or 256 x 128 tiles, two consumer warp groups ("coop") and 1 x 2 or 2 x 1 clusters.
gemm_tma's space has neither clusters nor 256-row tiles (and triton 3.6 warp-specializes no
128-row tile). This probe launches gemm_tma's own persistent kernel with ``num_ctas`` 1 and 2
(a cluster of two CTAs sharing each program's tile: Triton launches grid x num_ctas CTAs, so
the persistent grid is halved to keep one CTA per SM) over 128 x 128, 128 x 256 and 256 x 128
tiles, beside cuBLAS, on the shapes where the suite is furthest behind and two it matches.

    python3 experiments/device/probe_gemm_clusters.py   # writes $OUT/probe_gemm_clusters.jsonl

Outputs checked against torch's, timed with costtune's graph timing; failures are rows."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402

from costtune.kernels import gemm_streamk as sk  # noqa: E402
from costtune.kernels import gemm_tma as gt  # noqa: E402
from costtune.kernels.base import KernelCall  # noqa: E402
from experiments.device import probe_gemm_occupancy as occ  # noqa: E402

SHAPES = [(1024, 5120, 5120), (1024, 5120, 13824), (3072, 3072, 3072), (5120, 5120, 5120),
          (1000, 1000, 1000), (4096, 4096, 4096), (2048, 4096, 4096)]
TILES = [(128, 128, 64), (128, 256, 64), (256, 128, 64)]


@dataclasses.dataclass
class ClusterCall(KernelCall):
    num_ctas: int = 1

    def run(self) -> None:
        self.fn[self.grid](*self.args, **self.kwargs, num_warps=self.num_warps,
                           num_stages=self.num_stages, num_ctas=self.num_ctas)


def configs() -> list[dict]:
    out = []
    for (bm, bn, bk), w, s, ctas in itertools.product(TILES, (4, 8), (3, 4, 5), (1, 2)):
        c = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "WARP_SPECIALIZE": 0,
             "EPILOGUE_SUBTILE": 0, "num_warps": w, "num_stages": s, "num_ctas": ctas}
        # Shared memory per CTA: a cluster splits the tile between its CTAs.
        if gt.tma_shared_bytes(c) // ctas + 1024 <= 232448 and bm * bn // (32 * w) <= 256 * ctas:
            out.append(c)
    return out


def make_call(inputs: dict, c: dict) -> ClusterCall:
    (call,) = gt.kernel_calls(inputs, {k: v for k, v in c.items() if k != "num_ctas"})
    m, n = call.args[3], call.args[4]
    programs = gt.NUM_SMS // c["num_ctas"]
    tiles = triton.cdiv(m, c["BLOCK_M"]) * triton.cdiv(n, c["BLOCK_N"])
    return ClusterCall(fn=call.fn, grid=(min(programs, tiles),), args=call.args,
                       kwargs={**call.kwargs, "NUM_SMS": programs}, num_warps=call.num_warps,
                       num_stages=call.num_stages, num_ctas=c["num_ctas"])


def main() -> None:
    from costtune.measure.bench import graph_bench

    out = os.path.join(os.environ.get("OUT", "/tmp"), "probe_gemm_clusters.jsonl")
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "commit": os.environ.get("COSTTUNE_COMMIT", "?")}
    start = time.time()
    for m, n, k in SHAPES:
        inputs = sk.make_inputs({"M": m, "N": n, "K": k}, "float16", device="cuda")
        a, b = inputs["a"], inputs["b"]
        ref = a @ b
        cublas = graph_bench(lambda a=a, b=b: a @ b)
        best: dict[int, dict] = {}
        for c in configs():
            rec = {"shape": f"{m}x{n}x{k}", **c, "cublas_ms": cublas, **env}
            rec.update(occ.checked_time(lambda c=c, x=inputs: make_call(x, c), ref, cublas))
            if rec["status"] == "ok" and rec["vs_cublas"] > best.get(c["num_ctas"], {}).get(
                    "vs_cublas", 0):
                best[c["num_ctas"]] = rec
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")
        print(f"{m}x{n}x{k}: cuBLAS {cublas:.4f} ms; " + "; ".join(
            f"num_ctas={i} {r['vs_cublas']:.3f}x ({r['BLOCK_M']}x{r['BLOCK_N']} "
            f"w{r['num_warps']} s{r['num_stages']})" for i, r in sorted(best.items()))
            + f" [{time.time() - start:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
