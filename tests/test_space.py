from __future__ import annotations

import pytest

from costtune.space.config_space import ConfigSpace
from costtune.types import Config, Measurement, Status, Workload


def make_space() -> ConfigSpace:
    return ConfigSpace(
        {"BLOCK_M": [32, 64, 128], "BLOCK_N": [32, 64], "num_warps": [4, 8], "num_stages": [2, 3]},
        constraints={"tile": lambda c: c["BLOCK_M"] * c["BLOCK_N"] <= 4096})


def test_enumeration_is_deterministic_and_filtered():
    space = make_space()
    keys = [c.key for c in space]
    assert keys == [c.key for c in make_space()]
    # 3*2*2*2 = 24 combos, 128x64 breaks the tile limit (4 combos)
    assert len(space) == 20
    assert all(c["BLOCK_M"] * c["BLOCK_N"] <= 4096 for c in space)
    assert keys[0] == "BLOCK_M=32,BLOCK_N=32,num_warps=4,num_stages=2"


def test_sample_is_seeded_distinct_and_valid():
    space = make_space()
    a, b = space.sample(7, seed=3), space.sample(7, seed=3)
    assert [c.key for c in a] == [c.key for c in b]
    assert len({c.key for c in a}) == 7
    assert all(c in space for c in a)
    assert space.sample(7, seed=4) != a
    assert len(space.sample(1000)) == len(space)


def test_neighbors_change_one_parameter_by_one_step():
    space = make_space()
    start = Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=2)
    nbrs = space.neighbors(start)
    assert {n.key for n in nbrs} == {
        "BLOCK_M=32,BLOCK_N=32,num_warps=4,num_stages=2",
        "BLOCK_M=128,BLOCK_N=32,num_warps=4,num_stages=2",
        "BLOCK_M=64,BLOCK_N=64,num_warps=4,num_stages=2",
        "BLOCK_M=64,BLOCK_N=32,num_warps=8,num_stages=2",
        "BLOCK_M=64,BLOCK_N=32,num_warps=4,num_stages=3",
    }
    # 128x64 would break the constraint, so it's not a neighbour of 128x32
    far = Config({"BLOCK_M": 128, "BLOCK_N": 32}, num_warps=4, num_stages=2)
    assert all(n["BLOCK_N"] == 32 for n in space.neighbors(far) if n["BLOCK_M"] == 128)


def test_triton_round_trip():
    space = make_space()
    tcs = space.to_triton()
    assert len(tcs) == len(space)
    back = space.from_triton(tcs)
    assert [c.key for c in back] == [c.key for c in space]
    assert tcs[0].num_warps == 4 and tcs[0].kwargs == {"BLOCK_M": 32, "BLOCK_N": 32}


def test_from_triton_rejects_constraint_breakers():
    import triton

    with pytest.raises(ValueError, match="tile"):
        make_space().from_triton([triton.Config({"BLOCK_M": 128, "BLOCK_N": 64},
                                                num_warps=4, num_stages=2)])


@pytest.mark.parametrize("params, match", [
    ({}, "at least one parameter"),
    ({"BLOCK": []}, "'BLOCK' has no values"),
    ({"BLOCK": [1, 1]}, "repeated"),
])
def test_bad_spaces_raise(params, match):
    with pytest.raises(ValueError, match=match):
        ConfigSpace(params)


def test_empty_after_constraints_raises_naming_constraints():
    space = ConfigSpace({"B": [1, 2]}, constraints={"never": lambda c: False})
    with pytest.raises(ValueError, match="never"):
        space.configs()


def test_unknown_and_missing_names_raise():
    space = make_space()
    with pytest.raises(ValueError, match="unknown parameter.*BLOCK_K"):
        space.is_valid({"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2,
                        "BLOCK_K": 32})
    with pytest.raises(ValueError, match="missing parameter.*num_stages"):
        space.neighbors({"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 4})
    assert {"BLOCK_M": 1} not in space


def test_config_and_workload_values():
    c = Config.from_dict({"BLOCK_M": 64, "num_warps": 8, "SPLIT_K": 2, "num_stages": 4})
    assert c.key == "BLOCK_M=64,SPLIT_K=2,num_warps=8,num_stages=4"
    assert Config.from_triton(c.to_triton()) == c
    assert hash(c) == hash(Config.from_dict(c.as_dict()))
    w = Workload("gemm", {"M": 128, "N": 256, "K": 64}, "float16")
    assert w.id == "gemm_M128_N256_K64_float16"
    row = Measurement(w, c, Status.WRONG_RESULT, error="bad").as_row()
    assert row["status"] == "wrong_result" and row["M"] == 128 and row["SPLIT_K"] == 2
    assert row["time_ms"] != row["time_ms"]  # NaN: a failed config has no time
