"""Collect the H200 dataset inside one lease-bounded device call; resumable across calls.

Three steps, from the repository root:

    PYTHONPATH=. python3 experiments/device/collect_all.py plan gemm:train gemm:test ...  # CPU
    PYTHONPATH=. python3 experiments/device/collect_all.py run --budget 500 --out $OUT \\
        gemm:train gemm:test softmax:train softmax:test attention:train attention:test  # GPU
    PYTHONPATH=. python3 experiments/device/collect_all.py report [--store datasets/h200]

Without a step name the arguments go to ``run`` (the form datasets/h200/DATASHEET.md
records). ``plan`` counts, per kernel:suite, the workloads and configs the store does not hold yet.
``run`` measures them: the store lives in .device/store (git-ignored, so it survives between
calls while the machine is warm) and starts from the committed datasets/h200; after every
workload the parts measured in this call are packed into $OUT/parts.tar for fetching into
datasets/h200 (a row already stored is never measured again). ``report`` lists what a store
holds per kernel and suite, with the collection commands and dates of its parts.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd

from costtune import Store
from costtune.collect import collect, plan_workloads, suite_workloads
from experiments import harness


def specs_workloads(specs: list[str]) -> list[tuple[str, str, list]]:
    out = []
    for spec in specs:
        kernel, _, suite = spec.partition(":")
        if not suite:
            raise SystemExit(f"collect_all: spec {spec!r} is not kernel:suite")
        out.append((kernel, suite, suite_workloads(kernel, suite)))
    return out


def pack(store_root: Path, before: set[Path], out: Path) -> int:
    new = sorted(p for p in store_root.rglob("part-*.parquet") if p not in before)
    tmp = out / "parts.tar.tmp"
    with tarfile.open(tmp, "w") as tar:
        for p in new:
            tar.add(p, arcname=str(p.relative_to(store_root)))
    tmp.replace(out / "parts.tar")
    return len(new)


def plan(args: argparse.Namespace) -> int:
    store = Store(args.store)
    for kernel, suite, workloads in specs_workloads(args.specs):
        todo, n_done = plan_workloads(workloads, store, max_configs=args.max_configs)
        print(f"{kernel}:{suite}: {len(workloads)} workloads, {n_done} complete in "
              f"{args.store}; to measure: {len(todo)} workloads, "
              f"{sum(len(c) for _, c in todo)} configs")
    return 0


def seed_store(args: argparse.Namespace) -> set[Path]:
    """Copy the committed parts into the working store; returns their paths there."""
    if not args.seed_from.exists():
        args.store.mkdir(parents=True, exist_ok=True)
        return set()
    committed = set()
    for p in args.seed_from.rglob("part-*.parquet"):
        dst = args.store / p.relative_to(args.seed_from)
        committed.add(dst)
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst)
    args.store.mkdir(parents=True, exist_ok=True)
    return committed


def check_gpu(store: Store, name: str, *, allow: bool, parts: list[Path] | None = None
              ) -> None:
    """Refuse to add timings of another GPU model to a store whose ``parts`` (default: all;
    ``run``: the seeded, committed ones) share one (an H100 lent for an nvidia-h200 call
    must not write into the H200 dataset)."""
    parts = store.parts() if parts is None else parts
    models = {store.part_meta(p).get("gpu") for p in parts} - {None}
    if len(models) == 1 and name not in models and not allow:
        raise SystemExit(f"collect_all: this GPU is {name!r} but {store.root} holds "
                         f"{models.pop()!r} timings only (--any-gpu to collect anyway)")


def run(args: argparse.Namespace) -> int:
    import torch

    committed = seed_store(args)
    store = Store(args.store)
    check_gpu(store, torch.cuda.get_device_name(0), allow=args.any_gpu,
              parts=sorted(committed) or None)
    n_gpus = args.gpus or torch.cuda.device_count()
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    for kernel, suite, workloads in specs_workloads(args.specs):
        left = args.budget - (time.perf_counter() - t0)
        if left <= 0:
            print(f"budget spent before {kernel}:{suite}", flush=True)
            break

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
        print(f"{kernel}:{suite}: {s} -> {rate:.1f} configs/s", flush=True)
        print(f"packed {pack(args.store, committed, args.out)} new parts", flush=True)
    return 0


def report(args: argparse.Namespace) -> int:
    store = Store(args.store)
    metas = pd.DataFrame([store.part_meta(p) for p in store.parts()])
    if metas.empty:
        raise SystemExit(f"collect_all report: no parts in {args.store}")
    rows = harness.load_dataset(args.store)
    counts = rows.groupby(["kernel", "suite"]).agg(
        workloads=("workload", "nunique"), configs=("config", "size"),
        ok=("status", lambda s: int((s == "ok").sum()))).reset_index()
    when = metas.groupby("command")["date"].agg(["min", "max", "size"]).reset_index()
    print(harness.md_table(counts))
    print()
    print(harness.md_table(when.rename(columns={"size": "parts"})))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    for step in ("plan", "run", "report"):
        p = sub.add_parser(step)
        if step != "report":
            p.add_argument("specs", nargs="+", help="kernel:suite pairs")
            p.add_argument("--max-configs", type=int, default=None)
        if step == "run":
            p.add_argument("--budget", type=float, required=True,
                           help="seconds; no new workload after")
            p.add_argument("--out", type=Path, required=True)
            p.add_argument("--seed-from", type=Path, default=Path("datasets/h200"))
            p.add_argument("--reps", type=int, default=10)
            p.add_argument("--gpus", type=int, default=None, help="number of GPUs (default all)")
            p.add_argument("--any-gpu", action="store_true",
                           help="collect even where the store holds another GPU model's rows")
        default = Path(".device/store") if step == "run" else harness.DATASET
        p.add_argument("--store", type=Path, default=default)
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] not in ("plan", "run", "report", "-h", "--help"):
        argv = ["run", *argv]  # the command datasets/h200/DATASHEET.md records (no step)
    args = ap.parse_args(argv)
    return {"plan": plan, "run": run, "report": report}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
