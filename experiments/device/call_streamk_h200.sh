#!/bin/bash
# Device call on nvidia-h200 (issue 18, GEMM vs cuBLAS): collect gemm_streamk (stream-K for the
# last partial wave) over its whole space, test suite then train suite, each workload timed
# beside cuBLAS in its own run; resumable (the store starts from the committed datasets/h200,
# parts packed into $OUT/parts.tar after every workload). Then its compiled + IR features on
# the host's CPUs from the collected rows ($OUT/features.tar).
# BUDGET: seconds after which no new workload starts (default 330); FEATURES_S: limit on the
# features step (default 170; 0 skips it).
#   run(command="export COSTTUNE_COMMIT=<hash> BUDGET=330; bash experiments/device/call_streamk_h200.sh",
#       carry=[".whl"], timeout_s=600)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
date -u >>"$LOG"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >>"$LOG" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >>"$LOG" 2>&1
python3 experiments/device/collect_all.py run --budget "${BUDGET:-330}" --out "$OUT" \
  gemm_streamk:test gemm_streamk:train >>"$LOG" 2>&1
echo "collect rc=$?" >>"$LOG"
date -u >>"$LOG"
[ "${FEATURES_S:-170}" = 0 ] || timeout "${FEATURES_S:-170}" python3 experiments/device/features_impls.py --out "$OUT" --workers 16 \
  --impls gemm_streamk --dataset .device/store >>"$LOG" 2>&1
echo "features rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -12 "$LOG"
