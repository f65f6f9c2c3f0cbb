#!/bin/bash
# Device call on nvidia-h200 (this session's hook review): (1) tutorial 06 at sequences shorter
# than its biggest BLOCK_M, with and without its own early_config_prune passed to
# costtune.autotune (check_user_filter_h200.py); (2) the cost of learn=True to a program tuning
# tutorial 03 at five shapes in a row, learn off then on, fresh processes and caches
# (check_learn_latency_h200.py); (3) Inductor's addmm + ReLU template over a Linear's 3-D
# activation: its whole list and what each ranking method keeps (hook_user_spaces_h200.py).
#   run(command="export COSTTUNE_COMMIT=<hash>; bash experiments/device/call_filter_linear_h200.sh",
#       carry=[".whl"], timeout_s=600)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } \
  >>"$LOG" 2>&1
mkdir -p "$OUT/filter" "$OUT/latency"
timeout 120 python3 experiments/device/check_user_filter_h200.py --out "$OUT/filter" \
  >>"$LOG" 2>&1
echo "filter rc=$?" >>"$LOG"
for mode in off on; do
  TRITON_CACHE_DIR=/tmp/triton_latency_$mode COSTTUNE_HOME=/tmp/costtune_home_$mode \
    timeout 150 python3 experiments/device/check_learn_latency_h200.py --out "$OUT/latency" \
    --mode $mode >>"$LOG" 2>&1
  echo "latency $mode rc=$?" >>"$LOG"
done
timeout 200 python3 experiments/device/hook_user_spaces_h200.py --out "$OUT/spaces" \
  --budget-s 160 --styles inductor_linear >>"$LOG" 2>&1
echo "spaces rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -45 "$LOG"
