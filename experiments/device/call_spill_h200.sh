#!/bin/bash
# Device call on nvidia-h200 (#20, eleventh session): measure the GEMM tiles the original
# kernel's space now admits (128x256 / 256x128 at 4 warps, 256x256 at 8: 256 fp32 accumulators
# per thread, they spill) on its train then test suites. Resumable like call_impls_h200.sh: the
# store starts from the committed datasets/h200, so only the new configs of each workload are
# timed (a row already stored is never measured again); parts packed into $OUT/parts.tar.
# Every run times the torch op too (ref_time_ms): the old and new runs of a workload compare
# through it (drift between runs), the rows are not rescaled.
#   run(command="export COSTTUNE_COMMIT=<hash> BUDGET=430; bash experiments/device/call_spill_h200.sh",
#       carry=[".whl"], timeout_s=600)
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
{ date -u; nproc; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } >>"$LOG" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >>"$LOG" 2>&1
python3 experiments/device/collect_all.py run --budget "${BUDGET:-430}" --out "$OUT" \
  ${SPECS:-gemm:train gemm:test} >>"$LOG" 2>&1
echo "collect rc=$?" >>"$LOG"
date -u >>"$LOG"
tail -8 "$LOG"
