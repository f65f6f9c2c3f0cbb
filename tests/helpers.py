"""What the tests share: a host-timed do_bench, a small Triton tile matmul (run under
TRITON_INTERPRET=1), a stand-in sm_90 driver for JIT processes without a GPU, and the suite
GEMM's checked launch on the GPU."""

from __future__ import annotations

import time

import torch
import triton
import triton.language as tl


@triton.jit
def tile_product(x, y, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """This program's (BM, BN) tile of x[m, k] @ y[k, n] in fp32, masked at the edges."""
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
    return acc


@triton.jit
def store_tile(out, acc, m, n, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    tl.store(out + rm[:, None] * n + rn[None, :], acc, mask=(rm[:, None] < m) & (rn[None, :] < n))


@triton.jit
def masked_tile_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr,
                       BK: tl.constexpr):
    """out[tile] = x[m, k] @ y[k, n] for this program's (BM, BN) tile, masked at the edges.
    Test kernels call it with their own parameter names (that is what they test)."""
    store_tile(out, tile_product(x, y, m, n, k, BM, BN, BK), m, n, BM, BN)


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


class StandInDriver:
    """Triton's active driver for a JIT (not interpreter) process without a GPU: device 0,
    stream 0, an sm_90 target, so warmups bind, specialize and compile as on the H200."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)


def use_stand_in_driver() -> None:
    from triton.runtime.driver import driver

    driver.set_active(StandInDriver())


def launch_suite_gemm(tuner, m: int, n: int, k: int) -> None:
    """One launch of a tuner over the suite GEMM kernel on the GPU, checked against torch."""
    from costtune.kernels import gemm

    x = gemm.make_inputs({"M": m, "N": n, "K": k}, "float16", device="cuda")
    a, b = x["a"], x["b"]
    c = torch.zeros(m, n, dtype=torch.float32, device="cuda")
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),  # noqa: E731
                         meta["SPLIT_K"])
    tuner[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), GROUP_M=8,
                UPCAST_DOT=False)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)
