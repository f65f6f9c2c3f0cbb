"""Collect the H200 dataset inside one lease-bounded device call; resumable across calls.

Run on the GPU machine from the repo root, e.g.
    PYTHONPATH=. python3 experiments/device/collect_all.py --budget 500 --out $OUT \
        gemm:train gemm:test softmax:train softmax:test attention:train attention:test
The store lives in .device/store (git-ignored, so it survives between calls while the machine is
warm) and starts from the committed datasets/h200; after every kernel/suite the parts measured in
this call are packed into $OUT/parts.tar for fetching into datasets/h200.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import time
from pathlib import Path

import torch

from costtune.collect import collect, suite_workloads
from costtune.store.dataset import Store


def pack(store_root: Path, before: set[Path], out: Path) -> int:
    new = sorted(p for p in store_root.rglob("part-*.parquet") if p not in before)
    tmp = out / "parts.tar.tmp"
    with tarfile.open(tmp, "w") as tar:
        for p in new:
            tar.add(p, arcname=str(p.relative_to(store_root)))
    tmp.replace(out / "parts.tar")
    return len(new)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="+", help="kernel:suite pairs")
    ap.add_argument("--budget", type=float, required=True, help="seconds; no new workload after")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--store", type=Path, default=Path(".device/store"))
    ap.add_argument("--seed-from", type=Path, default=Path("datasets/h200"))
    ap.add_argument("--max-configs", type=int, default=None)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--gpus", type=int, default=None, help="number of GPUs (default all)")
    args = ap.parse_args()

    if args.seed_from.exists():  # resume from what is already committed
        for p in args.seed_from.rglob("part-*.parquet"):
            dst = args.store / p.relative_to(args.seed_from)
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dst)
    args.store.mkdir(parents=True, exist_ok=True)
    committed = ({args.store / p.relative_to(args.seed_from)
                  for p in args.seed_from.rglob("part-*.parquet")}
                 if args.seed_from.exists() else set())
    store = Store(args.store)
    n_gpus = args.gpus or torch.cuda.device_count()
    t0 = time.perf_counter()
    for spec in args.specs:
        kernel, suite = spec.split(":")
        left = args.budget - (time.perf_counter() - t0)
        if left <= 0:
            print(f"budget spent before {spec}", flush=True)
            break
        workloads = suite_workloads(kernel, suite)

        def stored(w, rows):
            r = rows[0]
            ok = sum(x["status"] == "ok" for x in rows)
            print(f"  {time.perf_counter() - t0:5.0f}s {w.id}: {len(rows)} configs, {ok} ok, "
                  f"wall {r['workload_wall_s']:.1f}s (compile {r['workload_compile_wall_s']:.1f}"
                  f", measure {r['workload_measure_wall_s']:.1f})", flush=True)
            pack(args.store, committed, args.out)

        s = collect(workloads, store, suite=suite, max_configs=args.max_configs, reps=args.reps,
                    gpus=list(range(n_gpus)), time_budget_s=left, on_stored=stored,
                    meta={"command": " ".join(["python3", *sys.argv])})
        rate = s["configs"] / s["seconds"] if s["seconds"] else 0
        print(f"{spec}: {s} -> {rate:.1f} configs/s", flush=True)
        print(f"packed {pack(args.store, committed, args.out)} new parts", flush=True)

if __name__ == "__main__":
    main()
