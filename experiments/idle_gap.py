"""Does a config's measured time depend on how long the GPU idled before it was timed?

The 2-GPU Dask run's rows are noisier than a 1-GPU run's (experiments/NOTES.md, fifth
session); one candidate is the GPU's clocks: with more CPU load the timing process leaves the
GPU idle longer between configs, and a 20-rep graph of a 5 us kernel lasts about a millisecond,
too short to wait out a clock ramp. This times the same configs on one GPU under five
conditions, interleaved in random order and repeated: right after the previous timing (as the
runner does), after 10 ms and 100 ms of host sleep, and each of the first and last with
``warm_ms=10`` (10 ms of flush-buffer writes queued just before the replays). Kernels are
compiled before any timing. Writes ``idle_gap.{md,csv}`` and ``idle_gap_rows.parquet``.

    python experiments/idle_gap.py --out DIR        # on a GPU
    python experiments/idle_gap.py --analyze DIR    # the report again, CPU only
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shlex
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"
# Three of the tiny softmaxes whose rows moved most between the 1- and 2-GPU Dask runs, and
# three larger kernels of both families (dask_scaling.py's workloads).
WORKLOADS = ["softmax_rows256_cols91_float16", "softmax_rows8_cols1000_float16",
             "softmax_rows512_cols512_float16", "softmax_rows4096_cols16384_float16",
             "gemm_M768_N768_K768_float16", "gemm_M512_N4608_K3584_float16"]
CONDITIONS = {"now": (0.0, 0.0), "idle10": (0.010, 0.0), "idle100": (0.100, 0.0),
              "now+warm10": (0.0, 10.0), "idle100+warm10": (0.100, 10.0)}


def collect(args, out: Path) -> None:
    import torch

    from costtune.collect import suite_workloads
    from costtune.compile import precompile, shutdown_pool
    from costtune.kernels import get_family
    from costtune.measure.gpu import make_flush_buffer, time_graph
    from costtune.types import Status

    pool = {w.id: w for k in ("gemm", "softmax") for w in suite_workloads(k, "test")}
    work = []
    for wid in WORKLOADS:
        w = pool[wid]
        fam = get_family(w.kernel)
        inputs = fam.make_inputs(w.sizes, w.dtype, device="cuda")
        configs = fam.config_space(w.sizes).sample(args.configs, seed=0)
        done = precompile(w, configs, inputs, workers=len(os.sched_getaffinity(0)))
        configs = [c for c in configs if done[c.key].status is Status.OK]
        work.append((w, fam, inputs, configs))
    shutdown_pool(wait=True)
    flush = make_flush_buffer()
    rng = random.Random(args.seed)
    rows = []
    for rep in range(args.repeats):
        for w, fam, inputs, configs in work:
            for c in rng.sample(configs, len(configs)):
                try:
                    fam.launch(inputs, c)  # loads the kernel
                    torch.cuda.synchronize()
                except Exception as exc:  # resources: not a timing question
                    print(f"{w.id} {c.key}: {exc}", flush=True)
                    continue
                for cond in rng.sample(list(CONDITIONS), len(CONDITIONS)):
                    sleep_s, warm_ms = CONDITIONS[cond]
                    torch.cuda.synchronize()
                    time.sleep(sleep_s)
                    times, method = time_graph(lambda c=c, f=fam, x=inputs: f.launch(x, c),
                                               reps=args.reps, flush=flush, warm_ms=warm_ms)
                    rows.append({"workload": w.id, "config": c.key, "condition": cond,
                                 "repeat": rep, "time_ms": statistics.median(times),
                                 "min_ms": min(times), "max_ms": max(times), "timing": method})
            pd.DataFrame(rows).to_parquet(out / "idle_gap_rows.parquet", index=False)
        print(f"repeat {rep} done", flush=True)


def analyze(folder: Path) -> str:
    rows = pd.read_parquet(folder / "idle_gap_rows.parquet")
    meta = json.loads((folder / "idle_gap_meta.json").read_text())
    t = rows.pivot_table(index=["workload", "config", "repeat"], columns="condition",
                         values="time_ms")
    ratio = np.log(t.div(t["now"], axis=0)).drop(columns="now")
    # Noise: the same config and condition in two repeats.
    noise = []
    for cond in CONDITIONS:
        per = rows[rows["condition"] == cond].pivot_table(index=["workload", "config"],
                                                          columns="repeat", values="time_ms")
        for a, b in itertools.combinations(per.columns, 2):
            d = np.log(per[a] / per[b]).dropna()
            noise.append({"condition": cond, "workload": "all", "p90": d.abs().quantile(0.9)})
            for wid, g in d.groupby(level="workload"):
                noise.append({"condition": cond, "workload": wid, "p90": g.abs().quantile(0.9)})
    noise = pd.DataFrame(noise).groupby(["workload", "condition"])["p90"].median().unstack()
    shift = ratio.groupby(level="workload").median()
    base = t["now"].groupby(level="workload").median()
    lines = ["# Idle gap: does a config's time depend on how long the GPU idled before it?", "",
             f"- command: `{meta['command']}`",
             f"- date: {meta['date']}; GPU {meta['gpu']}; torch {meta['torch']}; triton "
             f"{meta['triton']}; costtune {meta['commit']}",
             f"- {rows['workload'].nunique()} workloads x {meta['configs']} sampled configs, "
             f"{meta['repeats']} repeats, reps {meta['reps']} per timing; conditions "
             "(host sleep before the timing, GPU busy just before the replays): "
             + ", ".join(f"{k} ({s * 1e3:.0f} ms, {w:.0f} ms)" for k, (s, w)
                         in CONDITIONS.items()), "",
             "Shift: median over configs and repeats of ln(t_condition / t_now) (the same "
             "config, same repeat). Noise: p90 over configs of |ln(t_repeat_i / t_repeat_j)| "
             "for one condition, median over pairs of repeats.", "",
             "| workload | t_now ms | " + " | ".join(f"shift {c}" for c in ratio.columns)
             + " | " + " | ".join(f"noise {c}" for c in CONDITIONS) + " |",
             "|---|---|" + "---|" * (len(ratio.columns) + len(CONDITIONS))]
    for wid in [*WORKLOADS, "all"]:
        if wid not in noise.index:
            continue
        s = shift.loc[wid] if wid in shift.index else ratio.median()
        tn = f"{base[wid]:.4f}" if wid in base.index else ""
        lines.append(f"| {wid} | {tn} | " + " | ".join(f"{s[c]:+.2%}" for c in ratio.columns)
                     + " | " + " | ".join(f"{noise.loc[wid, c]:.2%}" for c in CONDITIONS)
                     + " |")
    text = "\n".join(lines) + "\n"
    (folder / "idle_gap.md").write_text(text)
    pd.concat({"shift": shift, "noise": noise}, axis=1).to_csv(folder / "idle_gap.csv")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--configs", type=int, default=16, help="sampled configs per workload")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10, help="reps per timing (the runner's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--analyze", type=Path, default=None, help="re-report a finished run")
    args = ap.parse_args()
    if args.analyze:
        print(analyze(args.analyze))
        return
    import torch
    import triton

    from costtune.env import environment

    if not torch.cuda.is_available():
        raise SystemExit("idle_gap.py times on a GPU; --analyze DIR re-reports on CPU")
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment()
    meta = {"command": shlex.join(["python", *sys.argv]),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "commit": env.get("costtune_commit") or "?",
            "configs": args.configs, "repeats": args.repeats, "reps": args.reps}
    (args.out / "idle_gap_meta.json").write_text(json.dumps(meta, indent=1))
    collect(args, args.out)
    print(analyze(args.out))


if __name__ == "__main__":
    main()
