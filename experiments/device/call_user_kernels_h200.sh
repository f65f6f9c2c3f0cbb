#!/bin/bash
# Device call on nvidia-h200 (#17): one cold tune per user-kernel style (Triton tutorials 02,
# 03, 06, 09 and an Inductor softmax), costtune top_k=8 vs exhaustive triton.autotune, each in
# a fresh process with a fresh Triton cache, then the chosen configs re-timed side by side.
#   run(command="bash experiments/device/call_user_kernels_h200.sh", carry=[".whl"],
#       timeout_s=600)
# Writes $OUT/user_kernels/{runs.jsonl,retime.jsonl,user_kernels_h200.md} and $OUT/call.log.
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
mkdir -p "$OUT/user_kernels"
{ date -u; nproc; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; } >>"$LOG"
timeout 590 python3 experiments/device/user_kernels_h200.py --out "$OUT/user_kernels" \
  --budget-s 480 --deadline-s 560 >>"$LOG" 2>&1
date -u >>"$LOG"
tail -25 "$LOG"
