"""The XGBoost-free scorer (``model.forest.Forest``, ``model.compact.CompactModel``): scores equal
XGBoost's on real H200 feature rows for every shipped model, forest files are checked against
their booster, and the pruning hook runs without importing xgboost, scikit-learn or scipy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import costtune
from costtune.evaluate.metrics import rank_positions
from costtune.model import registry
from costtune.model.compact import CompactModel, ForestUnavailable
from costtune.model.features import design_matrix
from costtune.model.files import MODEL_PARAMS, shipped_model_dir
from costtune.model.forest import FORMAT_VERSION, Forest, file_sha256, forest_path, main
from costtune.model.learned import _SumBooster
from costtune.model.xgb import CostModel

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "datasets" / "h200"
SHIPPED = ["h200", "h200_gemm", "h200_attention", "h200_compiled"]
ROWS_PER_FAMILY = 1500


def _family_rows(family: str, n: int, seed: int = 0) -> pd.DataFrame:
    """Whole workloads of the family's own kernel, ~``n`` rows."""
    df = costtune.load_dataset(DATASET, kernel=family)
    if "implementation" in df:
        df = df[df["implementation"].fillna(family) == family]
    workloads = np.random.default_rng(seed).permutation(df["workload"].unique())
    sizes = df.groupby("workload").size()
    take = workloads[: int(np.searchsorted(np.cumsum(sizes[workloads].to_numpy()), n)) + 1]
    return df[df["workload"].isin(take)].reset_index(drop=True)


