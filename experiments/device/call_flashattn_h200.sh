#!/bin/bash
# Device call on nvidia-h200 (this session): flash-attn's forward written as the library
# writes it ((B, S, H, D) queries, sizes as nheads / seqlen_q, heuristics, experiments/
# user_kernels_libs.py): its whole config list at three shapes and what each ranking method
# keeps (hook_user_spaces_h200.py), then a cold tune, costtune top_k=8 vs exhaustive.
#   run(command="export COSTTUNE_COMMIT=<hash>; bash experiments/device/call_flashattn_h200.sh",
#       carry=[".whl"], timeout_s=600)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } \
  >>"$LOG" 2>&1
timeout 240 python3 experiments/device/hook_user_spaces_h200.py --out "$OUT/spaces" \
  --budget-s 200 --styles flashattn_bshd >>"$LOG" 2>&1
echo "spaces rc=$?" >>"$LOG"
mkdir -p "$OUT/user_kernels"
timeout 200 python3 experiments/device/user_kernels_h200.py --out "$OUT/user_kernels" \
  --styles flashattn_bshd --budget-s 150 --deadline-s 190 >>"$LOG" 2>&1
echo "cold rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -30 "$LOG"
