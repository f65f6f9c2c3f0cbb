#!/bin/bash
# Device call on nvidia-h200 for issue 21 (safe by construction): the GPU tests of the guard,
# then experiments/device/safety_h200.py (unfiltered 384-config GEMM at 8192^3 with top_k 1/4/8,
# tutorial-06-style attention tuned with check=). EXHAUSTIVE=1 adds plain triton.autotune over
# the 384 configs (~3 min cold) when the time allows.
#   run(command="COSTTUNE_COMMIT=<hash> bash experiments/device/call_safety_h200.sh", carry=[".whl"])
# Results: $OUT/safety_h200.jsonl (a rerun with the same $OUT contents skips finished runs).
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
{ date -u; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >>"$LOG"
timeout 120 python3 -m pytest -q -m gpu tests/test_guard.py -p no:cacheprovider >>"$LOG" 2>&1
timeout 420 python3 experiments/device/safety_h200.py --out "$OUT" --deadline-s 360 \
  ${EXHAUSTIVE:+--exhaustive} >>"$LOG" 2>&1
date -u >>"$LOG"
tail -5 "$LOG"