def _matrix(model: CostModel) -> tuple[np.ndarray, pd.DataFrame]:
    """Feature rows of ``model``'s families (precomputed compiled features for compiled models),
    plus a copy of them with random features set missing (NaN)."""
    frames, tables = [], []
    for family in model.families_:
        frames.append(_family_rows(family, ROWS_PER_FAMILY // len(model.families_) + 1))
        if model.features != "static":
            tables.append(pd.read_parquet(DATASET / f"features_{family}.parquet"))
    rows = pd.concat(frames, ignore_index=True)
    extra = {"compiled": pd.concat(tables, ignore_index=True)} if tables else {}
    x = design_matrix(rows, model.feature_names_, features=model.features, **extra)
    holes = x.copy()
    holes[np.random.default_rng(1).random(x.shape) < 0.15] = np.nan
    return np.concatenate([x, holes]), pd.concat([rows, rows], ignore_index=True)


def _same_ties(a: np.ndarray, b: np.ndarray) -> bool:
    """Rows one score vector ties, the other ties too (and the reverse)."""
    order = np.argsort(a, kind="stable")
    return bool(np.array_equal(np.diff(a[order]) == 0, np.diff(b[order]) == 0))


@pytest.mark.parametrize("name", SHIPPED)
def test_forest_scores_equal_xgboost(name):
    model = CostModel.load(name)
    forest = Forest.from_booster(model.booster_)
    x, rows = _matrix(model)
    assert np.isnan(x).any() and len(x) >= 2000
    want = model.booster_.inplace_predict(x)
    got = forest.predict(x)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= 1e-5
    assert _same_ties(want, got)
    keys = rows["config"].astype(str).to_numpy()
    half = np.repeat(["", "#holes"], len(rows) // 2)
    workload = (rows["workload"].astype(str) + half).to_numpy()
    for w in np.unique(workload):
        idx = np.flatnonzero(workload == w)
        assert np.array_equal(rank_positions(want[idx], keys[idx]),
                              rank_positions(got[idx], keys[idx])), w
    # the shipped forest file is this booster's
    shipped = CompactModel.load(name)
    assert shipped.forest_.booster_sha256 == file_sha256(shipped_model_dir() / f"{name}.ubj")
    assert np.array_equal(shipped.forest_.predict(x), got)


def test_sum_booster_forest_is_the_sum():
    # two shipped boosters over the same static features (a residual's shape)
    base, delta = CostModel.load("h200_attention").booster_, CostModel.load("h200_gemm").booster_
    model = CostModel.load("h200_gemm")
    assert CostModel.load("h200_attention").feature_names_ == model.feature_names_
    x, _ = _matrix(model)
    both = _SumBooster(base, delta)
    forest = Forest.from_booster(both)
    trees = len(base.get_dump()) + len(delta.get_dump())
    assert forest.n_trees == trees and len(forest.base) == 2
    got = forest.predict(x)
    want = both.inplace_predict(x)
    assert np.array_equal(got, want)  # each part in float32 like XGBoost, summed in float64


def test_npz_round_trip(tmp_path):
    forest = Forest.from_booster(CostModel.load("h200_attention").booster_)
    forest.booster_sha256 = "ab" * 32
    path = forest.save(tmp_path / "f.forest.npz")
    again = Forest.load(path)
    for name in ("left", "right", "feature", "cond", "default_left", "roots", "part", "base"):
        assert np.array_equal(getattr(forest, name), getattr(again, name)), name
    assert (again.depth, again.n_features, again.booster_sha256) == (
        forest.depth, forest.n_features, "ab" * 32)
    x = np.random.default_rng(0).normal(size=(50, forest.n_features)).astype(np.float32)
    assert np.array_equal(forest.predict(x), again.predict(x))
    with np.load(path) as data:
        assert int(data["format_version"]) == FORMAT_VERSION
        arrays = dict(data)
    np.savez(tmp_path / "old.npz", **{**arrays, "format_version": np.int64(99)})
    with pytest.raises(ValueError, match="forest format 99"):
        Forest.load(tmp_path / "old.npz")
    with pytest.raises(ValueError, match=r"needs a \[rows, "):
        forest.predict(x[:, :3])


def _copy_shipped(name: str, folder: Path, stem: str) -> Path:
    for suffix in (".json", ".ubj", ".forest.npz"):
        shutil.copy(shipped_model_dir() / f"{name}{suffix}", folder / f"{stem}{suffix}")
    return folder / f"{stem}.json"


def test_stale_or_missing_forest_falls_back_to_cost_model(tmp_path):
    path = str(_copy_shipped("h200_gemm", tmp_path, "m"))
    loaded, _ = registry.load_noted(path, "gemm", compact=True)
    assert isinstance(loaded, CompactModel)
    assert isinstance(registry.load_noted(path, "gemm")[0], CostModel)  # compact is in the key
    stale = Forest.load(forest_path(path))
    stale.booster_sha256 = "0" * 64
    stale.save(forest_path(path))
    with pytest.raises(ForestUnavailable, match="another booster"):
        CompactModel.load(path)
    os.utime(path)  # a new stamp: the registry reads the files again
    assert isinstance(registry.load_noted(path, "gemm", compact=True)[0], CostModel)
    forest_path(path).unlink()
    with pytest.raises(ForestUnavailable, match="no forest file"):
        CompactModel.load(path)
    # A cut-short forest (a killed write, a partial copy) is unavailable, not a broken model:
    # the booster pair still ranks, and the file is named.
    Forest.load(forest_path(_copy_shipped("h200_gemm", tmp_path, "whole")))
    whole = forest_path(tmp_path / "whole.json").read_bytes()
    forest_path(path).write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ForestUnavailable, match=r"m\.forest\.npz: not a readable forest file "
                                                r"\(BadZipFile"):
        CompactModel.load(path)
    os.utime(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)  # the broken file is closed
        assert isinstance(registry.load_noted(path, "gemm", compact=True)[0], CostModel)


def test_compact_load_for_prefers_the_family_file(tmp_path, monkeypatch):
    assert CompactModel.load_for("h200", "gemm")[0].path_.name == "h200_gemm.json"
    assert CompactModel.load_for("h200", "softmax")[0].path_.name == "h200_softmax.json"
    monkeypatch.setenv("COSTTUNE_HOME", str(tmp_path))
    (tmp_path / "models").mkdir()
    _copy_shipped("h200", tmp_path / "models", "mine")
    broken = _copy_shipped("h200_gemm", tmp_path / "models", "mine_gemm")
    meta = json.loads(broken.read_text())
    broken.write_text(json.dumps({**meta, "schema_version": 999}))
    model, note = CompactModel.load_for("mine", "gemm")
    assert model.path_.name == "mine.json" and "mine_gemm is unusable" in note
    assert "schema_version 999" in note
    model, note = CompactModel.load_for("mine", "softmax")  # no family file: the shared one
    assert model.path_.name == "mine.json" and note is None


def test_cost_model_save_writes_the_forest(tmp_path):
    rows = _family_rows("softmax", 400)
    model = CostModel(n_estimators=8, max_depth=3, family="softmax").fit(rows)
    path = model.save(tmp_path / "small")
    npz = forest_path(path)
    assert npz == tmp_path / "small.forest.npz" and npz.is_file()
    compact = CompactModel.load(path)
    assert compact.forest_.booster_sha256 == file_sha256(tmp_path / "small.ubj")
    assert np.array_equal(compact.predict(rows), model.predict(rows))
    for name in ("features", "objective", "family", "families_", "feature_names_",
                 "shape_ranges_", "train_hash_", "n_train_rows_", "n_train_workloads_"):
        assert getattr(compact, name) == getattr(model, name), name
    logtime = CostModel(objective="reg:logtime", n_estimators=5, family="softmax").fit(rows)
    path = logtime.save(tmp_path / "logtime")
    assert np.array_equal(CompactModel.load(path).predict(rows), logtime.predict(rows))


def test_forest_command_writes_missing_files(tmp_path, capsys):
    path = _copy_shipped("h200_attention", tmp_path, "att")
    forest_path(path).unlink()
    (tmp_path / "other.json").write_text("{}")
    assert main([str(path), str(tmp_path / "other.json")]) == 0
    assert "skipped" in capsys.readouterr().out
    assert isinstance(CompactModel.load(path), CompactModel)


def test_model_params_match_cost_model():
    assert sorted(MODEL_PARAMS) == sorted(CostModel().get_params())


HOOK = """
import itertools, sys
import torch, triton
import costtune

configs = [triton.Config({"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k,
                          "GROUP_SIZE_M": 8}, num_warps=w, num_stages=s)
           for m, n, k, w, s in itertools.product((32, 64, 128), (64, 128), (32, 64), (4, 8),
                                                  (3, 4))]
prune = costtune.prune_configs_by("h200", 4, family="gemm")["early_config_prune"]
a = torch.empty(512, 1024, dtype=torch.float16)
b = torch.empty(1024, 2048, dtype=torch.float16)
kept = prune(configs, {"a_ptr": a, "b_ptr": b, "M": 512, "N": 2048, "K": 1024})
print("KEPT", len(kept), len(configs))
print("LOADED", [m for m in ("xgboost", "sklearn", "scipy", "costtune.model.xgb")
                 if m in sys.modules])
"""


def test_hook_imports_no_xgboost():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", HOOK], env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    kept, total = map(int, lines["KEPT"].split())
    assert total == 48 and 4 <= kept < total
    assert lines["LOADED"] == "[]"


def _doc(trees, base="5E-1", objective="reg:squarederror"):
    return {"learner": {"objective": {"name": objective},
                        "learner_model_param": {"base_score": base, "num_feature": "2",
                                                "num_class": "0", "num_target": "1"},
                        "gradient_booster": {"name": "gbtree", "model": {"trees": trees}}}}


def test_from_json_follows_xgboosts_rule_on_any_node_numbering():
    # root (feature 0 < 1.0, missing right) has its children numbered 2 (left) and 1 (right);
    # node 1 splits feature 1 < -2.0 (missing left); node 3 is unreachable (deleted).
    tree = {"left_children": [2, 4, -1, -1, -1, -1], "right_children": [1, 5, -1, -1, -1, -1],
            "split_indices": [0, 1, 0, 0, 0, 0], "default_left": [0, 1, 0, 0, 0, 0],
            "split_conditions": [1.0, -2.0, 10.0, 99.0, 20.0, 30.0]}
    forest = Forest.from_json(_doc([tree]))
    assert forest.depth == 2 and len(forest.cond) == 5
    x = np.array([[0.5, 0], [1.0, -3], [1.0, 0], [np.nan, np.nan], [2, np.nan], [np.nan, 5]],
                 dtype=np.float32)
    assert forest.predict(x).tolist() == [10.5, 20.5, 30.5, 20.5, 20.5, 30.5]
    assert Forest.from_json(_doc([tree], base="[-0E0]")).predict(x[:1]).tolist() == [10.0]
    with pytest.raises(ValueError, match="margin objectives"):
        Forest.from_json(_doc([tree], objective="binary:logistic"))


def test_per_kernel_models_load_compact(tmp_path):
    from costtune.model.learned import update

    rows = _family_rows("softmax", 300)
    first = update(tmp_path, rows.iloc[:150], base="h200", family="softmax", rounds=3)
    second = update(tmp_path, rows.iloc[150:], base="h200", family="softmax", rounds=3)
    third = update(tmp_path, rows.iloc[:50], base="h200", family="softmax", rounds=3)
    names = sorted(p.name for p in tmp_path.glob("model-*"))
    assert names == sorted(f"{p.stem}{s}" for p in (second, third)
                           for s in (".forest.npz", ".json", ".ubj"))  # first's files removed
    assert not forest_path(first).exists()
    model, note = registry.load_noted("h200", "softmax", kernel_dir=tmp_path, compact=True)
    assert isinstance(model, CompactModel) and note is None
    assert model.learned_path_ == str(third)
    assert np.array_equal(model.predict(rows), CostModel.load(third).predict(rows))
