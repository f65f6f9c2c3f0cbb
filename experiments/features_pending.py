"""Compiled and IR features of the configs a collection plan will measure, computed on this
machine's CPUs before the GPU call (features need the config and problem, not a timing).

    PYTHONPATH=. python3 experiments/features_pending.py --out /tmp/feat gemm:train gemm:test
    PYTHONPATH=. python3 experiments/device/merge_features.py /tmp/feat   # into datasets/h200

Writes ``compiled_<implementation>.parquet`` and ``ir_<implementation>.parquet`` into ``--out``
(the layout ``merge_features.py`` reads): one row per (workload, config) that the store does
not hold yet, the same columns as the shipped tables. Rows the store already holds are not
computed again (merging keeps the stored ones anyway).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from costtune import Store
from costtune.collect import plan_workloads, suite_workloads
from costtune.features import compute_features, compute_ir_features
from experiments import harness


def pending_rows(specs: list[str], store: Store) -> pd.DataFrame:
    """Dataset-like rows (kernel, implementation, workload, dtype, sizes, config and its
    params) for every planned but unmeasured (workload, config) of ``kernel:suite`` specs."""
    rows = []
    for spec in specs:
        kernel, _, suite = spec.partition(":")
        if not suite:
            raise SystemExit(f"features_pending: spec {spec!r} is not kernel:suite")
        todo, _ = plan_workloads(suite_workloads(kernel, suite), store)
        for w, configs in todo:
            base = {"kernel": w.kernel, "implementation": w.implementation, "workload": w.id,
                    "suite": suite, "dtype": w.dtype, **dict(w.problem)}
            rows += [{**base, "config": c.key, **c.as_dict()} for c in configs]
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="+", help="kernel:suite, e.g. gemm:train")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    rows = pending_rows(args.specs, Store(args.dataset))
    if rows.empty:
        print("nothing pending")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for impl, part in rows.groupby("implementation"):
        t0 = time.perf_counter()
        comp = compute_features(part, out=args.out / f"compiled_{impl}.parquet",
                                workers=args.workers)
        t1 = time.perf_counter()
        compute_ir_features(part, out=args.out / f"ir_{impl}.parquet", workers=args.workers)
        t2 = time.perf_counter()
        bad = int((comp["compile_status"] != "ok").sum())
        print(f"{impl}: {len(part)} rows, {part['workload'].nunique()} workloads; compiled "
              f"{t1 - t0:.0f} s ({bad} not ok), IR {t2 - t1:.0f} s", flush=True)


if __name__ == "__main__":
    main()
