#!/bin/bash
# Short device call on nvidia-h200 (#6): the GPU-marked tests, then costtune's two-stage
# pruning (threaded AOT compile of the shortlist) at k=8 on the first shape of each family,
# resumed onto the runs in experiments/results/prune_vs_exhaustive.jsonl, and the same-process
# re-timing of any shape whose chosen configs changed.
#   run(command="COSTTUNE_COMMIT=<hash> bash experiments/device/call_final_h200.sh", carry=[".whl"])
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
mkdir -p "$OUT/prune"
cp experiments/results/prune_vs_exhaustive.jsonl experiments/results/prune_vs_exhaustive_retime.jsonl "$OUT/prune/"
date -u >>"$LOG"
timeout 100 python3 -m pytest -q -m gpu tests -p no:cacheprovider >>"$LOG" 2>&1
timeout 70 python3 experiments/prune_vs_exhaustive.py --resume --no-retime --out-dir "$OUT/prune" \
  --methods costtune2 --ks 8 --shapes-per-family 1 --budget-s 60 --deadline-s 60 >>"$LOG" 2>&1
timeout 40 python3 experiments/prune_vs_exhaustive.py --retime-only --deadline-s 35 \
  --out-dir "$OUT/prune" >>"$LOG" 2>&1
date -u >>"$LOG"
tail -3 "$LOG"
