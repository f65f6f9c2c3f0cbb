"""Device probe (issue 18, GEMM vs cuBLAS): does the TMA persistent kernel gain from tiles
outside its space (256x128 at 8 warps) on the shapes where it trails cuBLAS most?

    python3 experiments/device/probe_gemm_tiles.py   # writes $OUT/probe_gemm_tiles.jsonl

Each (shape, config): output checked against torch's, then timed with costtune's graph
timing (CUDA-graph replay, L2 flushed, median) beside `a @ b` (cuBLAS) in the same process.
Failures (compile, out of resources, wrong result) are recorded as rows."""

from __future__ import annotations

import itertools
import json
import os
import time

import torch

from costtune.kernels import gemm_tma
from costtune.measure.bench import graph_bench

SHAPES = [(1024, 5120, 5120), (3072, 3072, 3072), (4096, 4096, 4096), (2048, 11008, 4096),
          (8192, 8192, 8192)]
TILES = [(128, 256, 64, 8), (256, 128, 64, 8)]


def configs():
    for (bm, bn, bk, w), s, ws, sub in itertools.product(TILES, (3, 4), (0, 1), (0, 1)):
        yield {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "WARP_SPECIALIZE": ws,
               "EPILOGUE_SUBTILE": sub, "num_warps": w, "num_stages": s}


def main() -> None:
    out = os.path.join(os.environ.get("OUT", "/tmp"), "probe_gemm_tiles.jsonl")
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "commit": os.environ.get("COSTTUNE_COMMIT", "?")}
    for m, n, k in SHAPES:
        inputs = gemm_tma.make_inputs({"M": m, "N": n, "K": k}, "float16", device="cuda")
        a, b = inputs["a"], inputs["b"]
        ref = a @ b
        cublas = graph_bench(lambda a=a, b=b: a @ b)
        ok = []
        for c in configs():
            rec = {"shape": f"{m}x{n}x{k}", **c, "cublas_ms": cublas, **env}
            try:
                (call,) = gemm_tma.kernel_calls(inputs, c)
                call.run()
                torch.cuda.synchronize()
                got = call.args[2].base
                err = (got.float() - ref.float()).abs().max().item()
                rec["max_err"] = err
                if not err < 0.1:
                    rec["status"] = "wrong_result"
                else:
                    rec["ms"] = graph_bench(call.run)
                    rec["vs_cublas"] = cublas / rec["ms"]
                    rec["status"] = "ok"
                    ok.append(rec)
            except Exception as e:  # failures are data
                rec["status"] = type(e).__name__
                rec["error"] = str(e)[-300:]
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")
        best = max(ok, key=lambda r: r["vs_cublas"], default=None)
        print(f"{m}x{n}x{k}: cuBLAS {cublas:.4f} ms; ok {len(ok)}; best "
              + ("none" if best is None else f"{best['vs_cublas']:.3f}x " + " ".join(
                  f"{x}={best[x]}" for x in ("BLOCK_M", "BLOCK_N", "WARP_SPECIALIZE",
                                             "EPILOGUE_SUBTILE", "num_warps", "num_stages"))),
              flush=True)


if __name__ == "__main__":
    main()
