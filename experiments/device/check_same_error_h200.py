"""Device check (the hook's safety): a bug in the user's call that fails every config reaches
the user as fast as under exhaustive ``triton.autotune``.

Tutorial 03's matmul (``experiments/user_kernels.py``) with the 328-config list of the cold-tune
figures, launched with ``K`` passed as a float (a typical slip: ``K = x.shape[1] / 1``), which
fails to compile for every config. Each way of tuning runs in a fresh process with an empty
Triton cache: ``costtune.autotune(top_k=4)`` (parallel precompile on), ``triton.autotune`` with
the plain hook (``prune_configs_by=costtune.prune_configs_by("h200", 4)``) and exhaustive
``triton.autotune``. Reported per way: the exception's type and first line, seconds to it.

    python3 experiments/device/check_same_error_h200.py   # writes $OUT/same_error.jsonl
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WAYS = ("costtune", "hook", "exhaustive")


def child(way: str) -> dict:
    sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]
    import torch
    import triton
    from user_kernels import STYLES

    import costtune
    from experiments.cold_tune.cases import matmul_configs

    style = STYLES["tutorial03_matmul"]
    configs = matmul_configs()
    key = list(style.key)
    if way == "costtune":
        tuned = costtune.autotune(configs, key=key, top_k=4)(style.kernel)
    elif way == "hook":
        tuned = triton.autotune(configs, key=key, do_bench=costtune.graph_bench,
                                prune_configs_by=costtune.prune_configs_by("h200", 4))(
            style.kernel)
    else:
        tuned = triton.autotune(configs, key=key, do_bench=costtune.graph_bench)(style.kernel)
    inputs = style.make_inputs({"M": 4096, "N": 4096, "K": 4096}, device="cuda",
                               dtype=torch.float16)
    a, b, c = inputs["a"], inputs["b"], inputs["out"]
    (m, k), n = a.shape, b.shape[1]
    start = time.perf_counter()
    try:
        tuned[lambda meta: (triton.cdiv(m, meta["BLOCK_SIZE_M"]) *
                            triton.cdiv(n, meta["BLOCK_SIZE_N"]),)](
            a, b, c, m, n, float(k), a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            c.stride(0), c.stride(1), ACTIVATION="")
        torch.cuda.synchronize()
        error = None
    except Exception as exc:  # what the user meets
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
    return {"way": way, "n_configs": len(configs), "seconds": time.perf_counter() - start,
            "error": error, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "commit": os.environ.get("COSTTUNE_COMMIT", "?"),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main() -> None:
    if len(sys.argv) > 1:
        print(json.dumps(child(sys.argv[1])), flush=True)
        return
    out = Path(os.environ.get("OUT", "/tmp")) / "same_error.jsonl"
    for way in WAYS:
        env = {**os.environ, "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix=f"cache_{way}_")}
        proc = subprocess.run([sys.executable, __file__, way], capture_output=True, text=True,
                              env=env, timeout=300)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        rec = json.loads(lines[-1]) if lines else {"way": way, "error": "child failed",
                                                   "stderr": proc.stderr[-2000:]}
        with out.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        print(rec, flush=True)


if __name__ == "__main__":
    main()
