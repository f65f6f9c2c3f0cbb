#!/bin/bash
# Device call (nvidia-h200, or nvidia-h100-x1 when no H200 starts: nothing here is a dataset
# timing): a probe of softmax_tma's GPU fault, the GPU-marked tests, the floor / compile-error launch check
# (check_floor_launch_h200.py), then safety_h200.py with a deadline.
#   run(command="export COSTTUNE_COMMIT=<hash>; bash experiments/device/call_verify_gpu.sh",
#       carry=[".whl"], timeout_s=600)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
{ date -u; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >>"$LOG"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >>"$LOG" 2>&1
timeout 90 python3 experiments/device/probe_softmax_tma.py --out "$OUT" --jobs 12 >>"$LOG" 2>&1
echo "tma probe rc=$?" >>"$LOG"
timeout 200 python3 -m pytest -q -m gpu tests/ --ignore=tests/test_distributed.py \
  --ignore=tests/test_search.py -p no:cacheprovider >>"$LOG" 2>&1
echo "pytest rc=$?" >>"$LOG"
timeout 60 python3 experiments/device/check_floor_launch_h200.py --out "$OUT" >>"$LOG" 2>&1
echo "floor check rc=$?" >>"$LOG"
timeout "${SAFETY_S:-240}" python3 experiments/device/safety_h200.py --out "$OUT" \
  --deadline-s "$(( ${SAFETY_S:-240} - 30 ))" >>"$LOG" 2>&1
echo "safety rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -40 "$LOG"
