"""On the H200: plain ``triton.autotune`` with ``costtune.prune_configs_by`` (no family, no
mapping) on user-style kernels with their whole config lists (tutorial 09's TMA list holds
configs that do not fit; tutorial 02 passes BLOCK_SIZE at the launch; tutorial 03's 328
configs), top_k 1 and 4: the tuning runs (nothing kept raises), the output matches torch, and
what the hook replaced is printed. One JSON line per run.

    python3 experiments/device/check_launch_h200.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

RUNS = (("tutorial09_tma_matmul", {"M": 4096, "N": 4096, "K": 4096}),
        ("tutorial02_softmax", {"rows": 8192, "cols": 3000}),
        ("tutorial03_matmul", {"M": 1024, "N": 5120, "K": 5120}))


def tune(name: str, problem: dict, k: int) -> dict:
    import torch
    import triton
    from user_kernels import STYLES, relative_error

    import costtune
    from experiments.device.hook_user_spaces_h200 import configs_of

    style = STYLES[name]
    hook = costtune.prune_configs_by("h200", k, preload=False)  # no family, no mapping
    tuner = triton.autotune(configs_of(name), key=list(style.key), prune_configs_by=hook,
                            do_bench=costtune.graph_bench)(style.kernel)
    inputs = style.make_inputs(problem, device="cuda", dtype=style.gpu_dtype)
    try:
        out = style.launch(tuner, inputs)
        torch.cuda.synchronize()
        err, raised = relative_error(out, style.reference(inputs)), None
    except Exception as exc:  # what a user would meet
        err, raised = None, f"{type(exc).__name__}: {str(exc)[:200]}"
    last = hook["early_config_prune"].last
    return {"style": name, "k": k, "n_configs": len(tuner.configs), "kept": len(last.kept),
            "replaced": list(last.replaced.values()), "raised": raised, "rel_err": err}


def main() -> int:
    for name, problem in RUNS:
        for k in (1, 4):
            print(json.dumps(tune(name, problem, k)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
