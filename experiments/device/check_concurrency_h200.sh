#!/bin/bash
# Device check on nvidia-h200 for issue 22 (the store, collect and study under concurrency, on
# a real GPU; the CPU tests cover the same with the replay runner):
#   run(command="COSTTUNE_COMMIT=<hash> bash experiments/device/check_concurrency_h200.sh",
#       carry=[".whl"])
# About 3-5 minutes. Two collectors at once on one new store (one reports busy workloads, the
# store loads with each (gpu, workload, config) once), a third run resumes (measures nothing),
# three GPU studies on one fresh SQLite file (no crash, no RUNNING trial, no config twice).
set -u
source experiments/device/setup.sh  # wheels, PYTHONPATH, LOG
{ date -u; nproc; echo "commit ${COSTTUNE_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__,
torch.cuda.get_device_name())"; echo "$0"; } >>"$LOG" 2>&1
C="python3 -m costtune.cli"
S=$OUT/store
ARGS="softmax --suite test --dtype float16 --max-configs 4 --out $S"
timeout 240 $C collect $ARGS >"$OUT/collect1.txt" 2>"$OUT/collect1.err" &
timeout 240 $C collect $ARGS >"$OUT/collect2.txt" 2>"$OUT/collect2.err"
wait
timeout 120 $C collect $ARGS >"$OUT/collect3.txt" 2>"$OUT/collect3.err"
for i in 0 1 2; do
  timeout 240 $C study gemm --shape 4096,4096,4096 --n-trials 4 --seed $i --json \
    --storage "$OUT/studies.db" --study-name g >"$OUT/study$i.txt" 2>"$OUT/study$i.err" &
done
wait
python3 - "$OUT" >>"$LOG" 2>&1 <<'PY'
import collections, json, sys
from pathlib import Path
import optuna
import costtune
out = Path(sys.argv[1])
last = lambda f: json.loads((out / f).read_text().strip().splitlines()[-1])
runs = [last(f"collect{i}.txt") for i in (1, 2, 3)]
for i, r in enumerate(runs, 1):
    print(f"collect{i}: measured {r['workloads']} skipped {r['skipped_workloads']} "
          f"busy {len(r['busy_workloads'])} errors {r['errors'][:2]}")
df = costtune.load_dataset(out / "store")
print("store rows", len(df), "duplicated keys", int(df.duplicated(["gpu", "workload", "config"]).sum()))
assert runs[2]["workloads"] == 0 and not df.duplicated(["gpu", "workload", "config"]).any()
study = optuna.load_study(study_name="g", storage=f"sqlite:///{out / 'studies.db'}")
states = collections.Counter(t.state.name for t in study.trials)
done = [t.user_attrs["config"] for t in study.trials
        if t.state.name == "COMPLETE" and not t.user_attrs.get("cached")]
print("study states", dict(states), "measured", len(done), "distinct", len(set(done)))
for i in range(3):
    print(f"study{i}:", last(f"study{i}.txt")["trials_run"], "trials")
assert states["RUNNING"] == 0 and len(done) == len(set(done))
print("OK")
PY
echo "exit $?" >>"$LOG"
tail -12 "$LOG"
