#!/bin/bash
# Device call on nvidia-h200-x2 (#9): the multi-GPU collector's per-part GPU metadata, then
# the Dask 1-vs-2-GPU experiment with a warm shared Triton cache and with cold caches.
#   run(command="COSTTUNE_COMMIT=<hash> bash experiments/device/call_dask_x2.sh 8", carry=[".whl"])
# $1: compile processes per GPU worker (fixed in both runs). Everything lands in $OUT.
# (The first call of 2026-11-29's third session also ran experiments/compile_scaling.py.)
set -u
CW=${1:-8}
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
date -u >>"$LOG"
timeout 90 python3 experiments/device/check_multi_gpu_meta.py /tmp/mgpu_store >>"$LOG" 2>&1
for cache in warm cold; do
  timeout $([ $cache = warm ] && echo 240 || echo 330) python3 experiments/dask_scaling.py \
    --gpus 2 --cpu-per-gpu fixed --compile-workers "$CW" --triton-cache $cache \
    --out "$OUT/dask" >>"$LOG" 2>&1
  date -u >>"$LOG"
done
tail -5 "$LOG"
