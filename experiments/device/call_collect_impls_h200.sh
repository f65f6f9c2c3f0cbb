#!/bin/bash
# Device call on nvidia-h200 (issue 18): a new implementation's collection over its whole
# space, test suite first, each workload timed beside the torch op in one run, then its compiled
# + IR features on the host's CPUs (AOT compiles of the collected rows); resumable (the store starts from the committed datasets/h200; parts packed into
# $OUT/parts.tar after every workload, features into $OUT/features.tar).
# IMPLS: implementations (default attention_persistent; softmax_splitrow softmax_tma: 2026-12-05); BUDGET: seconds after which no new
# workload starts (default 360); FEATURES_S: limit on the features step (default 150; 0 skips).
# collect_all refuses a GPU other than the store's (an H100 lent for an nvidia-h200 call without
# needs_h200): pass needs_h200=true.
#   run(command="export COSTTUNE_COMMIT=<hash>; bash experiments/device/call_collect_impls_h200.sh",
#       carry=[".whl"], timeout_s=600)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
IMPLS=${IMPLS:-attention_persistent}
date -u >>"$LOG"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >>"$LOG" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >>"$LOG" 2>&1
SPECS=""
for i in $IMPLS; do SPECS="$SPECS $i:test $i:train"; done
python3 experiments/device/collect_all.py run --budget "${BUDGET:-360}" --out "$OUT" $SPECS >>"$LOG" 2>&1
echo "collect rc=$?" >>"$LOG"
date -u >>"$LOG"
[ "${FEATURES_S:-150}" = 0 ] || timeout "${FEATURES_S:-150}" python3 experiments/device/features_impls.py \
  --out "$OUT" --workers 16 --impls $IMPLS --dataset .device/store >>"$LOG" 2>&1
echo "features rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -12 "$LOG"
