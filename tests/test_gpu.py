"""GPU-only checks (run on the H200 with `pytest -m gpu`); skipped on CPU machines."""

from __future__ import annotations

import pytest

from costtune.kernels import FAMILIES, get_family, relative_error
from costtune.types import Status, Workload

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", FAMILIES)
def test_sampled_configs_match_reference_on_gpu(name):
    fam = get_family(name)
    for problem in fam.TEST_SHAPES[:2] + fam.TRAIN_SHAPES[-1:]:
        for dtype in fam.DTYPES[:2]:
            inputs = fam.make_inputs(problem, dtype, seed=1, device="cuda")
            ref = fam.reference(inputs)
            for config in fam.config_space(problem).sample(4, seed=2):
                try:
                    out = fam.launch(inputs, config)
                except Exception as exc:  # resource failures are data, not kernel bugs
                    assert "resource" in str(exc).lower(), f"{config.key}: {exc}"
                    continue
                err = relative_error(out, ref)
                assert err <= fam.TOLERANCE[dtype], f"{problem} {dtype} {config.key}: {err:.2e}"


@pytest.mark.parametrize("name", FAMILIES)
def test_measure_workload_records_every_config(name):
    from costtune.measure.gpu import measure_workload

    fam = get_family(name)
    problem = fam.TEST_SHAPES[0]
    w = Workload(name, {k: problem[k] for k in fam.PROBLEM_KEYS}, fam.DTYPES[0])
    configs = fam.config_space(problem).sample(6, seed=0)
    ms = measure_workload(w, configs, reps=5, workers=4)
    assert [m.config.key for m in ms] == [c.key for c in configs]
    ok = [m for m in ms if m.status is Status.OK]
    assert ok, [m.error for m in ms]
    for m in ok:
        assert m.time_p20_ms <= m.time_ms <= m.time_p80_ms
        assert m.rel_err <= fam.TOLERANCE[w.dtype]
        assert m.extra["ref_time_ms"] > 0
    assert sum(m.extra["retime_ms"] == m.extra["retime_ms"] for m in ok) >= 1
