"""Device probe (issue 18, GEMM vs cuBLAS): would gemm_streamk share out more remainders at a
lower SK_GAIN?

gemm_streamk shares the last partial wave out along K only when that cuts the busiest SM's K
iterations by SK_GAIN (1.2, chosen on the train suite in the thirteenth session). 5120^3 with
128 x 256 tiles (800 tiles: six waves and 8 tiles) gains 1.15 and runs a seventh, nearly
empty wave. This times every config whose launch changes at SK_GAIN 1.1, 1.05 or 1.0 beside
the shipped launch (1.2), the whole space at 1.2, and cuBLAS, in one process: 22 fp16
workloads with every dim >= 1000.

    python3 experiments/device/probe_streamk_gain.py   # writes $OUT/probe_streamk_gain.jsonl

Each (shape, gain, config): output checked against torch's, then timed with costtune's graph
timing (CUDA-graph replay, L2 flushed, median). Compiles are warmed first in forked workers
(the gain is a host-side decision: one kernel per config for every gain)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from costtune.kernels import gemm_streamk as sk  # noqa: E402
from experiments.device import probe_gemm_occupancy as occ  # noqa: E402

GAINS = (1.2, 1.1, 1.05)
SHIPPED = sk.SK_GAIN


def launches(m: int, n: int, k: int) -> list[tuple[float, dict]]:
    """(gain, config) for the whole space at the shipped gain and, at each other gain, the
    configs whose split differs from the shipped one's."""
    problem = {"M": m, "N": n, "K": k}
    space = [c if isinstance(c, dict) else c.as_dict() for c in sk.config_space(problem)]
    out = [(SHIPPED, c) for c in space]
    for gain in GAINS[1:]:
        for c in space:
            if split_at(problem, c, gain) != split_at(problem, c, SHIPPED):
                out.append((gain, c))
    return out


def split_at(problem: dict, c: dict, gain: float) -> dict:
    old, sk.SK_GAIN = sk.SK_GAIN, gain
    try:
        return sk.split_work(problem, c)
    finally:
        sk.SK_GAIN = old


def main() -> None:
    from costtune.measure.bench import graph_bench

    out = os.path.join(os.environ.get("OUT", "/tmp"), "probe_streamk_gain.jsonl")
    start = time.time()
    occ.warm()  # the same kernels as the occupancy probe's one-per-SM launches
    print(f"warm {time.time() - start:.0f} s", flush=True)
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "commit": os.environ.get("COSTTUNE_COMMIT", "?")}
    for m, n, k in occ.SHAPES:
        inputs = sk.make_inputs({"M": m, "N": n, "K": k}, "float16", device="cuda")
        a, b = inputs["a"], inputs["b"]
        ref = a @ b
        cublas = graph_bench(lambda a=a, b=b: a @ b)
        best: dict[float, float] = {}
        for gain, c in launches(m, n, k):
            rec = {"shape": f"{m}x{n}x{k}", "gain": gain, **c, "cublas_ms": cublas, **env,
                   **{f"split_{x}": v for x, v in split_at({"M": m, "N": n, "K": k}, c,
                                                           gain).items()}}
            old, sk.SK_GAIN = sk.SK_GAIN, gain
            try:
                rec.update(occ.checked_time(lambda c=c, i=inputs: sk.kernel_calls(i, c)[0], ref,
                                            cublas))
            finally:
                sk.SK_GAIN = old
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            if rec.get("status") == "ok":
                best[gain] = max(best.get(gain, 0.0), rec["vs_cublas"])
        shipped = best.get(SHIPPED, 0.0)
        print(f"{m}x{n}x{k}: cuBLAS {cublas:.4f} ms; shipped {shipped:.3f}x; " + "; ".join(
            f"{g:g}: best {max(shipped, v):.3f}x" for g, v in sorted(best.items())
            if g != SHIPPED) + f" [{time.time() - start:.0f} s]", flush=True)


if __name__ == "__main__":
    main()
