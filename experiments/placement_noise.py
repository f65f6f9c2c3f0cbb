"""Does a config's measured time depend on what the process measured before it?

A Dask worker measures its share of the queue one workload after another in one process, so a
workload's buffers reuse blocks the earlier workloads freed, and two collections that split the
queue differently (1 GPU vs 2) place the same workload's buffers differently. This experiment
measures the same target workloads in fresh child processes on one GPU under four conditions,
repeated and interleaved:

- history ``none``: the targets only; ``prefix``: two other workloads measured first (drawn
  anew per repeat), as a worker that got other tasks first;
- ``settle`` on (the runner's default, ``costtune.measure.gpu.settle_memory``) or off (the
  allocator's cache kept between workloads, as the runner did before).

Pairs of passes with the same history give the noise between two identical runs; pairs with
different histories give it plus whatever the history adds. Kernels come from a Triton cache
filled before the passes, so no compile runs beside the timings. Writes
``placement_noise.{md,csv}`` and the passes' rows (``placement_noise_rows.parquet``).

    python experiments/placement_noise.py --out DIR          # on a GPU
    python experiments/placement_noise.py --analyze DIR      # the report again, CPU only
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"
# Chosen from the 52 workloads of dask_scaling.py: the four tiny softmaxes whose rows moved most
# between the 1- and 2-GPU runs of 2026-11-29 (call 2), and four larger kernels of both families.
TARGETS = ["softmax_rows256_cols91_float16", "softmax_rows8_cols1000_float16",
           "softmax_rows512_cols512_float16", "softmax_rows777_cols1234_float16",
           "softmax_rows4096_cols16384_float16", "gemm_M768_N768_K768_float16",
           "gemm_M512_N4608_K3584_float16", "gemm_M2048_N4096_K14336_float16"]
PREFIX_POOL = ["softmax_rows65536_cols256_float16", "softmax_rows1024_cols50257_float16",
               "gemm_M16_N28672_K4096_float16", "gemm_M5120_N5120_K5120_float16",
               "softmax_rows16_cols51200_float16", "gemm_M128_N3584_K3584_float16",
               "softmax_rows32768_cols3072_float16", "gemm_M1500_N2999_K777_float16"]
PREFIX_CONFIGS = 16


def workloads_by_id(ids: list[str]):
    from costtune.collect import suite_workloads

    pool = {w.id: w for k in ("gemm", "softmax") for s in ("test", "train")
            for w in suite_workloads(k, s)}
    missing = [i for i in ids if i not in pool]
    if missing:
        raise SystemExit(f"unknown workload ids: {missing}")
    return [pool[i] for i in ids]


def plan(repeats: int, seed: int) -> list[dict]:
    """The passes, interleaved so slow drift spreads over every condition."""
    rng = random.Random(seed)
    passes = []
    for r in range(repeats):
        prefix = rng.sample(PREFIX_POOL, 2)
        for settle, history in itertools.product((False, True), ("none", "prefix")):
            passes.append({"pass": len(passes), "repeat": r, "settle": settle,
                           "history": history, "prefix": prefix if history == "prefix" else []})
    return passes


def child(args) -> None:
    """One pass in this fresh process: the prefix workloads (rows dropped), then the targets."""
    import torch

    from costtune.collect import workload_configs
    from costtune.kernels import get_family
    from costtune.measure.gpu import measure_workload

    spec = {"pass": args.pass_id, "repeat": args.repeat, "settle": args.settle,
            "history": args.history}
    pointers = {}
    for w in workloads_by_id(args.prefix):
        measure_workload(w, workload_configs(w, max_configs=PREFIX_CONFIGS, seed=1),
                         workers=args.workers, settle=args.settle)
    rows = []
    for w in workloads_by_id(TARGETS):
        fam = get_family(w.kernel)
        make = fam.make_inputs

        def spy(*a, _make=make, _id=w.id, **k):  # where this workload's first input landed
            out = _make(*a, **k)
            pointers[_id] = next(iter(out.values())).data_ptr()
            return out

        fam.make_inputs = spy
        try:
            ms = measure_workload(w, workload_configs(w, max_configs=args.max_configs),
                                  workers=args.workers, settle=args.settle)
        finally:
            fam.make_inputs = make
        rows += [{**m.as_row(), **spec, "input_ptr": pointers.get(w.id)} for m in ms]
    torch.cuda.synchronize()
    pd.DataFrame(rows).to_parquet(args.child_out, index=False)


def pair_stats(rows: pd.DataFrame) -> pd.DataFrame:
    """Every pair of passes with the same ``settle``: |log t_a/t_b| over their common OK
    configs, and the spread of the per-workload median offsets."""
    ok = rows[rows["status"] == "ok"]
    wide = ok.pivot_table(index=["workload", "config"], columns="pass", values="time_ms")
    info = rows.drop_duplicates("pass").set_index("pass")
    out = []
    for a, b in itertools.combinations(sorted(info.index), 2):
        ia, ib = info.loc[a], info.loc[b]
        if ia["settle"] != ib["settle"]:
            continue
        if ia["history"] == ib["history"] == "none":
            kind = "same history (none, none)"
        elif ia["history"] == "none" or ib["history"] == "none":
            kind = "different (none, prefix)"
        else:
            kind = "different (two prefixes)"
        d = np.log(wide[a] / wide[b]).dropna()
        offsets = d.groupby(level="workload").median()
        ptr_a = rows[rows["pass"] == a].drop_duplicates("workload").set_index("workload")
        ptr_b = rows[rows["pass"] == b].drop_duplicates("workload").set_index("workload")
        same_ptr = (ptr_a["input_ptr"] == ptr_b["input_ptr"].reindex(ptr_a.index)).mean()
        out.append({"settle": bool(ia["settle"]), "kind": kind, "pass_a": a, "pass_b": b,
                    "configs": len(d), "p50_abs_log": d.abs().median(),
                    "p90_abs_log": d.abs().quantile(0.9),
                    "workload_offset_sd": offsets.std(),
                    "residual_p90": (d - d.groupby(level="workload").transform("median")
                                     ).abs().quantile(0.9),
                    "same_input_address": same_ptr})
    return pd.DataFrame(out)


def report(rows: pd.DataFrame, pairs: pd.DataFrame, meta: dict) -> str:
    table = (pairs.groupby(["settle", "kind"])
             .agg(pairs=("configs", "size"), configs=("configs", "median"),
                  p50=("p50_abs_log", "median"), p90=("p90_abs_log", "median"),
                  p90_max=("p90_abs_log", "max"), offset_sd=("workload_offset_sd", "median"),
                  residual_p90=("residual_p90", "median"),
                  same_address=("same_input_address", "mean"))
             .reset_index())
    lines = ["# Placement noise: does a row depend on what the process measured before?", "",
             f"- command: `{meta['command']}`",
             f"- date: {meta['date']}; GPU {meta['gpu']}; torch {meta['torch']}; triton "
             f"{meta['triton']}; costtune {meta['commit']}",
             f"- {rows['pass'].nunique()} passes, each a fresh process on one GPU: "
             f"{len(TARGETS)} target workloads x up to {meta['max_configs']} configs "
             "(reps 10, seed 0); `prefix` passes first measure 2 other workloads "
             f"({PREFIX_CONFIGS} configs each, rows dropped), drawn anew per repeat; kernels "
             "loaded from a Triton cache filled before the passes", "",
             "Per pair of passes with the same settle mode: |ln(t_a/t_b)| over the common OK "
             "configs (median over pairs of its p50 and p90), the SD of the per-workload "
             "median offsets, the p90 left after removing each workload's offset, and how "
             "often a workload's first input sat at the same address in both passes.", "",
             "| settle | pair kind | pairs | configs | p50 | p90 | p90 max | workload offset SD "
             "| residual p90 | same address |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {'on' if r.settle else 'off'} | {r.kind} | {r.pairs} | "
                     f"{r.configs:.0f} | {r.p50:.2%} | {r.p90:.2%} | {r.p90_max:.2%} | "
                     f"{r.offset_sd:.2%} | {r.residual_p90:.2%} | {r.same_address:.0%} |")
    lines.append("")
    for settle in (False, True):
        sub = table[table["settle"] == settle].set_index("kind")["p90"]
        same = sub.get("same history (none, none)", np.nan)
        diff = sub.drop("same history (none, none)", errors="ignore").median()
        lines.append(f"Settle {'on' if settle else 'off'}: p90 between passes of different "
                     f"histories {diff:.2%} vs {same:.2%} between identical histories "
                     f"(ratio {diff / same:.2f}).")
    return "\n".join(lines) + "\n"


def analyze(folder: Path) -> str:
    """The report from a run's folder: its rows (or the passes finished so far) and meta."""
    path = folder / "placement_noise_rows.parquet"
    rows = (pd.read_parquet(path) if path.exists() else
            pd.concat([pd.read_parquet(f) for f in sorted(folder.glob("pass*.parquet"))],
                      ignore_index=True))
    pairs = pair_stats(rows)
    meta = json.loads((folder / "placement_noise_meta.json").read_text())
    text = report(rows, pairs, meta)
    (folder / "placement_noise.md").write_text(text)
    pairs.to_csv(folder / "placement_noise.csv", index=False)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--max-configs", type=int, default=32)
    ap.add_argument("--workers", type=int, default=8, help="compile processes per pass")
    ap.add_argument("--seed", type=int, default=0, help="draws the prefixes")
    ap.add_argument("--analyze", type=Path, default=None, help="re-report a finished run")
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--pass-id", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--settle", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--history", help=argparse.SUPPRESS)
    ap.add_argument("--prefix", nargs="*", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.analyze:
        print(analyze(args.analyze))
        return
    if args.child_out:
        args.settle = bool(args.settle)
        child(args)
        return

    import torch
    import triton

    from costtune.collect import workload_configs
    from costtune.compile import precompile, shutdown_pool
    from costtune.env import environment
    from costtune.kernels import get_family

    if not torch.cuda.is_available():
        raise SystemExit("placement_noise.py measures on a GPU; --analyze DIR re-reports on CPU")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    meta = {"command": shlex.join(["python", *sys.argv]),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "commit": env.get("costtune_commit") or "?",
            "max_configs": args.max_configs}
    (out / "placement_noise_meta.json").write_text(json.dumps(meta, indent=1))
    os.environ.setdefault("TRITON_CACHE_DIR", str(out / "triton_cache"))
    t = time.perf_counter()
    cores = len(os.sched_getaffinity(0))
    for w in workloads_by_id(TARGETS):
        inputs = get_family(w.kernel).make_inputs(w.sizes, w.dtype)
        precompile(w, workload_configs(w, max_configs=args.max_configs), inputs, workers=cores)
    for w in workloads_by_id(PREFIX_POOL):
        inputs = get_family(w.kernel).make_inputs(w.sizes, w.dtype)
        precompile(w, workload_configs(w, max_configs=PREFIX_CONFIGS, seed=1), inputs,
                   workers=cores)
    shutdown_pool(wait=True)
    print(f"filled the Triton cache in {time.perf_counter() - t:.1f} s", flush=True)
    parts = []
    for p in plan(args.repeats, args.seed):
        path = out / f"pass{p['pass']:02d}.parquet"
        if not path.exists():  # resumable: a finished pass is kept
            t = time.perf_counter()
            cmd = [sys.executable, __file__, "--child-out", str(path), "--pass-id",
                   str(p["pass"]), "--repeat", str(p["repeat"]), "--settle",
                   str(int(p["settle"])), "--history", p["history"], "--workers",
                   str(args.workers), "--max-configs", str(args.max_configs),
                   "--prefix", *p["prefix"]]
            done = subprocess.run(cmd, check=False)
            print(f"pass {p['pass']} settle={p['settle']} history={p['history']} "
                  f"{p['prefix']}: rc {done.returncode}, {time.perf_counter() - t:.1f} s",
                  flush=True)
        if path.exists():
            parts.append(pd.read_parquet(path))
    rows = pd.concat(parts, ignore_index=True)
    rows.to_parquet(out / "placement_noise_rows.parquet", index=False)
    print(analyze(out))


if __name__ == "__main__":
    main()
