#!/bin/bash
# Device call on nvidia-h200 (#6): GPU tests of the hook and the runner, costtune's pruned
# tuning at k=1,4,8,16 on the six prune_vs_exhaustive shapes with the current hook (model
# preload, threaded precompile, graph_bench timing of the survivors), two-stage k=8,
# same-process re-timing of each shape's chosen configs, and the hook-overhead benchmark.
#   run(command="COSTTUNE_COMMIT=<hash> bash experiments/device/call_prune_h200.sh", carry=[".whl"])
# Resumes from experiments/results/raw/prune_vs_exhaustive/runs_base.jsonl: the exhaustive and
# tutorial runs of earlier calls (plain triton.autotune does not depend on costtune's code).
# Raw results: $OUT/prune/{runs,retimes}.jsonl; $OUT/prune/prune_vs_exhaustive.md their report.
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
mkdir -p "$OUT/prune"
cp experiments/results/raw/prune_vs_exhaustive/runs_base.jsonl "$OUT/prune/runs.jsonl"
{ date -u; nproc; } >>"$LOG"
timeout 100 python3 -m pytest -q -m gpu tests/test_hook.py \
  -p no:cacheprovider >>"$LOG" 2>&1
timeout 330 python3 -m experiments.prune_vs_exhaustive.run --resume --no-retime \
  --out "$OUT/prune" --methods costtune --ks 1,4,8,16 --budget-s 600 \
  --deadline-s 300 >>"$LOG" 2>&1
timeout 60 python3 -m experiments.prune_vs_exhaustive.run --resume --no-retime \
  --out "$OUT/prune" --methods costtune2 --ks 8 --budget-s 100 \
  --deadline-s 55 >>"$LOG" 2>&1
timeout 100 python3 -m experiments.prune_vs_exhaustive.run --retime-only --deadline-s 90 \
  --out "$OUT/prune" >>"$LOG" 2>&1
python3 -m experiments.prune_vs_exhaustive.report --raw "$OUT/prune" --before none \
  --out "$OUT/prune" >>"$LOG" 2>&1
date -u >>"$LOG"
tail -3 "$LOG"
