#!/bin/bash
# Device call on nvidia-h200 (#20, tenth session): cold first-call tuning with the kept configs
# compiled in forked processes (costtune's default now) beside threads (@threads), every run a
# fresh process with fresh caches; exhaustive triton.autotune timed in the same call.
#   run(command="export COSTTUNE_COMMIT=<hash> STEP=1; \
#       bash experiments/device/call_cold_tune_procs_h200.sh", carry=[".whl"], timeout_s=600)
# STEP=1: the GPU precompile tests; GEMM 4096^3 by every method (exhaustive included); GEMM
#         2048x11008x4096 and 512x8192x8192 at k=8 (processes vs threads) and the cache pair.
# STEP=2: (after the fork tree and compile/benchmark overlap) the GPU precompile tests, k=8
#         both ways again on all three GEMM shapes (--rerun: the report takes the latest),
#         exhaustive on 2048x11008x4096.
# STEP=3: the softmax cache pair; then for 4096^3 and 512x8192x8192 exhaustive again beside
#         costtune.autotune:8 (and hook:8 at 4096^3) (--rerun): k=8 ratios of one call.
# STEP=4: (eleventh session, models trained with the 256-accumulator tiles) 4096^3 by every
#         method beside exhaustive, then 512x8192x8192 exhaustive beside k=8 both ways.
# STEP=5: 2048x11008x4096 by every method beside exhaustive; the Inductor softmax and the
#         tutorial-06 attention (first shape each): exhaustive beside k=8 both ways.
# STEP=6: (call 2's 512x8192x8192 ran out of deadline after exhaustive) 512x8192x8192 and
#         2048x11008x4096: k=8 both ways beside exhaustive; the Inductor softmax likewise.
# STEP=7: (call 3's exhaustive runs were cut by their deadlines) 512x8192x8192:
#         costtune.autotune:8 beside exhaustive, with the deadline they need.
# STEP=8: (twelfth session) 2048x11008x4096: every costtune method (k = 1, 4, 8, 16; plain
#         hook and costtune.autotune) then exhaustive, one shape per call (~300 s: each fresh
#         process is 6-9 s, exhaustive 190-217 s).
# STEP=9: the same for 512x8192x8192.
# STEP=10: the tutorial-06 attention (first shape): exhaustive beside k=8 both ways.
# STEP=11: 4096^3's missing hook k = 1/4/16 beside costtune.autotune:8 and exhaustive (all in
#         one call), then STEP=10's attention pair.
# STEP=12: softmax and attention the same way as GEMM: both shapes of each, every costtune
#         method (k = 1/4/8/16, hook and costtune.autotune) then exhaustive, in one call.
# Resumes from experiments/results/raw/cold_tune; writes $OUT/cold_tune/*.jsonl, $OUT/call.log.
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
# One id per call: the report counts a ratio toward the goals only within one call.
export COSTTUNE_CALL="${COSTTUNE_COMMIT:-unknown}-step${STEP:-1}-$(date -u +%Y%m%dT%H%M%S)"
{ date -u; nproc; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; } >>"$LOG"
RAW=experiments/results/raw/cold_tune
K8="costtune.autotune:8,costtune.autotune:8@threads,hook:8,hook:8@threads"
REST="costtune.autotune:1,costtune.autotune:4,costtune.autotune:16,hook:1,hook:4,hook:16"
cold() {  # deadline_s retime_s [run.py args...]
  local deadline=$1 retime=$2; shift 2
  timeout $((deadline + 30)) python3 -m experiments.cold_tune.run --out "$OUT/cold_tune" \
    --resume-from "$RAW" --deadline-s "$deadline" --retime-s "$retime" "$@" >>"$LOG" 2>&1
}
again() {  # deadline_s retime_s case shape_indices methods: run them anew, no cache pair
  cold "$1" "$2" --cases "$3" --only-shapes "$4" --no-cache-pair --rerun --methods "$5"
}
PAIR="costtune.autotune:8,hook:8,exhaustive"  # cheap runs first, the reference last
case "${STEP:-1}" in
  1)
    timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_forked.py \
      tests/test_hook.py -k "forked or precompile" >>"$LOG" 2>&1
    cold 330 0 --cases tutorial03_matmul --only-shapes 1 --no-cache-pair \
      --methods "$K8,exhaustive,$REST"
    cold 170 60 --cases tutorial03_matmul --only-shapes 0,2 --methods "$K8" ;;
  2)
    timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_hook.py \
      -k "precompile" >>"$LOG" 2>&1
    cold 140 0 --cases tutorial03_matmul --shapes 3 --no-cache-pair --rerun --methods "$K8"
    cold 300 45 --cases tutorial03_matmul --only-shapes 0 --no-cache-pair \
      --methods exhaustive ;;
  3)
    cold 40 0 --cases inductor_softmax --only-shapes 0 --methods ""
    again 280 30 tutorial03_matmul 1 "exhaustive,costtune.autotune:8,hook:8"
    again 250 20 tutorial03_matmul 2 "exhaustive,costtune.autotune:8" ;;
  4)
    again 290 30 tutorial03_matmul 1 "exhaustive,costtune.autotune:8,hook:8,$REST"
    again 220 20 tutorial03_matmul 2 "exhaustive,costtune.autotune:8,hook:8" ;;
  5)
    again 300 30 tutorial03_matmul 0 "exhaustive,costtune.autotune:8,hook:8,$REST"
    again 80 15 inductor_softmax 0 "exhaustive,costtune.autotune:8,hook:8"
    again 110 15 tutorial06_attention 0 "exhaustive,costtune.autotune:8,hook:8" ;;
  6)
    again 235 20 tutorial03_matmul 2 "$PAIR"
    again 235 20 tutorial03_matmul 0 "$PAIR"
    again 75 12 inductor_softmax 0 "$PAIR" ;;
  7)
    again 232 12 tutorial03_matmul 2 "costtune.autotune:8,exhaustive" ;;
  8)
    again 345 15 tutorial03_matmul 0 "costtune.autotune:8,hook:8,$REST,exhaustive" ;;
  9)
    again 345 15 tutorial03_matmul 2 "costtune.autotune:8,hook:8,$REST,exhaustive" ;;
  10)
    again 150 15 tutorial06_attention 0 "$PAIR" ;;
  11)
    again 300 15 tutorial03_matmul 1 "hook:1,hook:4,hook:16,costtune.autotune:8,exhaustive"
    again 150 15 tutorial06_attention 0 "$PAIR" ;;
  12)
    again 200 20 inductor_softmax 0,1 "costtune.autotune:8,hook:8,$REST,exhaustive"
    again 200 20 tutorial06_attention 0,1 "costtune.autotune:8,hook:8,$REST,exhaustive" ;;
esac
date -u >>"$LOG"
tail -45 "$LOG"
