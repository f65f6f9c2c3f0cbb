"""GPU check: the multi-GPU collector records, per part, the GPU that measured it.

    PYTHONPATH=. python3 experiments/device/check_multi_gpu_meta.py STORE_DIR
"""

import sys

from costtune.collect import collect, suite_workloads
from costtune.store.dataset import Store

if __name__ == "__main__":  # the GPU worker processes are spawned: they import this file
    store = Store(sys.argv[1])
    print(collect(suite_workloads("softmax", "test")[:4], store, max_configs=8, gpus=[0, 1]))
    uuids = set()
    for part in store.parts():
        meta = store.part_meta(part)
        uuids.add(meta.get("gpu_uuid"))
        print("part", meta["workload"], meta.get("gpu_uuid"), meta.get("cuda_visible_devices"),
              meta.get("sm_clock_start_mhz"), meta.get("sm_clock_end_mhz"))
    print(f"distinct gpu_uuid over parts: {len(uuids)} -> "
          f"{'OK' if len(uuids) == 2 else 'NOT the two GPUs'}")
