"""Small Triton pieces the CPU tests share (run under TRITON_INTERPRET=1)."""

from __future__ import annotations

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
