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


def test_settle_memory_places_a_workload_the_same_whatever_ran_before(monkeypatch):
    """With settle (the default) a workload's buffers land at the same address after any
    earlier workload of the process, so its rows don't depend on a worker's share of the
    queue; experiments/placement_noise.py measures what that does to the timings."""
    from costtune.measure.gpu import measure_workload

    fam = get_family("softmax")
    make = fam.make_inputs
    addresses = []

    def spy(*args, **kwargs):
        out = make(*args, **kwargs)
        addresses.append(out["x"].data_ptr())
        return out

    target = Workload("softmax", {"rows": 256, "cols": 91}, "float16")
    configs = fam.config_space(target.sizes).sample(2, seed=0)
    before = [None, Workload("softmax", {"rows": 4096, "cols": 4096}, "float16"),
              Workload("gemm", {"M": 512, "N": 768, "K": 256}, "float16")]
    for other in before:
        if other is not None:
            space = get_family(other.kernel).config_space(other.sizes)
            measure_workload(other, space.sample(2, seed=0), reps=2, workers=0)
        monkeypatch.setattr(fam, "make_inputs", spy)
        ms = measure_workload(target, configs, reps=2, workers=0)
        monkeypatch.setattr(fam, "make_inputs", make)
        assert any(m.status is Status.OK for m in ms), [m.error for m in ms]
    assert len(addresses) == 3 and len(set(addresses)) == 1, addresses


def test_check_rejects_a_launch_that_leaves_its_workspace_unwritten():
    # The split-K workspace of a previous, right config sits in recycled memory: without
    # the NaN workspace of the check launch the reduction alone would read it and pass.
    import types

    from costtune.kernels import gemm_splitk as gs
    from costtune.measure.gpu import check_and_time, make_flush_buffer
    from costtune.types import Config

    problem = {"M": 256, "N": 256, "K": 8192}
    inputs = gs.make_inputs(problem, "float16", seed=1, device="cuda")
    ref = gs.reference(inputs)
    config = Config.from_dict({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "SPLIT_K": 4,
                               "num_warps": 4, "num_stages": 3})

    def reduction_only(inputs, config):
        partial, total = gs.kernel_calls(inputs, config)
        total.run()
        return partial.args[2].base

    broken = types.SimpleNamespace(launch=reduction_only)
    flush = make_flush_buffer("cuda")
    right = check_and_time(gs, inputs, ref, config, reps=3, flush=flush, tol=5e-3)
    assert right["status"] is Status.OK
    wrong = check_and_time(broken, inputs, ref, config, reps=3, flush=flush, tol=5e-3)
    assert wrong["status"] is Status.WRONG_RESULT
