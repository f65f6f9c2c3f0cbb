#!/bin/bash
# Device call on nvidia-h200-x2 (#9): the runner's GPU tests, then the Dask 1-vs-2-GPU
# experiment once per listed Triton-cache mode (a mode listed twice runs twice: the spread of
# the speed-up between repeats).
#   run(command="COSTTUNE_COMMIT=<hash> bash experiments/device/call_dask_x2.sh 8 cold cold",
#       carry=[".whl"])
# $1: compile processes per GPU worker (fixed in both runs); then cache modes (default: warm
# cold); DASK_FLAGS adds flags to every run (e.g. --extra-runs 1 1s) and SKIP_TESTS=1 skips
# the tests; DASK_TIMEOUT overrides each run's timeout. Each mode is one experiment folder
# $OUT/dask/<date>_<commit>_run<i>_<mode>/ (raw rows, runs.jsonl), and $OUT/dask/dask_scaling.md
# is the report over them; copy the folders into experiments/results/raw/dask_scaling/ and run
# `python -m experiments.dask_scaling.report` to fold them into results/dask_scaling.md.
# (Earlier calls also ran experiments/compile_scaling.py and
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
  timeout ${DASK_TIMEOUT:-$([ "$cache" = warm ] && echo 240 || echo 450)} \
    python3 -m experiments.dask_scaling.run --gpus 2 --cpu-per-gpu fixed --compile-workers "$CW" \
    --triton-cache "$cache" ${DASK_FLAGS:-} --out "$OUT/dask" \
    --name "$(date -u +%Y-%m-%dT%H%M)_${COSTTUNE_COMMIT:-nocommit}_run${i}_$cache" >>"$LOG" 2>&1
  date -u >>"$LOG"
done
python3 -m experiments.dask_scaling.report --raw "$OUT/dask" --out "$OUT/dask" >>"$LOG" 2>&1
tail -5 "$LOG"
