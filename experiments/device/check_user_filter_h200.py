"""On the H200: tutorial 06's attention (experiments/user_kernels.py, host TensorDescriptors
over [Z*H*N_CTX, HEAD_DIM] views) at sequences shorter than its biggest BLOCK_M, where the
tutorial's own ``early_config_prune`` drops BLOCK_M > N_CTX: such a program reads and writes
the next head's rows. Per shape, in one process: ``costtune.autotune(top_k=4)`` without the
filter and with it (``prune_configs_by={"early_config_prune": ...}``), and exhaustive
``triton.autotune`` with the filter; each tuned kernel then launched ``--repeats`` times on the
same inputs and compared with torch (max relative error over the launches, and how many
launches exceeded the style's tolerance). One JSON line per (shape, method) in
``$OUT/user_filter.jsonl``: what was kept, filtered and picked, tuning seconds, errors.

    python3 experiments/device/check_user_filter_h200.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

SHAPES = [{"B": 8, "H": 16, "S": 64, "D": 64, "causal": 0},
          {"B": 8, "H": 16, "S": 64, "D": 128, "causal": 1},
          {"B": 16, "H": 16, "S": 64, "D": 64, "causal": 1}]


def keep_fitting(configs, named_args, **kwargs):
    """Tutorial 06's prune_invalid_configs: no query block longer than the sequence."""
    n_ctx = kwargs.get("N_CTX", named_args.get("N_CTX"))
    return [c for c in configs if c.kwargs.get("BLOCK_M", 0) <= n_ctx]


def run(method: str, problem: dict, repeats: int) -> dict:
    import torch
    import triton
    from user_kernels import STYLES, relative_error

    import costtune

    style = STYLES["tutorial06_attention"]
    configs = style.configs("gpu")
    key = list(style.key)
    if method == "costtune":
        tuner = costtune.autotune(configs, key=key, top_k=4)(style.kernel)
    elif method == "costtune+filter":
        tuner = costtune.autotune(configs, key=key, top_k=4,
                                  prune_configs_by={"early_config_prune": keep_fitting}
                                  )(style.kernel)
    else:
        tuner = triton.autotune(configs, key=key, prune_configs_by={
            "early_config_prune": keep_fitting})(style.kernel)
    inputs = style.make_inputs(problem, device="cuda", dtype=style.gpu_dtype)
    ref = style.reference(inputs)
    start = time.perf_counter()
    style.launch(tuner, inputs)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    errors = []
    for _ in range(repeats):
        inputs["out"].zero_()
        errors.append(relative_error(style.launch(tuner, inputs), ref))
    last = getattr(tuner.early_config_prune, "last", None) if method != "exhaustive" else None
    return {"method": method, "problem": problem, "n_configs": len(configs),
            "benchmarked": len(getattr(tuner, "configs_timings", {}) or {}),
            "filtered": getattr(last, "filtered", None),
            "kept": list(last.kept) if last else None, "picked": str(tuner.best_config),
            "picked_block_m": tuner.best_config.kwargs.get("BLOCK_M"),
            "tuning_s": seconds, "max_rel_err": max(errors),
            "bad_launches": sum(e > style.tolerance for e in errors), "repeats": repeats,
            "tolerance": style.tolerance}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for problem in SHAPES:
        for method in ("costtune", "costtune+filter", "exhaustive"):
            try:
                record = run(method, problem, args.repeats)
            except Exception as exc:  # a failure is data
                record = {"method": method, "problem": problem,
                          "error": f"{type(exc).__name__}: {exc}"[:400]}
            with (args.out / "user_filter.jsonl").open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(json.dumps({k: record.get(k) for k in ("method", "problem", "picked_block_m",
                                                          "filtered", "max_rel_err",
                                                          "bad_launches", "error")}),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
