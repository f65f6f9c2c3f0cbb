"""Issue 20: cold first-call tuning time, costtune vs exhaustive ``triton.autotune``, on kernels
no costtune model was trained on (``experiments/user_kernels.py``: Triton's tutorial-03 matmul
over the 328-config list, an Inductor-style softmax, tutorial-06 attention).

- ``cases``: the kernels, their config lists and shapes, the methods.
- ``child``: one cold tuning in a fresh process, timed by phase; one same-process re-timing of
  a shape's chosen configs (GPU).
- ``run``: the device driver: every planned run in a fresh process with fresh caches,
  appended to ``runs.jsonl``, resumable across device calls; then the re-timings.
- ``report``: ``experiments/results/cold_tune.{md,csv}`` from the raw records (CPU).

    PYTHONPATH=. python3 -m experiments.cold_tune.run --out $OUT/cold_tune --dry-run
    PYTHONPATH=. python3 -m experiments.cold_tune.report --raw experiments/results/raw/cold_tune
"""
