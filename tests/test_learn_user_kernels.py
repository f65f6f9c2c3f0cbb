"""experiments/learn_user_kernels.py: tuning calls of a user-style kernel replayed through
costtune.autotune on H200-measured times; learn=True writes and reads the per-kernel model
(refit from the shipped table, or trees added from a copy without it)."""

from __future__ import annotations

import os
import sys

import pytest

from experiments import harness
from experiments import learn_user_kernels as luk


@pytest.fixture(scope="module", autouse=True)
def user_kernels_importable():
    sys.path.insert(0, str(harness.ROOT / "experiments"))


@pytest.fixture(scope="module")
def records():
    data = luk.spaces()
    assert len(data["inductor_softmax"]) >= luk.MIN_SHAPES  # the shipped raw records
    return data["inductor_softmax"][:3]


@pytest.mark.parametrize("mode,method", [("learn", "refit"), ("learn:continue", "continue"),
                                         ("shipped", "")])
def test_a_program_learns_by_the_modes_method(records, mode, method, monkeypatch):
    monkeypatch.setenv("COSTTUNE_HOME", "unused")  # program() uses a fresh one, then restores
    calls = luk.program("inductor_softmax", records, mode=mode, k=4, seed=0)
    assert [c["position"] for c in calls] == [0, 1, 2]
    assert {c["learned"] for c in calls} == {method}
    for c in calls:
        assert 0 < c["score"] <= 1.0 and c["benchmarked"] == 4
    assert os.environ["COSTTUNE_HOME"] == "unused"
    import user_kernels  # what the replay patches for a call is undone after it

    assert "run" not in vars(user_kernels.STYLES["inductor_softmax"].kernel)
    assert user_kernels.num_sms("cpu") == 4


def test_explore_benchmarks_the_whole_list_once(records):
    calls = luk.program("inductor_softmax", records, mode="learn:explore", k=4, seed=1)
    assert [c["explore"] for c in calls] == [True, False, False]
    assert calls[0]["benchmarked"] == len(records[0]["times"]) and calls[0]["score"] == 1.0
    assert calls[1]["benchmarked"] == 4


def test_a_config_that_could_not_launch_is_replaced_as_on_the_gpu(records):
    import user_kernels

    from experiments.device.hook_user_spaces_h200 import configs_of

    style, configs = user_kernels.STYLES["inductor_softmax"], configs_of("inductor_softmax")
    record = records[0]
    first = luk.tune(style, configs, record, k=1, learn=False, model="h200")
    assert first["benchmarked"] == 1 and first["score"] > 0
    # the config it picked could not launch on the GPU: the tuner replaces it (next-ranked)
    picked = [c for c, t in record["times"].items()
              if min(record["times"].values()) / t == first["score"]]
    times = {**record["times"], **dict.fromkeys(picked, float("inf"))}
    again = luk.tune(style, configs, {**record, "times": times}, k=1, learn=False,
                     model="h200")
    assert again["benchmarked"] == 1 and 0 < again["score"] <= first["score"]
