"""A small GEMM kernel tuned with costtune.autotune under the interpreter, importable by the
spawned processes of tests/test_learn.py (the same source, so the same per-kernel model)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import masked_tile_matmul  # noqa: E402

import costtune  # noqa: E402

PARAMS = {"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"}
CONFIGS = [triton.Config({"BM": bm, "BN": bn, "BK": 32}, num_warps=w, num_stages=2)
           for bm in (32, 64) for bn in (32, 64) for w in (4, 8)]


@triton.jit
def learned_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    masked_tile_matmul(x, y, out, m, n, k, BM, BN, BK)


class StepBench:
    """do_bench that launches once and reports the n-th call as ``start + step * n`` ms (a
    positive step: the first benchmarked config is fastest; negative: each one is faster)."""

    def __init__(self, step: float = 1.0, start: float = 1.0) -> None:
        self.calls, self.step, self.start = 0, step, start

    def __call__(self, fn, quantiles=None):
        self.calls += 1
        fn()
        t = self.start + self.step * self.calls
        return [t, t, t]


def tuner(bench, **options):
    return costtune.autotune(CONFIGS, key=["m", "n", "k"], family="gemm",
                             problem={"M": "m", "N": ("y", 1), "K": "k"}, params=PARAMS,
                             range_margin=None, do_bench=bench, precompile=False,
                             **options)(learned_matmul)


def run(t, m=32, n=64, k=64):
    x, y = (torch.randn(s).to(torch.float16) for s in ((m, k), (k, n)))
    out = torch.empty(m, n, dtype=torch.float32)
    t[lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))](
        x, y, out, m, n, k)
    torch.testing.assert_close(out, x.float() @ y.float(), rtol=1e-3, atol=1e-3)
    return t


def tune_and_report(m: int, n: int, k: int) -> None:
    """One learning tuning call in this process; prints what ranked and what was written."""
    t = run(tuner(StepBench(), learn=True), m, n, k)
    print("MODEL", t.early_config_prune.last.model)
    print("UPDATED", t.learner.updated[-1] if t.learner.updated else None)


def update_worker(folder: str, rows_path: str, start, done) -> None:
    """Spawned: wait for the start signal, merge these rows into the kernel's model."""
    import pandas as pd

    from costtune.model.learned import update

    rows = pd.read_parquet(rows_path)
    start.wait(60)
    done.put(str(update(folder, rows, base="h200", family="softmax", rounds=5)))


if __name__ == "__main__":
    tune_and_report(*(int(a) for a in sys.argv[1:4]))
