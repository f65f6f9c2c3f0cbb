#!/bin/bash
# Short device call on nvidia-h200 (#6): the GPU-marked tests, then costtune's two-stage
# pruning (threaded AOT compile of the shortlist) at k=8 on the first shape of each family,
# resumed onto the runs in experiments/results/raw/prune_vs_exhaustive/runs.jsonl, and the
# same-process re-timing of any shape whose chosen configs changed.
#   run(command="COSTTUNE_COMMIT=<hash> bash experiments/device/call_final_h200.sh", carry=[".whl"])
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
mkdir -p "$OUT/prune"
cp experiments/results/raw/prune_vs_exhaustive/runs.jsonl \
  experiments/results/raw/prune_vs_exhaustive/retimes.jsonl "$OUT/prune/"
date -u >>"$LOG"
timeout 100 python3 -m pytest -q -m gpu tests -p no:cacheprovider >>"$LOG" 2>&1
timeout 70 python3 -m experiments.prune_vs_exhaustive.run --resume --no-retime --out "$OUT/prune" \
  --methods costtune2 --ks 8 --shapes-per-family 1 --budget-s 60 --deadline-s 60 >>"$LOG" 2>&1
timeout 40 python3 -m experiments.prune_vs_exhaustive.run --retime-only --deadline-s 35 \
  --out "$OUT/prune" >>"$LOG" 2>&1
python3 -m experiments.prune_vs_exhaustive.report --raw "$OUT/prune" --before none \
  --out "$OUT/prune" >>"$LOG" 2>&1
date -u >>"$LOG"
tail -3 "$LOG"
