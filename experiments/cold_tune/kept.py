"""Which configs costtune keeps for each cold-tune GEMM shape, on the CPU (no GPU, no timing):
the tutorial-03 kernel decorated with ``triton.autotune(prune_configs_by=
costtune.prune_configs_by(top_k=k))``, pruned through Triton's own ``prune_configs`` with
meta-device tensors. Predicts what a device call will compile (the slowest compile sets the
floor of a cold first call).

    PYTHONPATH=. python3 -m experiments.cold_tune.kept [--k 8]
"""

from __future__ import annotations

import argparse

import pandas as pd
import torch
import triton

import costtune
from experiments.cold_tune.cases import CASES, matmul_configs, shape_text


def kept_configs(problem: dict[str, int], k: int) -> list[triton.Config]:
    from user_kernels import matmul_kernel

    tuned = triton.autotune(matmul_configs(), key=["M", "N", "K"],
                            prune_configs_by=costtune.prune_configs_by(top_k=k))(matmul_kernel)
    m, n, kk = problem["M"], problem["N"], problem["K"]
    a = torch.empty(m, kk, dtype=torch.float16, device="meta")
    b = torch.empty(kk, n, dtype=torch.float16, device="meta")
    c = torch.empty(m, n, dtype=torch.float16, device="meta")
    args = dict(zip(tuned.arg_names, (a, b, c, m, n, kk, *a.stride(), *b.stride(),
                                      *c.stride())))
    tuned.nargs = args  # what Triton's run() sets before it prunes
    return tuned.prune_configs({"ACTIVATION": ""})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=8)
    args = ap.parse_args()
    rows = []
    for problem in CASES["tutorial03_matmul"].shapes:
        for c in kept_configs(problem, args.k):
            kw = c.kwargs
            acc = kw["BLOCK_SIZE_M"] * kw["BLOCK_SIZE_N"] / (32 * c.num_warps)
            rows.append({"shape": shape_text(problem), "BLOCK_M": kw["BLOCK_SIZE_M"],
                         "BLOCK_N": kw["BLOCK_SIZE_N"], "BLOCK_K": kw["BLOCK_SIZE_K"],
                         "num_warps": c.num_warps, "num_stages": c.num_stages,
                         "acc_per_thread": int(acc)})
    df = pd.DataFrame(rows)
    print(df.groupby("shape", sort=False).size().rename("kept").to_string())
    print(df.to_string(index=False))


if __name__ == "__main__":
    main()
