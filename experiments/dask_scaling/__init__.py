"""Does Dask collection scale across GPUs? The same workloads collected on 1 and on N GPUs.

Each run is a fresh ``collect_dask`` (its own LocalCluster, one worker per GPU), a fresh store and
a fresh Triton cache, same seed and configs. The report gives the speed-up (goal >= 1.8x on 2
GPUs) and whether the two runs' rows agree within the measured noise: per-config time ratio, raw
and normalised by each run's reference op, against the dataset's second-pass spread and against
the spread between two 1-GPU runs.

Three steps, run from the repository root:

    python -m experiments.dask_scaling.plan --gpus 2 [--extra-runs 1 1s] [--cpu-probe]  # CPU
    PYTHONPATH=. python3 -m experiments.dask_scaling.run --gpus 2 --out $OUT/dask \\
        [--compile-workers 8] [--triton-cache cold|warm] [--extra-runs 1 1s] [--name NAME]
    python -m experiments.dask_scaling.report [--raw experiments/results/raw/dask_scaling]

``run --dry-run`` replays recorded rows on CPU workers with a sleep per task: a plumbing check
whose numbers are never a result. Each experiment is one folder ``<out>/<name>/``:
``experiment.json`` (the flags, host), ``runs.jsonl`` (one line per finished run: its
collection summary and metadata), ``rows_<run>.parquet`` (every measured row) and
``cpu_probe.csv``; a second call with the same ``--name`` resumes after the last finished run.
The report rebuilds results/dask_scaling.{md,csv} from every experiment folder under --raw.
"""
