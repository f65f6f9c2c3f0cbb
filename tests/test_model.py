"""CostModel: sklearn contract, objectives, ranking, top_k, save/load, schema errors, boards."""

import itertools
import json
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from costtune.evaluate.protocols import evaluate, format_leaderboard, leaderboard, plot_topk
from costtune.model.xgb import OBJECTIVES, CostModel, ModelSchemaError, dataset_hash
from costtune.types import Config, Workload

FAST = {"n_estimators": 20, "max_depth": 4}


def synthetic(seed=0):
    """Test fixture, not data: 8 GEMM and 6 softmax workloads over small grids with times from
    a made-up formula (bigger tiles faster on big problems, one config family failing)."""
    rng = np.random.default_rng(seed)
    rows = []
    gemm = [(512, 512, 512), (1024, 1024, 1024), (2048, 1024, 512), (64, 4096, 4096),
            (4096, 4096, 256), (256, 256, 8192), (1000, 3000, 700), (3000, 1000, 2000)]
    for i, (m, n, k) in enumerate(gemm):
        w = Workload("gemm", {"M": m, "N": n, "K": k}, "float16")
        for bm, bn, bk, nw, ns in itertools.product((32, 64, 128), (32, 64, 128), (32, 64),
                                                    (4, 8), (2, 3)):
            c = Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": 1},
                       num_warps=nw, num_stages=ns)
            waves = np.ceil(np.ceil(m / bm) * np.ceil(n / bn) / 132)
            t = waves * bm * bn * k / 1e7 + 1e-3 * (128 / bm + 128 / bn) * (m * n * k) ** (1 / 3)
            status = "out_of_resources" if (bm, bn, bk, ns) == (128, 128, 64, 3) else "ok"
            rows.append({"kernel": "gemm", "workload": w.id, "suite": "test" if i >= 6 else
                         "train", "dtype": "float16", "M": m, "N": n, "K": k, **c.as_dict(),
                         "config": c.key, "status": status,
                         "time_ms": t * rng.uniform(0.95, 1.05) if status == "ok" else np.nan})
    for i, (r, cols) in enumerate([(4096, 1024), (512, 32000), (1, 50257), (65536, 128),
                                   (8192, 4096), (100, 3000)]):
        w = Workload("softmax", {"rows": r, "cols": cols}, "float16")
        for bn, rpp, nw in itertools.product((128, 1024, 4096, 65536), (1, 2), (4, 8)):
            c = Config({"BLOCK_N": bn, "ROWS_PER_PROG": rpp}, num_warps=nw, num_stages=1)
            t = r * cols / 1e6 * (1 + (bn < cols)) + 0.01 * bn / 1024 + 0.001 * nw
            rows.append({"kernel": "softmax", "workload": w.id, "suite": "test" if i >= 4 else
                         "train", "dtype": "float16", "rows": r, "cols": cols, **c.as_dict(),
                         "config": c.key, "status": "ok",
                         "time_ms": t * rng.uniform(0.95, 1.05), "gpu": "NVIDIA H200"})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def data():
    return synthetic()


@pytest.fixture(scope="module")
def gemm(data):
    return data[data["kernel"] == "gemm"].reset_index(drop=True)


@pytest.fixture(scope="module")
def fitted(gemm):
    return CostModel(**FAST).fit(gemm)


def test_sklearn_contract(gemm):
    model = CostModel(objective="reg:logtime", n_estimators=7)
    params = model.get_params()
    assert params["objective"] == "reg:logtime" and params["n_estimators"] == 7
    assert model.set_params(max_depth=3) is model and model.max_depth == 3
    assert not [a for a in vars(model) if a.endswith("_")]  # nothing learned yet
    twin = clone(model)
    assert twin is not model and twin.get_params() == model.get_params()
    assert model.fit(gemm) is model
    assert {"booster_", "feature_names_", "train_hash_", "shape_ranges_",
            "families_"} <= set(vars(model))
    assert not hasattr(clone(model), "booster_")
    with pytest.raises(ValueError):
        model.set_params(no_such_option=1)


@pytest.mark.parametrize("bad", [{"objective": "rank:map"}, {"features": "compiled"},
                                 {"family": "conv"}, {"failures": "ignore"}])
def test_unknown_options_raise(gemm, bad):
    with pytest.raises(ValueError, match="unknown"):
        CostModel(**FAST, **bad).fit(gemm)


