#!/bin/bash
# Device call on nvidia-h200-x2 (#9): host CPU facts, compile scaling with pool size, the
# multi-GPU collector's per-part GPU metadata, then the Dask 1-vs-2-GPU experiment.
#   run(command="COSTTUNE_COMMIT=<hash> bash experiments/device/call_dask_x2.sh 8", carry=[".whl"])
# $1: compile processes per GPU worker (fixed in both runs). Everything lands in $OUT.
set -u
CW=${1:-8}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
LOG=$OUT/call.log
{
  date -u; nvidia-smi -L; lscpu | grep -E "^(CPU\(s\)|Thread|Core|Socket|Model name)"
  for i in 1 2 3; do /usr/bin/time -f "nvidia-smi query %e s" nvidia-smi \
    --query-gpu=clocks.sm --format=csv,noheader,nounits -i 0; done
  python3 -c "import time; t=time.perf_counter(); import xgboost, sklearn; print('import xgboost+sklearn %.2f s' % (time.perf_counter()-t))"
} >>"$LOG" 2>&1
timeout 120 python3 experiments/compile_scaling.py --procs 8,16,32 --out "$OUT" >>"$LOG" 2>&1
timeout 90 python3 - >>"$LOG" 2>&1 <<'PY'
import os
from costtune.collect import collect, suite_workloads
from costtune.store import Store
store = Store(os.environ["OUT"] + "/mgpu_store")
print(collect(suite_workloads("softmax", "test")[:4], store, max_configs=8, gpus=[0, 1]))
for p in store.parts():
    m = store.part_meta(p)
    print("part", m["workload"], m.get("gpu_uuid"), m.get("cuda_visible_devices"),
          m.get("sm_clock_start_mhz"), m.get("sm_clock_end_mhz"))
PY
rm -rf "$OUT/mgpu_store"
timeout 400 python3 experiments/dask_scaling.py --gpus 2 --cpu-per-gpu fixed \
  --compile-workers "$CW" --out "$OUT/dask" >>"$LOG" 2>&1
tail -5 "$LOG"
