"""What the CPU tests share: a host-timed do_bench and a small Triton tile matmul (run under
TRITON_INTERPRET=1)."""

from __future__ import annotations

import time

import torch
import triton
import triton.language as tl


@triton.jit
def masked_tile_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr,
                       BK: tl.constexpr):
    """out[tile] = x[m, k] @ y[k, n] for this program's (BM, BN) tile, masked at the edges.
    Test kernels call it with their own parameter names (that is what they test)."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, k, BK):
        kk = k0 + rk
        a = tl.load(x + rm[:, None] * k + kk[None, :], mask=(rm[:, None] < m) & (kk[None, :] < k),
                    other=0.0)
        b = tl.load(y + kk[:, None] * n + rn[None, :], mask=(kk[:, None] < k) & (rn[None, :] < n),
                    other=0.0)
        acc += tl.dot(a, b)
    tl.store(out + rm[:, None] * n + rn[None, :], acc, mask=(rm[:, None] < m) & (rn[None, :] < n))


def launch_tile_matmul(tuner, m: int, n: int, k: int) -> str:
    """One launch of a tuner over a ``masked_tile_matmul`` kernel (config names BM, BN, BK) on
    seeded fp16 inputs, checked against torch; the config it used."""
    torch.manual_seed(0)
    x, y = (torch.randn(s).to(torch.float16) for s in ((m, k), (k, n)))
    c = torch.empty(m, n, dtype=torch.float32)
    tuner[lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))](
        x, y, c, m, n, k)
    assert torch.allclose(c, x.float() @ y.float(), rtol=1e-3, atol=1e-3)
    return str(tuner.best_config)


class Bench:
    """do_bench that runs the config once: counts calls, times on the host clock."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fn, quantiles=None):
        self.calls += 1
        start = time.perf_counter()
        fn()
        ms = (time.perf_counter() - start) * 1e3
        return [ms, ms, ms]


def ours(caught) -> list[str]:
    """The messages of the CosttuneWarnings among ``caught`` (the ``record`` fixture's list)."""
    from costtune.types import CosttuneWarning

    return [str(w.message) for w in caught if issubclass(w.category, CosttuneWarning)]
