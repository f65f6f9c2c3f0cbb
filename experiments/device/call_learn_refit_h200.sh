#!/bin/bash
# Device call on nvidia-h200 (issue 19): costtune.autotune(learn=True) refitting the shipped
# model on user-style kernels, phase 1 and phase 2 in two processes sharing COSTTUNE_HOME
# (experiments/device/check_learn_refit_h200.py).
#   run(command="export COSTTUNE_COMMIT=<hash>; bash experiments/device/call_learn_refit_h200.sh",
#       carry=[".whl"], timeout_s=600)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
export COSTTUNE_HOME=$OUT/home
date -u >>"$LOG"
for phase in 1 2; do
  timeout 270 python3 experiments/device/check_learn_refit_h200.py --out "$OUT" \
    --phase $phase >>"$LOG" 2>&1
  echo "phase $phase rc=$?" >>"$LOG"
done
rm -rf "$OUT/home"  # the learned models: their records say what they were
date -u >>"$LOG"
tail -30 "$LOG"
