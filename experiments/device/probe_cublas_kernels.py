"""Device probe (issue 18, GEMM vs cuBLAS): which kernels does cuBLAS launch for ``a @ b`` on
the shapes where the suite trails it most?

The composite-tile probe (probe_gemm_wide.py) could not test whether those shapes lose to wave
quantization: two accumulators per program ran at 0.41-0.67x cuBLAS on every shape. cuBLAS's
sm90 kernel names carry their tile, cluster and split/stream-K choice
(``..._tilesize128x256x64_cluster2x1x1_..._execute_segment_k_off...``), so the kernels it picks
say what it does there that the suite's configs do not.

    python3 experiments/device/probe_cublas_kernels.py  # writes $OUT/probe_cublas_kernels.jsonl

Every fp16 shape of probe_gemm_occupancy.SHAPES (the GEMM suites' shapes with every dim >= 1000):
the CUDA kernels torch's profiler records for 20 replays of ``a @ b`` (names, launches per
matmul, mean device time), beside costtune's graph timing of the same matmul."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402

from experiments.device import probe_gemm_occupancy as occ  # noqa: E402

REPS = 20


def cublas_kernels(a: torch.Tensor, b: torch.Tensor) -> list[dict]:
    """Kernels launched by REPS matmuls: name, launches per matmul, mean device time (us)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            a @ b
        torch.cuda.synchronize()
    out = []
    for ev in prof.key_averages():
        if ev.device_type.name != "CUDA" or ev.count == 0:
            continue
        total = getattr(ev, "device_time_total", None) or ev.cuda_time_total
        out.append({"kernel": ev.key, "per_matmul": ev.count / REPS,
                    "mean_us": total / ev.count})
    return out


def main() -> None:
    from costtune.measure.bench import graph_bench

    out = os.path.join(os.environ.get("OUT", "/tmp"), "probe_cublas_kernels.jsonl")
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "cublas": torch.backends.cuda.preferred_blas_library()
           .name, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "commit": os.environ.get("COSTTUNE_COMMIT", "?")}
    for m, n, k in occ.SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        rec = {"shape": f"{m}x{n}x{k}", "graph_ms": graph_bench(lambda a=a, b=b: a @ b),
               "kernels": cublas_kernels(a, b), **env}
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        names = "; ".join(f"{x['kernel'][:110]} x{x['per_matmul']:g} {x['mean_us']:.1f} us"
                          for x in rec["kernels"])
        print(f"{rec['shape']}: {rec['graph_ms']:.4f} ms: {names}", flush=True)


if __name__ == "__main__":
    main()
