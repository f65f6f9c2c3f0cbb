"""What the cold-tuning experiment tunes: kernels written as users write them (none of them
costtune's, none in any training data), their config lists and shapes, and the methods."""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))  # user_kernels loads by path

SMEM_LIMIT = 232_448  # H200 shared memory per block (costtune.hardware.H200)
KS = (1, 4, 8, 16)
# Priority order inside a shape: the reference, costtune's default, the plain hook's, the rest.
METHODS = ["exhaustive", "costtune.autotune:8", "hook:8", "costtune.autotune:1",
           "costtune.autotune:4", "costtune.autotune:16", "hook:1", "hook:4", "hook:16"]
CACHED = "costtune.autotune:8+cache"  # a second process, Triton's cache_results warm


def matmul_configs() -> list[Any]:
    """Tutorial 03's names over every tile the H200 can hold: BLOCK_SIZE_M/N in 32-256,
    BLOCK_SIZE_K 32-128, 4 or 8 warps, 2-5 stages, GROUP_SIZE_M 8, kept when the pipelined
    A and B tiles fit in shared memory (328 configs; the list issue 20's figures used)."""
    import triton

    out = []
    for bm, bn, bk, w, s in itertools.product((32, 64, 128, 256), (32, 64, 128, 256),
                                              (32, 64, 128), (4, 8), (2, 3, 4, 5)):
        if s * (bm * bk + bk * bn) * 2 <= SMEM_LIMIT:
            out.append(triton.Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn,
                                      "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8},
                                     num_warps=w, num_stages=s))
    return out


@dataclass(frozen=True)
class Case:
    name: str  # the user_kernels style
    family: str
    shapes: tuple[dict[str, int], ...]
    # One config's compile on the H200 host (plan only), set so that exhaustive's estimate
    # covers its slowest measured process: tutorial03_matmul 0.57 s -> ~235 s (exhaustive
    # processes measured 190-232 s; at 0.42 s the plan gave it 186 s and three deadlines cut
    # it off in the eleventh session's calls).
    est_compile_s: float

    def configs(self) -> list[Any]:
        if self.name == "tutorial03_matmul":
            return matmul_configs()
        from user_kernels import STYLES

        return STYLES[self.name].configs("gpu")

    def style(self) -> Any:
        from user_kernels import STYLES

        return STYLES[self.name]


CASES = {c.name: c for c in (
    Case("tutorial03_matmul", "gemm", ({"M": 2048, "N": 11008, "K": 4096},
                                       {"M": 4096, "N": 4096, "K": 4096},
                                       {"M": 512, "N": 8192, "K": 8192}), 0.57),
    Case("inductor_softmax", "softmax", ({"rows": 32768, "cols": 2048},
                                         {"rows": 8192, "cols": 8192}), 0.35),
    Case("tutorial06_attention", "attention", ({"B": 4, "H": 16, "S": 2048, "D": 64,
                                                "causal": 1},
                                               {"B": 2, "H": 16, "S": 4096, "D": 128,
                                                "causal": 0}), 1.2),
)}


def parse_method(method: str) -> tuple[str, int | None, bool, str | None]:
    """("exhaustive" | "costtune.autotune" | "hook", k, cached, precompile) for names such as
    ``costtune.autotune:8``, ``hook:8+cache`` or ``costtune.autotune:8@threads`` (the
    precompile executor, "threads" or "processes"; None: costtune's default)."""
    base, _, precompile = method.partition("@")
    cached = base.endswith("+cache")
    base = base.removesuffix("+cache")
    if precompile and (precompile not in ("threads", "processes") or base == "exhaustive"):
        raise ValueError(f"unknown method {method!r}: @threads or @processes after a "
                         "costtune method only")
    if base == "exhaustive":
        return base, None, cached, None
    name, _, k = base.partition(":")
    if name not in ("costtune.autotune", "hook") or not k.isdigit():
        raise ValueError(f"unknown method {method!r}; use exhaustive, costtune.autotune:K or "
                         "hook:K (optionally +cache, @threads or @processes)")
    return name, int(k), cached, precompile or None


def shape_text(problem: dict[str, int]) -> str:
    """2048x11008x4096 for a GEMM, rows x cols, B,H,S,D,causal."""
    return "x".join(str(v) for v in problem.values())


def estimate_s(case: Case, method: str) -> float:
    """Rough seconds of one run's process (plan only): start, compiles, benchmarks."""
    kind, k, *_ = parse_method(method)
    n = len(case.configs())
    start = 6.0  # process start, imports, inputs (session 7's runs: 5-6 s beyond the tune)
    if kind == "exhaustive":
        return start + n * (case.est_compile_s + 0.13)
    kept = min(n, 2 * (k or 8))
    return start + 1.5 + case.est_compile_s * (1 + kept / 8) + kept * 0.13
