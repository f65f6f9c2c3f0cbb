#!/bin/bash
# Device call (issue 18): compiled + IR features of the new implementations on the host's 16
# CPUs (no GPU work), packed into $OUT/features.tar stage by stage.
#   run(command="export COSTTUNE_COMMIT=<hash>; bash experiments/device/call_features_h200.sh",
#       carry=[".whl"], timeout_s=560)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
date -u >>"$LOG"
nproc >>"$LOG"
timeout 520 python3 experiments/device/features_impls.py --out "$OUT" --workers 16 >>"$LOG" 2>&1
echo "features rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -14 "$LOG"
