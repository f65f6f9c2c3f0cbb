"""Pruned vs exhaustive autotuning on the GPU: cold tuning time and the kernel each one picks.

For a few test-suite shapes of each family, every method tunes costtune's own kernel through
``triton.autotune`` in a fresh process with a fresh Triton cache (TRITON_CACHE_DIR and the
compiled-feature cache in new temp dirs), so each run pays every compile it causes:

- ``exhaustive``: plain ``triton.autotune`` over the family's whole space for the shape;
- ``tutorial`` (GEMM): the 8 fp16 configs of Triton's matmul tutorial;
- ``costtune``: ``costtune.autotune`` at k = 1, 4, 8 (and 16 when asked) over the whole space
  (static features), timing the kept configs as it does by default (``bench="graph"``: CUDA
  graph of launches after L2 flushes; exhaustive and tutorial keep Triton's ``do_bench``);
- ``costtune2``: the same with ``two_stage=True`` (needs a model with compiled features).

Three steps, run from the repository root:

    python -m experiments.prune_vs_exhaustive.plan [--budget-s 450] [--ks 1,4,8]     # CPU
    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 -m experiments.prune_vs_exhaustive.run \\
        --out $OUT/prune [--resume] [plan flags]                                     # GPU
    python -m experiments.prune_vs_exhaustive.report [--raw DIR]                      # CPU

``plan`` prints the runs in priority order with estimated seconds and what the budget leaves
out. ``run`` measures them, one fresh process per run, appending each finished run to
``<out>/runs.jsonl`` and each same-process re-timing of a shape's chosen configs to
``<out>/retimes.jsonl`` (``--resume`` skips what is already there). ``report`` rebuilds
results/prune_vs_exhaustive.{md,csv,png} from the raw files in
results/raw/prune_vs_exhaustive/ (earlier sessions' logs lie beside them).
"""
