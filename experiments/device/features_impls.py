"""Compiled and IR features for the implementations added to datasets/h200 (issue 18), computed
on the device host's CPUs (AOT compiles for sm_90; the GPU is not used), packed as they finish.

    PYTHONPATH=. python3 experiments/device/features_impls.py --out $OUT --workers 16 \
        [--impls gemm_streamk] [--dataset .device/store]

Stages, smallest first, each written to /tmp/costtune_features and packed into
``$OUT/features.tar`` when done (a call cut short keeps the finished ones): per new
implementation, ``compiled_<impl>.parquet`` (``costtune.features.compute_features``: static +
compiled) and ``ir_<impl>.parquet`` (``compute_ir_features``, answered by the compile records
the first stage cached); last the IR table of the original GEMM rows (``ir_gemm.parquet``).
"""

from __future__ import annotations

import argparse
import tarfile
import time
from pathlib import Path

from costtune.features import compute_features, compute_ir_features
from experiments import harness

WORK = Path("/tmp/costtune_features")
ORDER = ("softmax_onepass", "softmax_multirow", "attention_tma", "gemm_tma", "gemm_tma_device",
         "gemm_tutorial", "gemm_streamk", "softmax_splitrow", "softmax_tma",
         "attention_tma_persistent", "gemm_splitk")


def pack(out: Path) -> None:
    tmp = out / "features.tar.tmp"
    with tarfile.open(tmp, "w") as tar:
        for p in sorted(WORK.glob("*.parquet")):
            tar.add(p, arcname=p.name)
    tmp.replace(out / "features.tar")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--impls", nargs="+", default=None,
                    help="only these implementations (default: ORDER, then the original "
                         "GEMM's IR table)")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    data = harness.load_dataset(args.dataset)
    t0 = time.perf_counter()
    impls = args.impls or ORDER
    stages = [(f"compiled_{i}", i, True) for i in impls] + [(f"ir_{i}", i, False) for i in impls]
    if args.impls is None:
        stages.append(("ir_gemm", "gemm", False))
    for name, impl, full in stages:
        rows = data[data["implementation"] == impl]
        start = time.perf_counter()
        if full:
            table = compute_features(rows, out=WORK / f"{name}.parquet", workers=args.workers)
            bad = int((table["compile_status"] != "ok").sum())
        else:
            table = compute_ir_features(rows, out=WORK / f"{name}.parquet", workers=args.workers)
            bad = int((table["ir_status"] != "ok").sum())
        pack(args.out)
        print(f"{time.perf_counter() - t0:6.0f}s {name}: {len(table)} rows, {bad} not ok, "
              f"{time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
