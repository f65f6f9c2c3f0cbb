#!/bin/bash
# Device call on nvidia-h200 (#9): experiments/idle_gap.py (does a config's time depend on how
# long the GPU idled before it?), with nvidia-smi sampling the SM clock and power every 20 ms
# beside it (clocks.csv).
#   run(command="COSTTUNE_COMMIT=<hash> bash experiments/device/call_idle_h200.sh",
#       carry=[".whl"])
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
mkdir -p "$OUT/idle"
{ date -u; nproc; } >>"$LOG"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
  --format=csv -lms 20 >"$OUT/idle/clocks.csv" 2>>"$LOG" &
SMI=$!
timeout ${IDLE_TIMEOUT:-300} python3 experiments/idle_gap.py --out "$OUT/idle" ${IDLE_FLAGS:-} \
  >>"$LOG" 2>&1
kill $SMI
date -u >>"$LOG"
tail -20 "$LOG"
