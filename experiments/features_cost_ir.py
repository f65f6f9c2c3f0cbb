"""What an IR feature costs per config against a full compile, on this machine (no GPU).

For each family, distinct compile jobs (the main launch of random (workload, config) rows of the
dataset, one per specialization) are compiled two ways in this process, one at a time, each into
a fresh Triton cache: the IR-only path (``aot.compile_ir``: ttir and ttgir stages, then the op
counts) and the full compile of compiled features (``aot.compile_job``: through LLVM, PTX,
ptxas, and SASS disassembly). A first job per family is compiled untimed (imports, first-use
initialization). Prints one markdown row per family and the whole-dataset estimate.

    PYTHONPATH=. python3 experiments/features_cost_ir.py [--ir 20,20,20] [--full 20,20,20] \\
        [--dataset datasets/h200] [--seed 0] [--csv PATH]

``--ir``/``--full``: jobs per family (gemm, softmax, attention) timed each way; the full jobs
are the first of the IR ones. The machine may be shared: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="costtune-cost-"))

import pandas as pd  # noqa: E402

FAMILIES = ("gemm", "softmax", "attention")


def sample_jobs(dataset: Path, kernel: str, n: int, seed: int) -> tuple[list, int, int]:
    """``n + 1`` distinct main-launch compile jobs of ``kernel``'s rows (the first is the
    warm-up), the rows' distinct (workload, config) count and their distinct main jobs."""
    from costtune.features.compiled import rows_to_jobs
    from costtune.store.dataset import load_dataset

    rows = load_dataset(dataset / kernel).drop_duplicates(["workload", "config"])
    keys = rows.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    jobs, seen = [], set()
    for item in rows_to_jobs(keys, 90):
        if isinstance(item, str):
            continue
        job = item[0][item[1]]
        if job.key not in seen:
            seen.add(job.key)
            jobs.append(job)
    return jobs[:n + 1], len(rows), len(seen)


def timed(fn, job, **kw) -> tuple[float, str]:
    start = time.perf_counter()
    rec = fn(job, **kw)
    return time.perf_counter() - start, rec["status"]


def measure(dataset: Path, kernel: str, n_ir: int, n_full: int, seed: int) -> dict:
    from costtune.build.aot import compile_ir, compile_job

    t0 = time.perf_counter()
    jobs, n_rows, n_jobs = sample_jobs(dataset, kernel, max(n_ir, n_full), seed)
    spec_s = time.perf_counter() - t0
    warm, jobs = jobs[0], jobs[1:]
    compile_ir(warm)
    compile_job(warm)
    ir = [timed(compile_ir, j) for j in jobs[:n_ir]]
    full = [timed(compile_job, j, sass=True) for j in jobs[:n_full]]
    ir_s = [t for t, _ in ir]
    full_s = [t for t, _ in full]
    return {"kernel": kernel, "rows": n_rows, "main_jobs": n_jobs,
            "specialize_s_per_row": spec_s / max(n_rows, 1), "n_ir": len(ir_s),
            "n_full": len(full_s), "ir_mean": statistics.fmean(ir_s),
            "ir_median": statistics.median(ir_s), "full_mean": statistics.fmean(full_s),
            "full_median": statistics.median(full_s),
            "ir_fail": sum(s != "ok" for _, s in ir), "full_fail": sum(s != "ok" for _, s in full)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=Path("datasets/h200"))
    ap.add_argument("--ir", default="20,20,20", help="IR-only jobs per family")
    ap.add_argument("--full", default="20,20,20", help="full compiles per family")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    n_ir = [int(x) for x in args.ir.split(",")]
    n_full = [int(x) for x in args.full.split(",")]
    if len(n_ir) != 3 or len(n_full) != 3 or min(n_ir + n_full) < 1:
        ap.error("--ir and --full take three counts >= 1 (gemm,softmax,attention)")
    import triton

    load0 = os.getloadavg()
    rows = [measure(args.dataset, k, a, b, args.seed)
            for k, a, b in zip(FAMILIES, n_ir, n_full, strict=True)]
    load1 = os.getloadavg()
    print(f"triton {triton.__version__}, {os.cpu_count()} CPUs, load average "
          f"{load0[0]:.1f} -> {load1[0]:.1f} (1 min)")
    print("| family | distinct main jobs (rows) | IR-only s/config mean (median), n "
          "| full compile s/config mean (median), n | full / IR | IR for every job, "
          "1 process |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kernel']} | {r['main_jobs']:,} ({r['rows']:,}) | {r['ir_mean']:.3f} "
              f"({r['ir_median']:.3f}), {r['n_ir']} | {r['full_mean']:.2f} "
              f"({r['full_median']:.2f}), {r['n_full']} | {r['full_mean'] / r['ir_mean']:.1f}x "
              f"| {r['main_jobs'] * r['ir_mean'] / 60:.1f} min |")
    fails = {r["kernel"]: (r["ir_fail"], r["full_fail"]) for r in rows
             if r["ir_fail"] or r["full_fail"]}
    print(f"failures (IR, full): {fails or 'none'}; specialization (launch_jobs) per row: "
          + ", ".join(f"{r['kernel']} {r['specialize_s_per_row'] * 1e3:.1f} ms" for r in rows))
    if args.csv is not None:
        pd.DataFrame(rows).to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
