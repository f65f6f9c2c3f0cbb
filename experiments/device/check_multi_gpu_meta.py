"""GPU check: the multi-GPU collector records, per part, the GPU that measured it.

    PYTHONPATH=. python3 experiments/device/check_multi_gpu_meta.py plan
    PYTHONPATH=. python3 experiments/device/check_multi_gpu_meta.py run STORE_DIR    # 2 GPUs
    PYTHONPATH=. python3 experiments/device/check_multi_gpu_meta.py report STORE_DIR

``run`` collects 4 softmax test workloads (8 configs each) on GPUs 0 and 1 into STORE_DIR
(one part per workload, resumable); ``report`` prints each part's GPU uuid, device and SM
clocks and checks that the parts name two different GPUs (exit status 1 if not).
"""

from __future__ import annotations

import sys

from costtune import Store
from costtune.collect import collect, suite_workloads

WORKLOADS = 4
MAX_CONFIGS = 8


def report(store: Store) -> int:
    uuids = set()
    for part in store.parts():
        meta = store.part_meta(part)
        uuids.add(meta.get("gpu_uuid"))
        print("part", meta["workload"], meta.get("gpu_uuid"), meta.get("cuda_visible_devices"),
              meta.get("sm_clock_start_mhz"), meta.get("sm_clock_end_mhz"))
    ok = len(uuids) == 2
    print(f"distinct gpu_uuid over parts: {len(uuids)} -> {'OK' if ok else 'NOT the two GPUs'}")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    step, *rest = argv or ["plan"]
    workloads = suite_workloads("softmax", "test")[:WORKLOADS]
    if step == "plan":
        print(f"plan: {[w.id for w in workloads]}, {MAX_CONFIGS} configs each, on GPUs 0 and 1")
        return 0
    if step not in ("run", "report") or len(rest) != 1:
        raise SystemExit(__doc__)
    store = Store(rest[0])
    if step == "run":
        print(collect(workloads, store, max_configs=MAX_CONFIGS, gpus=[0, 1]))
    return report(store)


if __name__ == "__main__":  # the GPU worker processes are spawned: they import this file
    sys.exit(main(sys.argv[1:]))
