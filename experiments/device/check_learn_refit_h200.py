"""On the H200: ``costtune.autotune(learn=True)`` on kernels written outside the project, across
processes, as a user's programs tune them: ``--phase 1`` tunes each kernel at its first shapes
(the first call of each benchmarks the whole list, ``top_k=len(configs)``, the others
``--top-k``), and each tuning refits the kernel's model (the shipped model's training table
plus the harvest); ``--phase 2``, a new process with the same ``COSTTUNE_HOME``, tunes other
shapes and must rank with the learned file.

Per tuning call, one JSON line in ``$OUT/learn_refit.jsonl``: the phase, style and shape, the
call's seconds, the seconds ``learn=True`` spent inside it (``Learner.record``: reading the
rows; the update runs in a thread) and waiting for the update after it (``wait_s``), the configs
benchmarked, what ranked (``last.model``: the shipped name or the kernel's learned file), how
the model was learned (``refit`` / ``continue``), what was skipped, the config picked and its
output's error against torch. A check, not a quality figure: quality is replayed on the
measured lists by ``experiments/learn_user_kernels.py``.

    export COSTTUNE_HOME=$OUT/home
    python3 experiments/device/check_learn_refit_h200.py --out $OUT --phase 1
    python3 experiments/device/check_learn_refit_h200.py --out $OUT --phase 2
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
    "tutorial03_matmul": {
        1: [{"M": 4096, "N": 4096, "K": 4096}, {"M": 2048, "N": 11008, "K": 4096}],
        2: [{"M": 1024, "N": 5120, "K": 5120}, {"M": 512, "N": 8192, "K": 8192}]},
    "inductor_softmax": {1: [{"rows": 32768, "cols": 2048}, {"rows": 8192, "cols": 8192}],
                         2: [{"rows": 4096, "cols": 30000}, {"rows": 16384, "cols": 4096}]},
    "tutorial02_softmax": {1: [{"rows": 8192, "cols": 3000}, {"rows": 4096, "cols": 4096}],
                           2: [{"rows": 32768, "cols": 1024}, {"rows": 2048, "cols": 12000}]},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--phase", type=int, choices=(1, 2), required=True)
    ap.add_argument("--top-k", type=int, default=8)
    args = ap.parse_args()
    import torch
    from user_kernels import STYLES, relative_error

    import costtune
    from costtune.model.learned import current_model
    from experiments.device.hook_user_spaces_h200 import configs_of

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "learn_refit.jsonl"
    for name, phases in RUNS.items():
        style, configs = STYLES[name], configs_of(name)
        for i, problem in enumerate(phases[args.phase]):
            k = len(configs) if args.phase == 1 and i == 0 else args.top_k
            tuner = costtune.autotune(configs, key=list(style.key), family=style.family,
                                      top_k=k, learn=True)(style.kernel)
            spent: list[float] = []
            record_fn = tuner.learner.record

            def timed(*a, _record=record_fn, _spent=spent, **kw):
                start = time.perf_counter()
                try:
                    return _record(*a, **kw)
                finally:
                    _spent.append(time.perf_counter() - start)

            tuner.learner.record = timed
            inputs = style.make_inputs(problem, device="cuda", dtype=style.gpu_dtype)
            start = time.perf_counter()
            out = style.launch(tuner, inputs)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            start = time.perf_counter()
            tuner.learner.wait()  # the update runs in a thread after the call returned
            wait_s = time.perf_counter() - start
            last = tuner.early_config_prune.last
            updated = tuner.learner.updated
            how = current_model(updated[-1].parent)[1].get("method") if updated else None
            record = {"phase": args.phase, "style": name, "problem": problem, "top_k": k,
                      "seconds": seconds, "learn_s": sum(spent), "wait_s": wait_s,
                      "benchmarked": len(tuner.configs_timings),
                      "ranked_by": last.model if last else None, "learned_by": how,
                      "updated": [str(p) for p in updated],
                      "skipped": list(tuner.learner.skipped),
                      "picked": str(tuner.best_config),
                      "rel_err": relative_error(out, style.reference(inputs))}
            with path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(json.dumps({k: record[k] for k in ("phase", "style", "problem", "seconds",
                                                     "learn_s", "wait_s", "ranked_by",
                                                     "learned_by", "rel_err")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