def test_rows_without_problem_sizes_are_refused(gemm):
    # Rows stored before Store.append checked sizes (or built by hand) would give NaN features
    # and a model fitted on them silently.
    no_k = gemm.assign(K=np.where(np.arange(len(gemm)) == 3, np.nan, gemm["K"]))
    with pytest.raises(ValueError, match=r"^row 3 \(workload .*problem field 'K' is nan"):
        CostModel(**FAST).fit(no_k)
    with pytest.raises(ValueError, match=r"gemm rows lack problem column\(s\) \['M'\]"):
        CostModel(**FAST).fit(gemm.drop(columns=["M"]))


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_every_objective_predicts_higher_is_faster(gemm, objective):
    model = CostModel(objective=objective, n_estimators=40, max_depth=4).fit(gemm)
    ok = gemm["status"] == "ok"
    taus = []
    for _, rows in gemm[ok].groupby("workload"):
        scores = model.predict(rows)
        taus.append(np.corrcoef(scores, -np.log(rows["time_ms"]))[0, 1])
    assert np.mean(taus) > 0.5


def test_failures_are_learned_as_worst(gemm):
    worst = CostModel(**FAST).fit(gemm)
    drop = CostModel(**FAST, failures="drop").fit(gemm)
    assert worst.n_train_rows_ == len(gemm) and drop.n_train_rows_ < len(gemm)
    failing = gemm["status"] != "ok"
    for _, rows in gemm.groupby("workload"):
        assert rows.iloc[worst.rank(rows)[0]]["status"] == "ok"
    assert failing.any()


def test_rows_of_several_gpus_are_ranked_per_gpu(gemm):
    """A store with rows of two GPUs: each workload is one query group per GPU (a config is
    never ranked against one timed on another GPU); one GPU: one group per workload."""
    one = gemm.assign(gpu="NVIDIA H200")
    two = pd.concat([one, gemm.assign(gpu="NVIDIA A100-SXM4-80GB",
                                      time_ms=gemm["time_ms"] * 3)], ignore_index=True)
    model = CostModel(**FAST)
    _, _, single = model._targets(one)
    _, _, pair = model._targets(two)
    assert len(pair) == 2 * len(single) and sorted(pair) == sorted([*single, *single])
    assert CostModel(**FAST).fit(two).n_train_workloads_ == 2 * len(single)


def test_rank_is_deterministic_and_breaks_ties_by_key(gemm):
    rows = gemm[gemm["workload"] == gemm["workload"].iloc[0]]
    flat = CostModel(n_estimators=2, learning_rate=0.0).fit(gemm)  # every score equal
    order = flat.rank(rows)
    assert rows["config"].iloc[order].tolist() == sorted(rows["config"])
    model = CostModel(**FAST).fit(gemm)
    shuffled = rows.sample(frac=1.0, random_state=1)
    a = rows["config"].iloc[model.rank(rows)].tolist()
    b = shuffled["config"].iloc[model.rank(shuffled)].tolist()
    assert a == b


def test_top_k_builds_rows_without_a_dataset(fitted):
    configs = [Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "SPLIT_K": 1},
                      num_warps=4, num_stages=3) for bm in (32, 64, 128) for bn in (32, 128)]
    best = fitted.top_k("gemm", {"M": 1024, "N": 1024, "K": 1024}, "float16", configs, 3)
    assert len(best) == 3 and all(isinstance(c, Config) for c in best)
    assert len({c.key for c in best}) == 3
    assert len(fitted.top_k("gemm", {"M": 1024, "N": 1024, "K": 1024}, "float16",
                            configs, 100)) == len(configs)
    with pytest.warns(UserWarning, match="outside the trained range"):
        fitted.top_k("gemm", {"M": 1 << 20, "N": 1024, "K": 1024}, "float16", configs, 1)
    with pytest.raises(ValueError, match="not on kernel"):
        fitted.top_k("softmax", {"rows": 1, "cols": 1}, "float16", configs, 1)


def test_family_options(data):
    with pytest.raises(ValueError, match="family='all'"):
        CostModel(**FAST).fit(data)
    both = CostModel(**FAST, family="all").fit(data)
    assert both.families_ == ["gemm", "softmax"]
    only = CostModel(**FAST, family="softmax").fit(data)
    assert only.families_ == ["softmax"]
    with pytest.raises(ValueError, match="cannot score"):
        only.predict(data[data["kernel"] == "gemm"])


def test_save_load_round_trip(tmp_path, fitted, gemm):
    path = fitted.save(tmp_path / "m")
    assert path.name == "m.json" and (tmp_path / "m.ubj").exists()
    meta = json.loads(path.read_text())
    for field in ("schema_version", "params", "feature_names", "families", "gpu",
                  "triton_version", "train_hash", "shape_ranges"):
        assert field in meta
    assert meta["shape_ranges"]["gemm"]["M"] == [6.0, pytest.approx(np.log2(4096))]
    loaded = CostModel.load(tmp_path / "m.ubj")
    assert loaded.get_params() == fitted.get_params()
    assert np.array_equal(loaded.predict(gemm), fitted.predict(gemm))
    assert loaded.train_hash_ == fitted.train_hash_ == dataset_hash(gemm)


