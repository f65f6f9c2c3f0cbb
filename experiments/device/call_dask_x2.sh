#!/bin/bash
# Device call on nvidia-h200-x2 (#9): the runner's GPU tests, then the Dask 1-vs-2-GPU
# experiment once per listed Triton-cache mode (a mode listed twice runs twice: the spread of
# the speed-up between repeats).
#   run(command="COSTTUNE_COMMIT=<hash> bash experiments/device/call_dask_x2.sh 8 cold cold",
#       carry=[".whl"])
# $1: compile processes per GPU worker (fixed in both runs); then cache modes (default: warm
# cold); DASK_FLAGS adds flags to every dask_scaling.py run (e.g. --noise-run) and
# SKIP_TESTS=1 skips the tests; DASK_TIMEOUT overrides each run's timeout. Everything lands
# in $OUT. (Earlier calls also ran experiments/compile_scaling.py and
# experiments/device/check_multi_gpu_meta.py.)
set -u
CW=${1:-8}
shift || true
MODES=${*:-warm cold}
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
date -u >>"$LOG"
[ "${SKIP_TESTS:-0}" = 1 ] || timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py \
  -p no:cacheprovider >>"$LOG" 2>&1
i=0
for cache in $MODES; do
  i=$((i + 1))
  timeout ${DASK_TIMEOUT:-$([ "$cache" = warm ] && echo 240 || echo 450)} python3 experiments/dask_scaling.py \
    --gpus 2 --cpu-per-gpu fixed --compile-workers "$CW" --triton-cache "$cache" ${DASK_FLAGS:-} \
    --out "$OUT/dask/run$i" >>"$LOG" 2>&1
  date -u >>"$LOG"
done
tail -5 "$LOG"
