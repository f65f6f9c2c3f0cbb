"""Device probe (issue 18, GEMM vs cuBLAS): does gemm_streamk gain from two persistent programs
per SM on the shapes where it trails cuBLAS?

With one program per SM a tile's epilogue (C store) and the next tile's pipeline fill leave the
tensor cores idle; cuBLAS's ping-pong kernels hide that with two consumer warp groups taking
turns. Two co-resident programs per SM (a config whose shared memory fits twice in an SM's
228 KB) are the coarse version: while one stores, the other computes. The persistent grid then
has 2 x 132 slots, and stream-K shares out the last partial wave of those.

    python3 experiments/device/probe_gemm_occupancy.py   # writes $OUT/probe_gemm_occupancy.jsonl

Every fp16 workload of gemm_streamk's suites with every dim >= 1000: its whole space with one
program per SM (as shipped) and each config that fits twice with two, each output checked
against torch's, then timed with costtune's graph timing (CUDA-graph replay, L2 flushed,
median) beside `a @ b` (cuBLAS) in the same process. Compiles are warmed first in forked
workers. Failures are recorded as rows."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from costtune.kernels import gemm_streamk as sk  # noqa: E402
from costtune.kernels.base import KernelCall  # noqa: E402

SMEM_PER_SM = 228 * 1024
SHAPES = [(s["M"], s["N"], s["K"]) for s in sk.TEST_SHAPES + sk.TRAIN_SHAPES
          if min(s.values()) >= 1000]
WARM = [(1024, 1024, 1024), (1000, 1000, 1000)]  # both integer specializations (%16)


def fits_twice(c: dict) -> bool:
    return 2 * (sk.tma_shared_bytes(c) + 1024) <= SMEM_PER_SM


def calls(m: int, n: int, k: int) -> list[tuple[int, dict]]:
    space = [c if isinstance(c, dict) else c.as_dict()
             for c in sk.config_space({"M": m, "N": n, "K": k})]
    return [(1, c) for c in space] + [(2, c) for c in space if fits_twice(c)]


def call_of(inputs: dict, c: dict, per_sm: int) -> KernelCall:
    """gemm_streamk's launch with ``per_sm`` programs per SM (1: exactly kernel_calls')."""
    (call,) = sk.kernel_calls(inputs, c)
    if per_sm == 1:
        return call
    slots = per_sm * sk.NUM_SMS
    a, b = inputs["a"], inputs["b"]
    problem = {"M": a.shape[0], "N": b.shape[1], "K": a.shape[1]}
    w = sk.split_work(problem, c, num_sms=slots)
    work, count = sk.workspace(a.device, max(w["sk_tiles"], 1) * c["BLOCK_M"] * c["BLOCK_N"],
                               max(w["sk_tiles"], 1))
    args = (*call.args[:3], work, count, *call.args[5:8], w["dp_tiles"], w["sk_iters"])
    grid = (min(slots, w["dp_tiles"]) if w["dp_tiles"] else w["sk_programs"],)
    return KernelCall(fn=call.fn, grid=grid, args=args,
                      kwargs={**call.kwargs, "NUM_SMS": slots},
                      num_warps=call.num_warps, num_stages=call.num_stages)


def checked_time(make_call, ref: torch.Tensor, cublas_ms: float) -> dict:
    """Build the call, run it once and check C against ``ref`` (max abs error < 0.1), then
    time it (costtune's graph timing): ``status`` ok / wrong_result / the exception's name
    (failures are data), ``max_err``, ``ms`` and ``vs_cublas`` where it ran."""
    from costtune.measure.bench import graph_bench

    try:
        call = make_call()
        call.run()
        torch.cuda.synchronize()
        err = (call.args[2].base.float() - ref.float()).abs().max().item()
        if not err < 0.1:
            return {"max_err": err, "status": "wrong_result"}
        ms = graph_bench(call.run)
        return {"max_err": err, "ms": ms, "vs_cublas": cublas_ms / ms, "status": "ok"}
    except Exception as e:  # failures are data
        return {"status": type(e).__name__, "error": str(e)[-300:]}


def _warm(jobs: list[tuple[int, dict]]) -> int:
    done = 0
    for m, n, k in WARM:
        inputs = sk.make_inputs({"M": m, "N": n, "K": k}, "float16", device="cuda")
        for per_sm, c in jobs:
            try:
                call_of(inputs, c, per_sm).run()
                done += 1
            except Exception:  # failures are measured (and recorded) in the main process
                pass
    torch.cuda.synchronize()
    return done


def warm(workers: int = 16) -> None:
    jobs = sorted({(p, tuple(sorted(c.items()))) for s in WARM for p, c in calls(*s)})
    jobs = [(p, dict(c)) for p, c in jobs]
    shares = [jobs[i::workers] for i in range(workers)]
    with mp.get_context("fork").Pool(workers) as pool:
        print(f"warmed {sum(pool.map(_warm, shares))} launches", flush=True)


def main() -> None:
    from costtune.measure.bench import graph_bench

    out = os.path.join(os.environ.get("OUT", "/tmp"), "probe_gemm_occupancy.jsonl")
    start = time.time()
    warm()  # before this process touches CUDA: the workers are forked
    print(f"warm {time.time() - start:.0f} s", flush=True)
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "commit": os.environ.get("COSTTUNE_COMMIT", "?")}
    for m, n, k in SHAPES:
        inputs = sk.make_inputs({"M": m, "N": n, "K": k}, "float16", device="cuda")
        a, b = inputs["a"], inputs["b"]
        ref = a @ b
        cublas = graph_bench(lambda a=a, b=b: a @ b)
        best = {}
        for per_sm, c in calls(m, n, k):
            rec = {"shape": f"{m}x{n}x{k}", "per_sm": per_sm, **c, "cublas_ms": cublas, **env}
            rec.update(checked_time(lambda c=c, p=per_sm, i=inputs: call_of(i, c, p),
                                    ref, cublas))
            if rec["status"] == "ok" and rec["vs_cublas"] > best.get(per_sm, {}).get(
                    "vs_cublas", 0):
                best[per_sm] = rec
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")
        print(f"{m}x{n}x{k}: cuBLAS {cublas:.4f} ms; " + "; ".join(
            f"{p}/SM {r['vs_cublas']:.3f}x " + ",".join(
                str(r[x]) for x in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "EPILOGUE_SUBTILE",
                                    "num_warps", "num_stages"))
            for p, r in sorted(best.items())) + f" [{time.time() - start:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
