"""GPU check of two pruning-path readings made on CPU (twenty-fifth session, NOTES):

1. GEMMs that do not pipeline their dots (K in one tile, no loop): the shared-memory floor
   claims nothing for them. Launch 256x256x128 at num_stages 3 (the floor's "not pipelined"
   reading: it must launch) and 256x256x256 at num_stages 2 (a one-copy tile of 262,144 B
   if the operands were staged in shared memory: does the GPU JIT refuse it?).
2. Tutorial 03's matmul at 1000^3 with BLOCK 64x128x64, GROUP_SIZE_M 8, 8 warps, 5 stages and
   ACTIVATION="leaky_relu": its AOT compile for sm_90 raised "SystemError: AST constructor
   recursion depth mismatch". Does the GPU JIT raise it too?

    PYTHONPATH=. python3 experiments/device/check_floor_launch_h200.py --out $OUT

Writes one JSON line per case to $OUT/floor_launch.jsonl: status ("ok" or the exception's
type), the error's first line, shared bytes of the compiled kernel and the max abs error
against torch.matmul.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
import triton.language as tl


# Tutorial 03 as the CPU check compiled it (its ACTIVATION through a jit helper), not
# experiments.user_kernels.matmul_kernel (inline): the SystemError came from this one.
@triton.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                  BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                  ACTIVATION: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def one_tile_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_SIZE_M: tl.constexpr,
                    BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    rn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    rk = tl.arange(0, BLOCK_SIZE_K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=rk[None, :] < K, other=0.0)
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=rk[:, None] < K, other=0.0)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b).to(tl.float16))


def case(name: str, run, ref) -> dict:
    try:
        kernel = run()
        torch.cuda.synchronize()
        err = float((ref[0] - ref[1]()).abs().max())
        return {"case": name, "status": "ok", "shared_bytes": kernel.metadata.shared,
                "n_regs": kernel.n_regs, "n_spills": kernel.n_spills, "max_abs_err": err}
    except Exception as exc:  # the outcome is the datum
        return {"case": name, "status": type(exc).__name__,
                "error": str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    results = []
    for m, n, k, bk, stages in ((2048, 2048, 128, 128, 3), (2048, 2048, 256, 256, 2)):
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        results.append(case(
            f"one K tile 256x256x{bk}, 8 warps, {stages} stages, {m}x{n}x{k}",
            lambda a=a, b=b, c=c, m=m, n=n, k=k, bk=bk, stages=stages: one_tile_matmul[
                (m // 256, n // 256)](a, b, c, m, n, k, BLOCK_SIZE_M=256, BLOCK_SIZE_N=256,
                                      BLOCK_SIZE_K=bk, num_warps=8, num_stages=stages),
            (c, lambda a=a, b=b: (a @ b))))
    size = 1000
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    results.append(case(
        "tutorial 03 1000^3 64x128x64 GROUP 8, 8 warps, 5 stages, leaky_relu",
        lambda: matmul_kernel[(triton.cdiv(size, 64) * triton.cdiv(size, 128),)](
            a, b, c, size, size, size, size, 1, size, 1, size, 1, BLOCK_SIZE_M=64,
            BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, ACTIVATION="leaky_relu",
            num_warps=8, num_stages=5),
        (c, lambda: torch.nn.functional.leaky_relu((a.float() @ b.float()), 0.01).half())))
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "floor_launch.jsonl", "w") as f:
        for r in results:
            print(json.dumps(r), flush=True)
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
