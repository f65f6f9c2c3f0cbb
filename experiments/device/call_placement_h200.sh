#!/bin/bash
# Device call on nvidia-h200 (#9): the runner's and the hook's GPU tests (the runner changed
# since they last ran on a GPU: settle_memory, cancel on error), then
# experiments/placement_noise.py (does a row depend on what the process measured before?).
#   run(command="COSTTUNE_COMMIT=<hash> bash experiments/device/call_placement_h200.sh",
#       carry=[".whl"])
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
{ date -u; nproc; } >>"$LOG"
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider >>"$LOG" 2>&1
timeout 100 python3 -m pytest -q -m gpu tests/test_hook.py -p no:cacheprovider >>"$LOG" 2>&1
date -u >>"$LOG"
timeout ${PLACEMENT_TIMEOUT:-330} python3 experiments/placement_noise.py --out "$OUT/placement" \
  ${PLACEMENT_FLAGS:-} >>"$LOG" 2>&1
date -u >>"$LOG"
tail -25 "$LOG"
