"""Source features (issue 18): what a kernel's source does, read by the hook from the user's
kernel and by training from each implementation's kernels; the shipped softmax model uses
them to rank every implementation of the family."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import triton

import costtune
from costtune.features.source import SOURCE_FEATURES, describe, source_features
from costtune.model.features import attach_features, feature_names
from costtune.model.registry import load_model, score

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from user_kernels import STYLES  # noqa: E402


def _impl_row(implementation: str, **values) -> dict:
    return {"kernel": "softmax", "implementation": implementation, **values}


def test_user_kernels_read_like_the_implementations_they_resemble():
    """Tutorial 02 (persistent, one pass) reads like softmax_onepass; Inductor's looped
    softmax (three passes over the row) like softmax_multirow; an autotuner is unwrapped."""
    rows = pd.DataFrame([_impl_row("softmax_onepass", cols=3000, BLOCK_N=4096),
                         _impl_row("softmax_multirow", cols=3000, BLOCK_N=1024),
                         _impl_row("softmax", cols=3000, BLOCK_N=4096),
                         _impl_row("softmax", cols=3000, BLOCK_N=1024)])
    feats = source_features(rows)
    tutorial = describe(triton.autotune([triton.Config({})], key=[])(
        STYLES["tutorial02_softmax"].kernel))
    inductor = describe(STYLES["inductor_softmax"].kernel)
    assert tutorial == feats.iloc[0].to_dict()
    assert inductor == feats.iloc[1].to_dict()
    assert inductor["src_loops"] == 3 and tutorial["src_persistent"] == 1
    # The original softmax launches one of two kernels by its config and the problem.
    assert feats.iloc[2]["src_loops"] < feats.iloc[3]["src_loops"]
    assert describe(object()) == dict.fromkeys(SOURCE_FEATURES, 0.0)


def test_source_features_of_dataset_rows_and_unknown_kernels():
    rows = pd.DataFrame([{"kernel": "gemm", "implementation": "gemm_tma", "SPLIT_K": 1},
                         {"kernel": "gemm", "implementation": None, "SPLIT_K": 2},
                         {"kernel": "my_kernel", "implementation": None, "SPLIT_K": 1}])
    feats = source_features(rows)
    assert feats.loc[0, "src_descriptors"] == 1 and feats.loc[1, "src_atomics"] >= 1
    assert feats.loc[2].isna().all()  # not an implementation: missing, not a guess
    attached = attach_features(rows.iloc[:2].assign(implementation=["gemm_tma", "gemm"],
        dtype="float16", M=64, N=64, K=64, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4,
        num_stages=3, workload="w", config="c"), features="static+src")
    assert list(attached[SOURCE_FEATURES].columns) == SOURCE_FEATURES
    assert feature_names("static+src")[-len(SOURCE_FEATURES):] == SOURCE_FEATURES


def test_a_source_model_refuses_rows_without_source_features():
    model = load_model("h200", "softmax")
    assert model.features == "static+src"
    rows = pd.DataFrame([{"kernel": "softmax", "implementation": "softmax_onepass",
                          "workload": "w", "dtype": "float16", "rows": 4096, "cols": 3000,
                          "BLOCK_N": 4096, "ROWS_PER_PROG": 1, "num_warps": w,
                          "num_stages": 1, "config": f"w{w}"} for w in (1, 4, 16)])
    from costtune.features.static import static_features

    with pytest.raises(ValueError, match="source features"):
        score(model, static_features(rows))
    s = score(model, attach_features(rows, features=model.features))
    assert s.shape == (3,) and np.isfinite(s).all()


def test_the_hook_reads_the_users_kernel_source(monkeypatch):
    """The pruner scores a static+src model with the tuned kernel's own descriptor."""
    import costtune.model.registry as registry

    seen = []
    real = registry.score

    def spy(model, features):
        seen.append(features)
        return real(model, features)

    monkeypatch.setattr("costtune.tune.ranking.score", spy)
    style = STYLES["inductor_softmax"]
    configs = style.configs("gpu")
    hook = costtune.prune_configs_by("h200", 4)["early_config_prune"]
    tuner = triton.autotune(configs, key=list(style.key))(style.kernel)
    x = torch.empty(4096, 2048, dtype=torch.float16)
    hook.kernel = tuner
    kept = hook(configs, {"in_ptr0": x, "out_ptr2": torch.empty_like(x), "xnumel": 4096,
                          "r0_numel": 2048},
                grid=lambda meta: (triton.cdiv(4096, meta["XBLOCK"]), 1, 1))
    assert hook.last.family == "softmax" and 4 <= len(kept) < len(configs)
    feats = seen[-1]
    assert (feats["src_loops"] == 3).all() and (feats["src_loads"] == 3).all()


def test_warm_start_scores_each_implementation_as_itself():
    """A study's warm start (registry.rank_configs) on softmax implementations: onepass's
    space has no BLOCK_N (it is implied) and must not fail; multirow is described as itself."""
    from costtune.kernels import get_implementation
    from costtune.model.registry import model_scores, rank_configs
    from costtune.types import Workload

    model = load_model("h200", "softmax")
    for name in ("softmax_onepass", "softmax_multirow"):
        w = Workload(name, {"rows": 4096, "cols": 2048}, "float16")
        configs = list(get_implementation(name).config_space(w.sizes))[:12]
        ranked = rank_configs(model, w, configs=configs)
        assert sorted(c.key for c in ranked) == sorted(c.key for c in configs)
        rows = pd.DataFrame([{"kernel": "softmax", "implementation": name, "rows": 4096,
                              "cols": 2048, "dtype": "float16", "workload": w.id,
                              **c.as_dict(), "config": c.key} for c in configs])
        want = score(model, attach_features(rows, features=model.features))
        assert np.allclose(model_scores(model, w, configs=configs), want)


def test_unreadable_source_is_a_doubt_and_modules_are_not_descriptors(monkeypatch):
    """A static+src model ranking a kernel whose source it cannot read widens k."""
    from costtune.features.source import attach_source

    feats, doubt = attach_source(pd.DataFrame({"a": [1.0]}), object())
    assert doubt and doubt[0][0] == "features" and feats["src_loads"].iloc[0] == 0
    style = STYLES["inductor_softmax"]
    monkeypatch.setattr("costtune.features.source.described",
                        lambda fn: dict.fromkeys(SOURCE_FEATURES, 0.0))
    hook = costtune.prune_configs_by("h200", 2)["early_config_prune"]
    configs = style.configs("gpu")
    x = torch.empty(4096, 2048, dtype=torch.float16)
    hook.kernel = triton.autotune(configs, key=list(style.key))(style.kernel)
    kept = hook(configs, {"in_ptr0": x, "out_ptr2": torch.empty_like(x), "xnumel": 4096,
                          "r0_numel": 2048},
                grid=lambda meta: (triton.cdiv(4096, meta["XBLOCK"]), 1, 1))
    assert "features" in hook.last.fallbacks and len(kept) == 8  # widen 4 x k 2


def test_helpers_by_module_and_closure_and_module_loads():
    """Helpers called as ``module.helper`` or captured by a kernel factory are followed; a
    load through ``triton.language`` under another name is no TMA descriptor."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fixtures import source_kernels as k

    for fn in (k.qualified, k.make_kernel()):
        d = describe(fn)
        assert d["src_loops"] == 1 and d["src_loads"] == 1 and d["src_stores"] == 1
    d = describe(k.aliased)
    assert d["src_loads"] == 1 and d["src_descriptors"] == 0
