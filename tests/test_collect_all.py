"""The device collection script refuses to mix GPU models in one store."""

import shutil
from pathlib import Path

import pytest

from costtune import Store
from experiments.device.collect_all import check_gpu

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
