"""The device collection scripts: collect_all refuses to mix GPU models in one store, and
merge_features adds features only of configs the dataset measured."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from costtune import Store
from experiments.device.collect_all import check_gpu
from experiments.device.merge_features import merge

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "h200"


def _one_part(root: Path) -> Store:
    part = next((DATASET / "softmax").glob("part-*.parquet"))
    (root / "softmax").mkdir(parents=True)
    shutil.copy2(part, root / "softmax" / part.name)
    return Store(root)


def test_other_gpu_model_is_refused(tmp_path):
    store = _one_part(tmp_path / "store")
    with pytest.raises(SystemExit, match=r"'NVIDIA H100 80GB HBM3'.*'NVIDIA H200'"):
        check_gpu(store, "NVIDIA H100 80GB HBM3", allow=False)
    check_gpu(store, "NVIDIA H100 80GB HBM3", allow=True)
    check_gpu(store, "NVIDIA H200", allow=False)


def test_empty_store_takes_any_gpu(tmp_path):
    check_gpu(Store(tmp_path / "empty"), "NVIDIA H100 80GB HBM3", allow=False)


def test_merge_leaves_out_features_of_unmeasured_configs(tmp_path):
    store = _one_part(tmp_path / "store")
    rows = pd.read_parquet(store.parts()[0])
    measured = pd.MultiIndex.from_frame(rows[["workload", "config"]])
    first = rows.iloc[0]
    incoming = pd.DataFrame({"workload": [first["workload"], "softmax_never_collected"],
                             "config": [first["config"], first["config"]],
                             "registers": [40, 41]})
    incoming.to_parquet(tmp_path / "compiled_softmax.parquet")
    target = tmp_path / "features_softmax.parquet"
    report = merge(target, [tmp_path / "compiled_softmax.parquet"], measured=measured)
    assert "1 without a measurement left out" in report
    assert pd.read_parquet(target)["workload"].tolist() == [first["workload"]]
    # Nothing stored is replaced: a second merge of other values keeps the first.
    incoming.assign(registers=[99, 99]).to_parquet(tmp_path / "again.parquet")
    merge(target, [tmp_path / "again.parquet"], measured=measured)
    assert pd.read_parquet(target)["registers"].tolist() == [40]
