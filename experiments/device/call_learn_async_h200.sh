#!/bin/bash
# Device call on nvidia-h200 (this session): (1) learn=True's cost to a program tuning
# tutorial 03 at five shapes in a row, now that no tuning waits for the update, learn off then
# on, fresh processes and caches (check_learn_latency_h200.py); (2) a cold tune of the
# Inductor addmm + ReLU style, costtune top_k=8 vs exhaustive, fresh processes, the picks
# re-timed side by side (user_kernels_h200.py).
#   run(command="export COSTTUNE_COMMIT=<hash>; bash experiments/device/call_learn_async_h200.sh",
#       carry=[".whl"], timeout_s=600)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } \
  >>"$LOG" 2>&1
mkdir -p "$OUT/latency" "$OUT/user_kernels"
for mode in off on; do
  TRITON_CACHE_DIR=/tmp/triton_async_$mode COSTTUNE_HOME=/tmp/costtune_async_$mode \
    timeout 150 python3 experiments/device/check_learn_latency_h200.py --out "$OUT/latency" \
    --mode $mode >>"$LOG" 2>&1
  echo "latency $mode rc=$?" >>"$LOG"
done
timeout 250 python3 experiments/device/user_kernels_h200.py --out "$OUT/user_kernels" \
  --styles inductor_linear --budget-s 180 --deadline-s 230 >>"$LOG" 2>&1
echo "cold rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -30 "$LOG"
