"""On the H200: what ``learn=True`` costs a program that tunes one kernel at several shapes in
a row (tutorial 03's 328-config GEMM list through ``costtune.autotune(top_k=8)``). One mode per
process (``--mode off`` / ``on``), each with its own fresh Triton cache and, for ``on``, a
fresh ``COSTTUNE_HOME``: per call the wall seconds (the launch that tunes, synchronized), then
how long the process waits at the end for the model update still running (``exit_wait_s``).
One JSON line per call in ``$OUT/learn_latency.jsonl``.

    python3 experiments/device/check_learn_latency_h200.py --out $OUT --mode off
    COSTTUNE_HOME=$OUT/home python3 experiments/device/check_learn_latency_h200.py \
        --out $OUT --mode on
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

SHAPES = [{"M": 4096, "N": 4096, "K": 4096}, {"M": 2048, "N": 11008, "K": 4096},
          {"M": 1024, "N": 5120, "K": 5120}, {"M": 4096, "N": 14336, "K": 4096},
          {"M": 512, "N": 8192, "K": 8192}]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mode", choices=("off", "on"), required=True)
    args = ap.parse_args()
    import torch
    from user_kernels import STYLES, relative_error

    import costtune
    from experiments.device.hook_user_spaces_h200 import configs_of

    args.out.mkdir(parents=True, exist_ok=True)
    style = STYLES["tutorial03_matmul"]
    tuner = costtune.autotune(configs_of("tutorial03_matmul"), key=list(style.key),
                              top_k=8, learn=args.mode == "on")(style.kernel)
    began = time.perf_counter()
    for i, problem in enumerate(SHAPES):
        inputs = style.make_inputs(problem, device="cuda", dtype=style.gpu_dtype)
        start = time.perf_counter()
        out = style.launch(tuner, inputs)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        last = tuner.early_config_prune.last
        record = {"mode": args.mode, "call": i, "problem": problem, "seconds": seconds,
                  "benchmarked": len(tuner.configs_timings), "ranked_by": last.model,
                  "rel_err": relative_error(out, style.reference(inputs))}
        with (args.out / "learn_latency.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)
    calls_s = time.perf_counter() - began
    start = time.perf_counter()
    if tuner.learner is not None:
        tuner.learner.wait()
    record = {"mode": args.mode, "calls_s": calls_s,
              "exit_wait_s": time.perf_counter() - start,
              "updated": [str(p) for p in tuner.learner.updated] if tuner.learner else []}
    with (args.out / "learn_latency.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
