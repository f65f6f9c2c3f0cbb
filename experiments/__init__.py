"""costtune's research questions, one module (CPU) or plan/run/report package (GPU) each, on
the shared harness in ``experiments/harness.py``. Run them from the repository root as
``python -m experiments.<question>``; ``python experiments/run_all.py`` regenerates every
CPU-computable report under ``experiments/results/``."""
