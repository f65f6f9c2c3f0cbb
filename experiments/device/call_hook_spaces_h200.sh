#!/bin/bash
# Device call on nvidia-h200 (issue 18, the hook's two stages on kernels written outside the
# project): every config of each user-style kernel timed at a few shapes, then what each
# ranking method keeps (experiments/device/hook_user_spaces_h200.py); resumable through the
# jsonl files in $OUT.
#   run(command="export COSTTUNE_COMMIT=<hash> BUDGET=420; bash experiments/device/call_hook_spaces_h200.sh",
#       carry=[".whl"], timeout_s=600)
# STYLES="a b" limits it to those styles (default: every style). REQUIRE_GPU=H200 ends the
# call at once on any other card (a kind that may start an H100 then costs only its start).
set -u
if [ -n "${REQUIRE_GPU:-}" ] && ! nvidia-smi --query-gpu=name --format=csv,noheader \
    | grep -q "$REQUIRE_GPU"; then
  echo "not a $REQUIRE_GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader)): nothing run" \
    | tee "$OUT/call.log"
  exit 0
fi
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
date -u >>"$LOG"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >>"$LOG" 2>&1
timeout $(( ${BUDGET:-420} + 150 )) python3 experiments/device/hook_user_spaces_h200.py \
  --out "$OUT" --budget-s "${BUDGET:-420}" ${STYLES:+--styles $STYLES} >>"$LOG" 2>&1
echo "rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -30 "$LOG"
