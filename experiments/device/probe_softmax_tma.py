"""Which softmax_tma configs fault on the GPU ("CUDA error: misaligned address" in the first
collection, 2026-12-05): each config runs in its own process (a fault loses the CUDA
context), on 4096 x 4096 fp16 and 1000-column rows, and is checked against the reference.

    PYTHONPATH=. python3 experiments/device/probe_softmax_tma.py --out $OUT [--jobs 8]

Writes $OUT/probe_softmax_tma.jsonl: one line per (problem, config) with status ("ok",
"wrong", or the error's first line).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHILD = """
import json, sys, torch
from costtune.kernels import softmax_tma as st, relative_error
from costtune.measure.gpu import make_flush_buffer, time_graph
p, c = json.loads(sys.argv[1]), json.loads(sys.argv[2])
inputs = st.make_inputs(p, "float16", seed=0, device="cuda")
out = st.launch(inputs, c)
torch.cuda.synchronize()
err = relative_error(out, st.reference(inputs))
# Timed as the collection times it: CUDA-graph replays with the L2 flushed.
times, _ = time_graph(lambda: st.launch(inputs, c), reps=3, flush=make_flush_buffer("cuda"))
torch.cuda.synchronize()
print(json.dumps({"status": "ok" if err <= st.TOLERANCE["float16"] else "wrong", "err": err,
                  "ms": min(times)}))
"""


def run(problem: dict, config: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(problem), json.dumps(config)],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode == 0:
        return {**json.loads(proc.stdout.strip().splitlines()[-1]), "problem": problem,
                "config": config}
    lines = [ln for ln in proc.stderr.splitlines() if "Error" in ln or "error" in ln]
    return {"status": (lines[-1] if lines else proc.stderr[-200:])[:200], "problem": problem,
            "config": config}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--full", action="store_true",
                    help="every config of 4096 x 4096's space, timed as collected")
    args = ap.parse_args()
    if args.full:
        from costtune.kernels import softmax_tma as st

        p = {"rows": 4096, "cols": 4096}
        cases = [(p, c.as_dict()) for c in st.config_space(p)]
    else:
        cases = [({"rows": 4096, "cols": 4096}, {"BLOCK_N": bn, "ROWS_PER_PROG": r,
                                                 "num_warps": w, "num_stages": s})
                 for bn, r, w, s in itertools.product((16, 32, 64, 128, 256), (1, 2, 8),
                                                      (1, 4), (1, 2))]
        cases += [({"rows": 8, "cols": 1000}, {"BLOCK_N": bn, "ROWS_PER_PROG": 1, "num_warps": 1,
                                               "num_stages": 1}) for bn in (16, 64, 256)]
    args.out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool, open(args.out / "probe_softmax_tma.jsonl",
                                                      "w") as f:
        for r in pool.map(lambda pc: run(*pc), cases):
            f.write(json.dumps(r) + "\n")
            f.flush()
            print(r["status"], r["problem"], r["config"], flush=True)


if __name__ == "__main__":
    main()
