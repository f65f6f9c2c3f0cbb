"""Record what a CUDA GPU reports for compiled kernels, to check the CPU-side compiled features.

For 60 (kernel, problem, dtype, config) entries over the three families (incl. sizes that are
not multiples of 16, a spilling GEMM and one over the shared-memory limit), each worker builds
the inputs on the GPU, compiles the launches through the JIT (``KernelCall.warmup``), loads
them and records ``n_regs``, ``n_spills``, ``metadata.shared`` and the JIT's specialization.
Failures are data (``error``). ``tests/test_features_compiled.py`` compiles the same entries on
the CPU and asserts equal registers, spills, shared bytes and specialization.

Three steps:

    python -m experiments.gpu_resource_check plan                       # CPU: the entries
    PYTHONPATH=. python3 -m experiments.gpu_resource_check run \
        --out tests/fixtures/h200_resources.json                         # GPU, ~1 min
    python -m experiments.gpu_resource_check report                     # CPU

``run`` uses a fresh temp dir as Triton's cache, so every kernel is compiled on this machine;
each entry's result is appended to ``<out>.partial.jsonl`` as it arrives (an interrupted call
resumes from it) and the fixture is written whole at the end. ``report`` writes
results/gpu_resource_check.{md,csv} from the committed fixture.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from experiments import harness

QUESTION = "gpu_resource_check"
DEFAULT_OUT = harness.ROOT / "tests" / "fixtures" / "h200_resources.json"

# (kernel, problem, dtype, sampled configs); sizes off multiples of 16 change specialization.
_PROBLEMS: list[tuple[str, dict[str, int], str, int]] = [
    ("gemm", {"M": 1024, "N": 1024, "K": 1024}, "float16", 5),
    ("gemm", {"M": 1000, "N": 1000, "K": 1000}, "float16", 5),
    ("gemm", {"M": 777, "N": 4097, "K": 1025}, "bfloat16", 5),
    ("gemm", {"M": 16, "N": 4096, "K": 4096}, "float16", 5),
    ("softmax", {"rows": 4096, "cols": 1000}, "float16", 5),
    ("softmax", {"rows": 100, "cols": 5000}, "float32", 5),
    ("softmax", {"rows": 1024, "cols": 50257}, "bfloat16", 5),
    ("softmax", {"rows": 777, "cols": 1234}, "float16", 5),
    ("attention", {"B": 1, "H": 8, "S": 1024, "D": 128, "causal": 1}, "float16", 6),
    ("attention", {"B": 2, "H": 4, "S": 1000, "D": 64, "causal": 0}, "float16", 6),
    ("attention", {"B": 1, "H": 4, "S": 777, "D": 64, "causal": 1}, "bfloat16", 6),
]
# Outside the sampled spaces on purpose: a register-spilling tile on an unaligned GEMM and a
# pipeline over the sm_90 shared-memory limit (5 x 64 KiB), which must fail to load.
_EXTRA = [
    ("gemm", {"M": 1000, "N": 1000, "K": 1000}, "float16",
     "BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,SPLIT_K=1,num_warps=4,num_stages=3"),
    ("gemm", {"M": 1024, "N": 1024, "K": 1024}, "float16",
     "BLOCK_M=64,BLOCK_N=64,BLOCK_K=256,SPLIT_K=1,num_warps=4,num_stages=5"),
]


def select_entries() -> list[dict[str, Any]]:
    """The 60 entries: seeded samples of each family's space (tiles kept small enough that a
    CPU compile stays within seconds) plus the two extras."""
    from costtune.kernels import get_family

    entries = []
    for kernel, problem, dtype, n in _PROBLEMS:
        space = get_family(kernel).config_space(problem)
        cheap = [c for c in space.configs() if _cheap(kernel, c.as_dict())]
        picked = [cheap[i] for i in _spread(len(cheap), n, seed=len(entries))]
        entries += [{"kernel": kernel, "problem": problem, "dtype": dtype, "config": c.key}
                    for c in picked]
    entries += [{"kernel": k, "problem": p, "dtype": d, "config": c} for k, p, d, c in _EXTRA]
    return entries


def _cheap(kernel: str, c: dict[str, int]) -> bool:
    if kernel == "gemm":
        return c["BLOCK_M"] * c["BLOCK_N"] <= 128 * 128 and c["BLOCK_K"] <= 64
    return True


def _spread(n: int, k: int, *, seed: int) -> list[int]:
    import random

    return sorted(random.Random(seed).sample(range(n), min(k, n)))


def measure(entry: dict[str, Any]) -> dict[str, Any]:
    """Compile and load every launch of one entry on the GPU; failures become ``error``."""
    import torch

    from costtune.features import classify_error, kernel_source_hash, parse_config_key, spec_text
    from costtune.kernels import get_family

    out: dict[str, Any] = {**entry, "n_regs": None, "n_spills": None, "shared": None,
                           "spec": None, "source_hash": None, "status": "ok", "error": ""}
    start = time.perf_counter()
    try:
        family = get_family(entry["kernel"])
        config = parse_config_key(entry["config"])
        inputs = family.make_inputs(entry["problem"], entry["dtype"], seed=0, device="cuda")
        calls = family.kernel_calls(inputs, config)
        main_grid = tuple(family.grid(entry["problem"], config))
        main = next((i for i, c in enumerate(calls) if tuple(c.grid) == main_grid), 0)
        out["source_hash"] = kernel_source_hash(calls[main].fn)
        for i, call in enumerate(calls):
            kernel = call.warmup()
            if i == main:
                src = kernel.src
                out["spec"] = spec_text(src.signature, src.constants, src.attrs)
                out["shared"] = int(kernel.metadata.shared)
            kernel._init_handles()  # loads the module; raises OutOfResources as a launch would
            if i == main:
                out["n_regs"], out["n_spills"] = int(kernel.n_regs), int(kernel.n_spills)
        torch.cuda.synchronize()
    except Exception as exc:  # failures are data
        out["status"] = classify_error(exc).value
        out["error"] = f"{type(exc).__name__}: {exc}"[:600]
    out["seconds"] = round(time.perf_counter() - start, 2)
    return out


def provenance() -> dict[str, Any]:
    from costtune.env import environment

    env = environment(0)
    try:
        from triton import knobs

        text = subprocess.run([knobs.nvidia.ptxas.path, "--version"], capture_output=True,
                              text=True, timeout=30).stdout
        env["ptxas"] = text.strip().splitlines()[-1]
    except Exception as exc:  # provenance is best effort
        env["ptxas"] = f"unknown ({exc})"
    env["command"] = harness.command()
    return env


def entry_key(entry: dict[str, Any]) -> str:
    return json.dumps([entry[k] for k in ("kernel", "problem", "dtype", "config")],
                      sort_keys=True)


def plan(args: argparse.Namespace) -> int:
    entries = select_entries()
    for e in entries:
        print(json.dumps(e))
    kinds = pd.DataFrame(entries)["kernel"].value_counts()
    print(f"plan: {len(entries)} entries ({', '.join(f'{k} {v}' for k, v in kinds.items())})",
          file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    """Measure every entry on the GPU; each result is appended to ``<out>.partial.jsonl`` as
    it arrives (a second call skips those), then the fixture is written whole."""
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU (the plan step lists the entries anywhere)", file=sys.stderr)
        return 2
    os.environ.pop("TRITON_INTERPRET", None)
    # Fresh Triton cache (inherited by the workers): every kernel is compiled here, now.
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-gpu-check-")
    partial = args.out.with_suffix(".partial.jsonl")
    have = {}
    if partial.exists():
        have = {entry_key(r): r for r in map(json.loads, partial.read_text().splitlines())}
    entries = select_entries()
    todo = [e for e in entries if entry_key(e) not in have]
    start = time.perf_counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=ctx) as pool, \
            partial.open("a") as log:
        for res in pool.map(measure, todo):
            have[entry_key(res)] = res
            log.write(json.dumps(res, default=str) + "\n")
            log.flush()
    wall = time.perf_counter() - start
    results = [have[entry_key(e)] for e in entries]
    doc = {"provenance": {**provenance(), "wall_s": round(wall, 1), "workers": args.workers},
           "results": results}
    args.out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    partial.unlink()
    bad = [r for r in results if r["status"] != "ok"]
    print(f"{len(results)} entries ({len(todo)} measured now) in {wall:.0f}s, {len(bad)} failed "
          f"({', '.join(sorted({r['status'] for r in bad})) or 'none'}); wrote {args.out}")
    return 0


def report(args: argparse.Namespace) -> int:
    """results/gpu_resource_check.{md,csv} from the fixture the run step wrote."""
    doc = json.loads(args.fixture.read_text())
    prov, table = doc["provenance"], pd.DataFrame(doc["results"])
    table["problem"] = table["problem"].map(lambda p: json.dumps(p, sort_keys=True))
    summary = table.groupby(["kernel", "status"]).agg(
        entries=("config", "size"), median_regs=("n_regs", "median"),
        max_regs=("n_regs", "max"), spilling=("n_spills", lambda s: int((s > 0).sum())),
        max_shared_bytes=("shared", "max"), median_compile_s=("seconds", "median")
    ).reset_index()
    shown = table[["kernel", "problem", "dtype", "config", "n_regs", "n_spills", "shared",
                   "status", "seconds"]]
    lines = [
        "# Compiled kernels as the GPU reports them (registers, spills, shared memory)", "",
        harness.provenance(), "",
        f"- Raw: `{harness.relative(args.fixture)}` ({len(table)} entries), written by "
        f"`{prov.get('command')}` on {prov.get('gpu')} ({prov.get('sm_count')} SMs, driver "
        f"{prov.get('driver')}, CUDA {prov.get('cuda')}), torch {prov.get('torch')}, triton "
        f"{prov.get('triton')}, {prov.get('ptxas')}, {prov.get('date')}; {prov.get('workers')} "
        f"workers, {prov.get('wall_s')} s wall, fresh Triton cache.",
        "- Use: tests/test_features_compiled.py compiles the same entries on a CPU (AOT for "
        "sm_90) and asserts equal registers, spills, shared bytes and specialization.", "",
        "## By family and status", "", harness.md_table(summary, floatfmt=".4g"), "",
        "## Entries", "", harness.md_table(shown, floatfmt=".4g"), ""]
    md = harness.write_report(QUESTION, lines, table.drop(columns=["spec"]), out=args.out)
    print(f"wrote {md} and .csv")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    sub.add_parser("plan", help="print the entries (JSON lines)")
    p = sub.add_parser("run", help="measure them on the GPU")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    p = sub.add_parser("report", help="summarize a fixture (CPU)")
    p.add_argument("--fixture", type=Path, default=DEFAULT_OUT)
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    args = parser.parse_args(argv)
    return {"plan": plan, "run": run, "report": report}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
