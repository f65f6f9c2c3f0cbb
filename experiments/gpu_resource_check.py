"""Record what a CUDA GPU reports for compiled kernels, to check the CPU-side compiled features.

For 60 (kernel, problem, dtype, config) entries over the three families (incl. sizes that are
not multiples of 16, a spilling GEMM and one over the shared-memory limit), each worker builds
the inputs on the GPU, compiles the launches through the JIT (``KernelCall.warmup``), loads
them and records ``n_regs``, ``n_spills``, ``metadata.shared`` and the JIT's specialization.
Failures are data (``error``). ``tests/test_features_compiled.py`` compiles the same entries on
the CPU and asserts equal registers, spills, shared bytes and specialization.

    PYTHONPATH=. python3 experiments/gpu_resource_check.py --out tests/fixtures/h200_resources.json

Triton's cache is a fresh temp dir, so every kernel is compiled on this machine. About a
minute on an H200 host with 16 cores.
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

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "h200_resources.json"

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
    env["command"] = " ".join([Path(sys.executable).name, *sys.argv])
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    parser.add_argument("--list", action="store_true", help="print the entries and exit")
    args = parser.parse_args(argv)
    if args.list:
        for e in select_entries():
            print(json.dumps(e))
        return 0

    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    os.environ.pop("TRITON_INTERPRET", None)
    # Fresh Triton cache (inherited by the workers): every kernel is compiled here, now.
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-gpu-check-")
    entries = select_entries()
    start = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=ctx) as pool:
        results = list(pool.map(measure, entries))
    wall = time.perf_counter() - start
    doc = {"provenance": {**provenance(), "wall_s": round(wall, 1), "workers": args.workers},
           "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    bad = [r for r in results if r["status"] != "ok"]
    print(f"{len(results)} entries in {wall:.0f}s, {len(bad)} failed "
          f"({', '.join(sorted({r['status'] for r in bad})) or 'none'}); wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
