#!/bin/bash
# Device call on nvidia-h200 (issues 18/19, a GEMM written as Inductor's matmul template,
# experiments/user_kernels_inductor.py): (1) its whole config list timed at SHAPES and what
# each ranking method keeps, (2) whole lists of it and of tutorial 09 at more shapes (the data
# experiments/learn_user_kernels.py replays the shipped and learned models on), (3) a cold
# costtune.autotune(top_k=8) vs exhaustive triton.autotune of it in fresh processes.
#   run(command="export COSTTUNE_COMMIT=<hash>; bash experiments/device/call_inductor_mm_h200.sh",
#       carry=[".whl"], timeout_s=600)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } \
  >>"$LOG" 2>&1
timeout 200 python3 experiments/device/hook_user_spaces_h200.py --out "$OUT/spaces" \
  --budget-s 150 --styles inductor_mm >>"$LOG" 2>&1
echo "spaces rc=$?" >>"$LOG"
timeout 170 python3 experiments/device/hook_user_spaces_h200.py --out "$OUT/learn" \
  --budget-s 130 --learn-shapes --styles inductor_mm tutorial09_tma_matmul >>"$LOG" 2>&1
echo "learn rc=$?" >>"$LOG"
mkdir -p "$OUT/user_kernels"
timeout 170 python3 experiments/device/user_kernels_h200.py --out "$OUT/user_kernels" \
  --styles inductor_mm --budget-s 120 --deadline-s 150 >>"$LOG" 2>&1
echo "cold rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -40 "$LOG"
