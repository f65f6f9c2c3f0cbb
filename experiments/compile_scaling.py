"""How does compiling scale with processes on this host? The collector's precompile of one
workload's configs with P = 8, 16, 32, ... pool processes, each with a fresh Triton cache.

A GPU worker of the Dask collection waits for its workload's compiles; whether two GPU workers,
each with its own pool, compile twice as fast as one depends on the host's cores (hyperthreads
share a core). GPU host only (the pool workers bind Triton's CUDA driver). Writes
experiments/results/compile_scaling.md.

    PYTHONPATH=. python3 experiments/compile_scaling.py --procs 8,16,32 --out DIR
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", default="8,16,32", help="pool sizes to try")
    ap.add_argument("--configs", type=int, default=96, help="configs compiled per pool size")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    import torch

    from costtune.build.pool import shutdown_pool
    from costtune.build.workload import precompile
    from costtune.env import cpu_topology, environment
    from costtune.kernels import get_family
    from costtune.types import Status, Workload

    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU (pool workers compile through Triton's CUDA driver)")
    workload = Workload("gemm", {"M": 512, "N": 4608, "K": 3584}, "float16")
    fam = get_family(workload.kernel)
    space = fam.config_space(workload.sizes)
    procs = [int(p) for p in args.procs.split(",") if p]
    sample = space.sample(args.configs + max(procs), seed=0)
    measured, warm = sample[:args.configs], sample[args.configs:]
    inputs = fam.make_inputs(workload.sizes, workload.dtype, device="cuda")
    rows = []
    with tempfile.TemporaryDirectory(prefix="compile_scaling_") as tmp:
        for p in procs:
            os.environ["TRITON_CACHE_DIR"] = f"{tmp}/triton_{p}"  # spawned workers inherit it
            shutdown_pool(wait=True)
            t0 = time.perf_counter()
            precompile(workload, warm[:p], inputs, workers=p)  # start the pool, one each
            t1 = time.perf_counter()
            res = precompile(workload, measured, inputs, workers=p)
            t2 = time.perf_counter()
            ok = sum(r.status is Status.OK for r in res.values())
            rows.append((p, t1 - t0, t2 - t1, ok))
            print(f"{p} processes: start + {p} warm-up compiles {t1 - t0:.1f} s; "
                  f"{len(measured)} configs in {t2 - t1:.1f} s ({ok} ok)", flush=True)
        shutdown_pool(wait=True)
    env = environment()
    topo = cpu_topology()
    base = rows[0][2]
    lines = [
        "# Compile throughput vs pool processes (GPU host)", "",
        f"The collector's precompile of {args.configs} configs of {workload.id} (seeded sample "
        "of its space), each pool size with a fresh Triton cache, after the pool has started "
        "and compiled one other config per process.", "",
        "| processes | start + warm-up s | compile s | configs/s | speed-up vs first |",
        "|---:|---:|---:|---:|---:|",
        *(f"| {p} | {s:.1f} | {c:.1f} | {args.configs / c:.1f} | {base / c:.2f}x |"
          for p, s, c, _ in rows), "",
        f"- CPU: {topo['logical']} usable logical CPUs on {topo['physical']} physical cores "
        "(sysfs topology as the host reports it)",
        f"- host {env['hostname']}, GPU {env['gpu']}, driver {env['driver']}, torch "
        f"{env['torch']}, triton {env['triton']}, costtune {env['costtune_commit']}, "
        f"{env['date']}",
        f"- command: `{shlex.join(['python3', *sys.argv])}`", "",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compile_scaling.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
