"""experiments/features_pending.py: the rows whose features can be computed before a GPU call
are exactly the planned configs the store lacks, shaped like dataset rows."""

from __future__ import annotations

import pytest

from costtune.collect import suite_workloads, workload_configs
from costtune.features.static import parse_config_key
from costtune.store.dataset import Store
from costtune.types import Measurement, Status
from experiments.features_pending import pending_rows


def test_pending_rows_are_the_configs_the_store_lacks(tmp_path):
    store = Store(tmp_path)
    w = suite_workloads("gemm", "test")[0]
    configs = workload_configs(w)
    stored = configs[:5]
    store.append([Measurement(w, c, Status.OK, time_ms=1.0 + i, extra={"suite": "test"}).as_row()
                  for i, c in enumerate(stored)], meta={"gpu": "NVIDIA H200"})
    rows = pending_rows(["gemm:test"], store)
    mine = rows[rows["workload"] == w.id]
    assert set(mine["config"]) == {c.key for c in configs[5:]}
    assert len(rows) == sum(len(workload_configs(x)) for x in suite_workloads("gemm", "test")) - 5
    r = mine.iloc[0]
    assert (r["kernel"], r["implementation"], r["suite"], r["dtype"]) == (
        "gemm", "gemm", "test", w.dtype)
    assert all(r[k] == v for k, v in w.sizes.items())
    assert all(r[k] == v for k, v in parse_config_key(r["config"]).as_dict().items())


def test_a_spec_without_a_suite_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="not kernel:suite"):
        pending_rows(["gemm"], Store(tmp_path))
