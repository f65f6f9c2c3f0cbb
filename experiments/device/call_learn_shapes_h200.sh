#!/bin/bash
# Device call on nvidia-h200 (issue 19, learn=True on kernels written outside the project):
# every config of each user-style kernel timed whole at LEARN_SHAPES
# (experiments/device/hook_user_spaces_h200.py --learn-shapes), the data
# experiments/learn_user_kernels.py replays the tuning calls of learn=True over; resumable
# through $OUT/spaces.jsonl.
#   run(command="export COSTTUNE_COMMIT=<hash> BUDGET=420; bash experiments/device/call_learn_shapes_h200.sh",
#       carry=[".whl"], timeout_s=600)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
date -u >>"$LOG"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >>"$LOG" 2>&1
timeout $(( ${BUDGET:-420} + 150 )) python3 experiments/device/hook_user_spaces_h200.py \
  --out "$OUT" --budget-s "${BUDGET:-420}" --learn-shapes >>"$LOG" 2>&1
echo "rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -40 "$LOG"
