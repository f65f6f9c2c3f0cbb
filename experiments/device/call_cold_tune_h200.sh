#!/bin/bash
# Device call on nvidia-h200 (#20): cold first-call tuning, costtune (k = 1, 4, 8, 16; plain
# hook and costtune.autotune) vs exhaustive triton.autotune on user-written kernels, each run in
# a fresh process with fresh caches; then the chosen configs re-timed side by side.
#   run(command="export COSTTUNE_COMMIT=<hash> CASES=... DEADLINE=560; \
#       bash experiments/device/call_cold_tune_h200.sh", carry=[".whl"], timeout_s=600)
# Resumes from experiments/results/raw/cold_tune (earlier calls' records, copied back there).
# Writes $OUT/cold_tune/{runs.jsonl,retimes.jsonl} and $OUT/call.log.
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
{ date -u; nproc; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; } >>"$LOG"
timeout $((${DEADLINE:-540} + 30)) python3 -m experiments.cold_tune.run --out "$OUT/cold_tune" \
  --resume-from experiments/results/raw/cold_tune --cases "${CASES:-tutorial03_matmul}" \
  --shapes "${SHAPES:-3}" --deadline-s "${DEADLINE:-540}" --retime-s "${RETIME_S:-60}" \
  ${EXTRA:-} >>"$LOG" 2>&1
date -u >>"$LOG"
tail -40 "$LOG"