def test_schema_mismatch_is_a_clear_error(tmp_path, fitted):
    path = fitted.save(tmp_path / "m")
    meta = json.loads(path.read_text())
    stale = {**meta, "feature_names": meta["feature_names"][:-1] + ["retired_feature"]}
    path.write_text(json.dumps(stale))
    with pytest.raises(ModelSchemaError, match="retired_feature") as err:
        CostModel.load(path)
    assert isinstance(err.value, ValueError)
    path.write_text(json.dumps({**meta, "schema_version": 999}))
    with pytest.raises(ModelSchemaError, match="schema_version 999"):
        CostModel.load(path)
    path.write_text(json.dumps({**meta, "params": {**meta["params"], "alpha": 1}}))
    with pytest.raises(ModelSchemaError, match="alpha"):
        CostModel.load(path)


def test_load_unknown_name_says_where_it_looked():
    with pytest.raises(FileNotFoundError, match="shipped model named 'no-such-gpu'"):
        CostModel.load("no-such-gpu")


def test_a_copied_pair_loads_its_own_booster(tmp_path, fitted, gemm, data):
    """The JSON names its booster, but loading reads the .ubj of the JSON's own stem: a copied
    v1.json/v1.ubj pair never loads the booster it was copied from."""
    import shutil

    fitted.save(tmp_path / "h200_gemm")
    other = CostModel(**{**FAST, "max_depth": 2}, seed=7).fit(gemm)
    other.save(tmp_path / "other")
    shutil.copy(tmp_path / "h200_gemm.json", tmp_path / "v1.json")
    shutil.copy(tmp_path / "other.ubj", tmp_path / "v1.ubj")  # v1 is another model's booster
    assert json.loads((tmp_path / "v1.json").read_text())["booster"] == "h200_gemm.ubj"
    v1 = CostModel.load(tmp_path / "v1")
    assert np.array_equal(v1.predict(gemm), other.predict(gemm))
    assert not np.array_equal(v1.predict(gemm), fitted.predict(gemm))


def test_a_missing_or_torn_booster_is_one_line(tmp_path, fitted):
    fitted.save(tmp_path / "m")
    booster = tmp_path / "m.ubj"
    booster.write_bytes(booster.read_bytes()[:40])
    with pytest.raises(ModelSchemaError) as err:
        CostModel.load(tmp_path / "m")
    assert "not a readable XGBoost booster" in str(err.value) and "\n" not in str(err.value)
    booster.unlink()
    with pytest.raises(ModelSchemaError, match="its booster m.ubj is missing") as err:
        CostModel.load(tmp_path / "m.json")
    assert "\n" not in str(err.value)


def test_every_shipped_model_loads():
    import json

    from costtune.model.files import shipped_model_dir
    from costtune.model.xgb import MODEL_FORMAT

    # Beside the models sits their trained config values (tune/trained.py), not a model.
    names = sorted(p.stem for p in shipped_model_dir().glob("*.json")
                   if json.loads(p.read_text()).get("format") == MODEL_FORMAT)
    assert "h200" in names
    for name in names:
        assert CostModel.load(name).families_


def test_user_models_are_found_by_name_after_the_shipped(tmp_path, fitted, monkeypatch):
    from costtune.model.files import user_model_dir

    monkeypatch.setenv("COSTTUNE_HOME", str(tmp_path / "home"))
    assert user_model_dir() == tmp_path / "home" / "models"
    fitted.save(user_model_dir() / "mine")
    assert CostModel.load("mine").train_hash_ == fitted.train_hash_
    fitted.save(user_model_dir() / "h200")  # cannot shadow the shipped model
    assert CostModel.load("h200").families_ == ["attention", "gemm", "softmax"]
    monkeypatch.delenv("COSTTUNE_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_model_dir() == tmp_path / "xdg" / "costtune" / "models"


def test_leaderboard_shape_and_reports(tmp_path, data):
    model = CostModel(**FAST, family="all").fit(data[data["suite"] == "train"])
    board = leaderboard(data, model=model)
    assert set(board) == {"gemm", "softmax"}
    assert "costtune" in board["gemm"] and "triton-tutorial-8" in board["gemm"]
    assert "triton-tutorial-8" not in board["softmax"]
    for kernel in board.values():
        for metrics in kernel.values():
            assert list(metrics) == ["top1", "top2", "top4", "top8", "top16", "worst8"]
            assert all(0.0 <= v <= 1.0 for v in metrics.values())
    assert plot_topk(board, tmp_path / "topk.png").stat().st_size > 0
    assert "costtune" in format_leaderboard(board)


def test_evaluate_kfold_and_lofo(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models = {"xgb": CostModel(**FAST)}
        kfold = evaluate(data, protocol="kfold", models=models, n_splits=3, baselines=False)
        lofo = evaluate(data, protocol="lofo", models=models, baselines=False)
    assert kfold["scores"]["gemm"]["xgb"]["n_workloads"] == 8
    assert lofo["scores"]["softmax"]["xgb"]["n_workloads"] == 6
    with pytest.raises(ValueError, match="protocol"):
        evaluate(data, protocol="loo")
