"""On the H200: ``costtune.autotune(two_stage=True, learn=True)`` on kernels written outside the
project, two shapes each in one process, as a user's program tunes them: stage 2 compiles the
user's kernel, the first call teaches both per-kernel models, the second ranks with them.

Per tuning call, one JSON line in ``$OUT/two_stage_learn.jsonl``: the style and shape, the
seconds of the call, what the hook kept, whose kernel stage 2 compiled, which stage-2 model
ranked (the shipped one, or the file the first call learned), the models written, why a
model was not updated, how each was learned (``refit`` on the base's training table, or
``continue``d), the seconds the updates ran after the call returned, the config picked and
its output's error against torch. Checks, not
timings: the timings come from ``hook_user_spaces_h200.py``.

    COSTTUNE_HOME=$OUT/home python3 experiments/device/check_two_stage_learn_h200.py --out $OUT
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

RUNS = {
    "tutorial03_matmul": [{"M": 4096, "N": 4096, "K": 4096}, {"M": 1024, "N": 5120, "K": 5120}],
    "inductor_softmax": [{"rows": 32768, "cols": 2048}, {"rows": 8192, "cols": 8192}],
    "tutorial06_attention": [{"B": 4, "H": 16, "S": 2048, "D": 64, "causal": 1},
                             {"B": 2, "H": 16, "S": 4096, "D": 128, "causal": 0}],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import torch
    from user_kernels import STYLES, relative_error

    import costtune
    from costtune.model.learned import current_model
    from experiments.device.hook_user_spaces_h200 import configs_of

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "two_stage_learn.jsonl"
    for name, shapes in RUNS.items():
        style = STYLES[name]
        tuner = costtune.autotune(configs_of(name), key=list(style.key), family=style.family,
                                  top_k=8, two_stage=True, learn=True)(style.kernel)
        for problem in shapes:
            inputs = style.make_inputs(problem, device="cuda", dtype=style.gpu_dtype)
            start = time.perf_counter()
            out = style.launch(tuner, inputs)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            start = time.perf_counter()
            tuner.learner.wait()  # the updates run in a thread after the call returned
            wait_s = time.perf_counter() - start
            last = tuner.early_config_prune.last
            learned_by = {str(p): current_model(p.parent)[1].get("method")
                          for p in tuner.learner.updated}
            record = {"style": name, "problem": problem, "seconds": seconds, "wait_s": wait_s,
                      "learned_by": learned_by,
                      "kept": list(last.kept), "stage2": last.stage2,
                      "stage2_kernel": last.stage2_kernel, "stage2_model": last.stage2_model,
                      "updated": [str(p) for p in tuner.learner.updated],
                      "skipped": list(tuner.learner.skipped),
                      "picked": str(tuner.best_config),
                      "rel_err": relative_error(out, style.reference(inputs))}
            with path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(json.dumps({k: record[k] for k in ("style", "problem", "seconds", "wait_s",
                                                     "stage2_kernel", "stage2_model",
                                                     "learned_by", "rel_err")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
