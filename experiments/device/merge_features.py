"""Merge feature tables computed elsewhere (``features_impls.py``'s ``features.tar``, unpacked
into a folder) into the store root's per-family tables: ``features_<family>.parquet``
(compiled) and ``features_<family>_ir.parquet`` (IR). Rows already in a table for the same
(workload, config) are kept and the incoming duplicates dropped: nothing stored is replaced.
Incoming rows of a (workload, config) the dataset holds no measurement of are left out
(features computed ahead of a collection, ``experiments/features_pending.py``, for configs
that were not collected after all); ``--all-rows`` keeps them.

    PYTHONPATH=. python3 experiments/device/merge_features.py /tmp/feat [--dataset datasets/h200]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from costtune.features.table import META_KEY, _write
from costtune.kernels import IMPLEMENTATIONS
from experiments import harness

KEYS = ["workload", "config"]


def merge(target: Path, incoming: list[Path], *, measured: pd.MultiIndex | None = None) -> str:
    """Append ``incoming`` tables to ``target`` (keys already there win); with ``measured``
    (the dataset's (workload, config) keys), incoming rows outside it are left out."""
    frames, meta, unmeasured = [], {}, 0
    if target.exists():
        frames.append(pd.read_parquet(target))
        meta = json.loads((pq.read_schema(target).metadata or {}).get(META_KEY, b"{}"))
    for path in incoming:
        part = pd.read_parquet(path)
        if measured is not None:
            keep = pd.MultiIndex.from_frame(part[KEYS]).isin(measured)
            unmeasured += int((~keep).sum())
            part = part[keep]
        frames.append(part)
        meta = meta or json.loads((pq.read_schema(path).metadata or {}).get(META_KEY,
                                                                            b"{}"))
    table = pd.concat(frames, ignore_index=True, sort=False)
    before = len(table)
    table = table.drop_duplicates(KEYS, keep="first").reset_index(drop=True)
    _write(table, target, meta=meta)
    return (f"{target}: {len(table)} rows ({before - len(table)} duplicates dropped, "
            f"{unmeasured} without a measurement left out)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--all-rows", action="store_true",
                    help="also rows of configs the dataset holds no measurement of")
    args = ap.parse_args()
    for family, names in IMPLEMENTATIONS.items():
        measured = None
        for prefix, suffix in (("compiled", ""), ("ir", "_ir")):
            incoming = [args.folder / f"{prefix}_{n}.parquet" for n in names]
            incoming = [p for p in incoming if p.exists()]
            if not incoming:
                continue
            if measured is None and not args.all_rows:
                rows = harness.load_dataset(args.dataset, kernel=family)
                measured = pd.MultiIndex.from_frame(rows[KEYS])
            print(merge(args.dataset / f"features_{family}{suffix}.parquet", incoming,
                        measured=measured))


if __name__ == "__main__":
    main()
