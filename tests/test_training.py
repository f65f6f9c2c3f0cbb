"""A model's training table (costtune.model.training) and the refit learn=True makes with it:
the table round-trips and is checked, a refit with no new rows is the model again, harvested
workloads count with their weight, and update() refits where the base ships a table and adds
trees where it does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import costtune
from costtune.model.files import ModelSchemaError
from costtune.model.learned import REFIT_WEIGHT, base_table, current_model, update
from costtune.model.training import TrainingTable, refit, save_with_table, table_path
from costtune.model.xgb import CostModel

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO / "datasets" / "h200"


@pytest.fixture(scope="module")
def softmax_rows():
    df = costtune.load_dataset(DATASET, kernel="softmax")
    df = df[df["implementation"] == "softmax"]
    workloads = sorted(df["workload"].unique())
    return df[df["workload"].isin(workloads[:12])].reset_index(drop=True), \
        df[df["workload"].isin(workloads[12:15])].reset_index(drop=True)


def _model(rows):
    return CostModel(family="softmax", n_estimators=40).fit(rows)


def test_refit_without_new_rows_is_the_model_again(softmax_rows):
    base_rows, other = softmax_rows
    model = _model(base_rows)
    table = TrainingTable.from_rows(model, base_rows)
    assert len(table) == model.n_train_rows_ and table.groups.sum() == len(table)
    again = refit(model, table, base_rows.iloc[:0], weight=REFIT_WEIGHT)
    np.testing.assert_array_equal(again.predict(other), model.predict(other))


def test_harvested_workloads_count_with_their_weight(softmax_rows):
    base_rows, harvest = softmax_rows
    model = _model(base_rows)
    table = TrainingTable.from_rows(model, base_rows)
    light = refit(model, table, harvest, weight=0.01)
    heavy = refit(model, table, harvest, weight=50.0)
    assert heavy.n_train_rows_ == len(table) + len(harvest)
    assert heavy.n_train_workloads_ == len(table.groups) + harvest["workload"].nunique()

    def own_top1(m):  # how often the harvested workloads' best is ranked first
        hits = []
        for _, g in harvest.groupby("workload"):
            ok = g["status"] == "ok"
            hits.append(g["time_ms"].where(ok).idxmin() == g.index[np.argmax(m.predict(g))])
        return np.mean(hits)

    assert own_top1(heavy) >= own_top1(light)
    assert not np.allclose(heavy.predict(harvest), light.predict(harvest))
    with pytest.raises(ValueError, match="weight must be > 0"):
        refit(model, table, harvest, weight=0)


def test_the_table_is_saved_beside_its_model_and_checked(softmax_rows, tmp_path):
    base_rows, _ = softmax_rows
    model = _model(base_rows)
    path = save_with_table(model, tmp_path / "m", base_rows)
    assert table_path(path) == tmp_path / "m.train.npz" and table_path(path).is_file()
    table = TrainingTable.load(path, names=model.feature_names_)
    np.testing.assert_array_equal(table.y, TrainingTable.from_rows(model, base_rows).y)
    with pytest.raises(ModelSchemaError, match="other features"):
        TrainingTable.load(path, names=model.feature_names_[:-1])
    with pytest.raises(ValueError, match="pass the fit's rows"):
        save_with_table(model, tmp_path / "m", base_rows.iloc[:30])
    model.save(tmp_path / "m")  # a table of an earlier model of this name no longer applies
    assert TrainingTable.load(path) is None
    table_path(path).write_bytes(b"torn")
    with pytest.raises(ModelSchemaError, match="not a readable training table"):
        TrainingTable.load(path)


def test_update_refits_where_the_base_ships_a_table(softmax_rows, tmp_path):
    base_rows, harvest = softmax_rows
    model = _model(base_rows)
    with_table = save_with_table(model, tmp_path / "with", base_rows)
    without = model.save(tmp_path / "without")
    assert len(base_table(str(with_table), CostModel.load(with_table))) == len(base_rows)
    assert base_table(str(without), CostModel.load(without)) is None
    for base, method in ((with_table, "refit"), (without, "continue")):
        folder = tmp_path / f"kernel-{method}"
        path = update(folder, harvest, base=str(base), family="softmax")
        record = current_model(folder)[1]
        assert record["method"] == method and current_model(folder)[0] == path
        learned = CostModel.load(path)
        if method == "refit":
            assert record["rounds"] == model.n_estimators
            assert learned.n_train_rows_ == len(base_rows) + len(harvest)
        assert len(learned.predict(harvest)) == len(harvest)


@pytest.mark.parametrize("family", ["gemm", "softmax", "attention"])
def test_every_shipped_stage1_model_ships_its_table(family):
    model, _ = CostModel.load_for("h200", family)
    table = base_table("h200", model)
    assert table is not None and len(table) == model.n_train_rows_
    if family != "gemm":  # a refit with nothing new rebuilds the shipped booster (gemm: slow)
        rows = costtune.load_dataset(DATASET, kernel=family)
        rows = rows[rows["suite"] == "test"].head(400)
        again = refit(model, table, rows.iloc[:0], weight=REFIT_WEIGHT)
        np.testing.assert_allclose(again.predict(rows), model.predict(rows), atol=1e-5)


@pytest.fixture(scope="module")
def mixed_rows():
    """Twelve workloads of the original softmax and twelve of softmax_multirow."""
    df = costtune.load_dataset(DATASET, kernel="softmax")
    parts = []
    for impl in ("softmax", "softmax_multirow"):
        sub = df[df["implementation"] == impl]
        parts.append(sub[sub["workload"].isin(sorted(sub["workload"].unique())[:12])])
    return pd.concat(parts, ignore_index=True)


def test_the_original_kernels_workloads_weigh_original_weight(mixed_rows):
    plain = CostModel(family="softmax", n_estimators=40)
    rows, _, groups = plain._targets(mixed_rows)
    assert plain.weights(rows, groups) is None  # weight 1: the fit as before
    heavy = CostModel(family="softmax", n_estimators=40, original_weight=4.0)
    w = heavy.weights(rows, groups)
    first = rows.iloc[np.concatenate([[0], np.cumsum(groups)[:-1]])]
    assert len(w) == len(groups) == 24
    np.testing.assert_array_equal(w, np.where(first["implementation"] == "softmax", 4.0, 1.0))
    # rows without an implementation column are the family's original kernel
    assert set(heavy.weights(rows.drop(columns="implementation"), groups)) == {4.0}
    per_row = CostModel(family="softmax", objective="reg:logtime", original_weight=4.0)
    assert len(per_row.weights(rows, groups)) == len(rows)
    other = mixed_rows[mixed_rows["implementation"] == "softmax"]
    assert not np.allclose(plain.fit(mixed_rows).predict(other),
                           heavy.fit(mixed_rows).predict(other))
    for bad in (0, -1.0, float("inf"), "4", True):
        with pytest.raises(ValueError, match="original_weight must be a positive number"):
            CostModel(family="softmax", original_weight=bad).fit(mixed_rows)


def test_a_harvest_can_weigh_per_heaviest_table_workload(mixed_rows):
    """``per_heaviest``: a harvested workload weighs ``weight`` of the table's heaviest
    workloads (the original kernel's at ``original_weight``), the same fit as that product
    given as an absolute weight; on a table of weight-1 workloads the two are one."""
    other = sorted(mixed_rows.loc[mixed_rows["implementation"] != "softmax", "workload"].unique())
    held = mixed_rows["workload"].isin(other[:4])
    base_rows, harvest = mixed_rows[~held], mixed_rows[held]  # the table: weights 1 and 4
    model = CostModel(family="softmax", n_estimators=20, original_weight=4.0).fit(base_rows)
    table = TrainingTable.from_rows(model, base_rows)
    per = refit(model, table, harvest, weight=2.0, per_heaviest=True)
    np.testing.assert_array_equal(per.predict(harvest),
                                  refit(model, table, harvest, weight=8.0).predict(harvest))
    assert not np.allclose(per.predict(harvest),
                           refit(model, table, harvest, weight=2.0).predict(harvest))
    plain = CostModel(family="softmax", n_estimators=20).fit(base_rows)
    flat = TrainingTable.from_rows(plain, base_rows)
    np.testing.assert_array_equal(
        refit(plain, flat, harvest, weight=2.0, per_heaviest=True).predict(harvest),
        refit(plain, flat, harvest, weight=2.0).predict(harvest))


def test_a_weighted_model_keeps_its_weights_in_its_table(mixed_rows, tmp_path):
    model = CostModel(family="softmax", n_estimators=40, original_weight=4.0).fit(mixed_rows)
    path = save_with_table(model, tmp_path / "m", mixed_rows)
    loaded = CostModel.load(path)
    assert loaded.get_params()["original_weight"] == 4.0
    table = TrainingTable.load(path, names=loaded.feature_names_)
    assert sorted(set(table.weights)) == [1.0, 4.0] and len(table.weights) == 24
    again = refit(loaded, table, mixed_rows.iloc[:0], weight=REFIT_WEIGHT)
    np.testing.assert_array_equal(again.predict(mixed_rows), model.predict(mixed_rows))
    bad = tmp_path / "bad"
    save_with_table(model, bad, mixed_rows)
    with np.load(table_path(bad.with_suffix(".json"))) as f:
        parts = {k: f[k] for k in f.files}
    np.savez_compressed(table_path(bad.with_suffix(".json")), **{**parts,
                                                                  "weights": np.ones(5)})
    with pytest.raises(ModelSchemaError, match="5 weights for 24 groups"):
        TrainingTable.load(bad)
