#!/bin/bash
# Device call on nvidia-h200 (issue 18): collect the suite's new implementations over their whole
# spaces, test suites first (what leave-one-implementation-out scores), then train suites;
# resumable: the store starts from the committed datasets/h200 (whatever an earlier call
# brought back is already there), every workload's parts are packed into $OUT/parts.tar as
# soon as it is stored. BUDGET: seconds after which no new workload starts (default 470).
#   run(command="export COSTTUNE_COMMIT=<hash> BUDGET=470; bash experiments/device/call_impls_h200.sh",
#       carry=[".whl"], timeout_s=600)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
date -u >>"$LOG"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >>"$LOG" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >>"$LOG" 2>&1
SPECS=${SPECS:-"softmax_onepass:test softmax_multirow:test attention_tma:test gemm_tma:test gemm_tutorial:test softmax_onepass:train softmax_multirow:train attention_tma:train gemm_tma:train gemm_tutorial:train"}
python3 experiments/device/collect_all.py run --budget "${BUDGET:-470}" --out "$OUT" $SPECS >>"$LOG" 2>&1
echo "collect rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -5 "$LOG"
