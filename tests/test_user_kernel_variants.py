"""Attention variants written as people write them (experiments/user_kernels_variants.py), tuned
on the CPU under the interpreter: grouped-query heads are read as attention over the query
heads and pruned to top_k (the H200 measured no loss there, RESULTS "twenty-third session"); a
sliding window is a "shape" doubt, so k widens; both compute the right result."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest
from helpers import Bench

import costtune
from costtune.types import CosttuneWarning

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


variants = _load("user_kernels_variants", ROOT / "experiments" / "user_kernels_variants.py")
zoo = sys.modules["user_kernels"]


@pytest.mark.parametrize("name, k, doubts", [("gqa_attention", 1, []),
                                              ("sliding_window_attention", 4, ["shape"])])
def test_attention_variants_are_read_and_tuned(name, k, doubts):
    style = variants.VARIANTS[name]
    configs = style.configs("cpu")
    bench = Bench()
    tuner = costtune.autotune(configs, key=list(style.key), top_k=1, do_bench=bench)(
        style.kernel)
    inputs = style.inputs("cpu", device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CosttuneWarning)
        out = style.launch(tuner, inputs)
    assert zoo.relative_error(out, style.reference(inputs)) < style.tolerance
    last = tuner.early_config_prune.last
    assert last.family == "attention" and last.fallbacks == doubts, last.notes
    assert last.k == bench.calls == k
    # GQA: the query heads, not the shared K/V heads, are H.
    assert last.problem["H"] == style.cpu_problem["H"]
    ours = [str(w.message) for w in caught if issubclass(w.category, CosttuneWarning)]
    assert (not ours) if not doubts else any("sliding window" in m for m in ours)
