"""gemm_tutorial: the tutorial-03 style GEMM. Correctness under the interpreter on odd sizes
(wrapped offsets, K tail), strided operands, config checks, the space and its constraints, and
AOT compiles for sm_90 of the largest configs in a spawned worker."""

from __future__ import annotations

import math

import pytest
import torch

from costtune.build.pool import get_pool
from costtune.hardware import H200
from costtune.kernels import gemm, gemm_tutorial, relative_error
from costtune.types import Config

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ODD = {"M": 37, "N": 45, "K": 70}


def cfg(bm=32, bn=32, bk=32, group=8, warps=4, stages=2) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_SIZE_M": group,
            "num_warps": warps, "num_stages": stages}


def check(inputs: dict, config, dtype: str) -> torch.Tensor:
    out = gemm_tutorial.launch(inputs, config)
    assert out.dtype == inputs["a"].dtype
    assert tuple(out.shape) == (inputs["a"].shape[0], inputs["b"].shape[1])
    err = relative_error(out, gemm_tutorial.reference(inputs))
    assert err <= gemm_tutorial.TOLERANCE[dtype] / 4, f"{config}: {err:.2e}"
    return out


# 37 x 45 in 16- and 32-wide tiles: partial tiles whose wrapped rows/cols must not be stored;
# K=70 leaves a tail in every BLOCK_K. Group widths 1 (row order), 2 (a partial last band of
# the 3 tile rows) and 8 (one band).
CASES = [cfg(16, 16, 32, group=1), cfg(16, 32, 16, group=2), Config.from_dict(cfg(32, 16, 64))]


@pytest.mark.parametrize("dtype", gemm_tutorial.DTYPES)
@pytest.mark.parametrize("config", CASES, ids=["g1", "g2", "g8"])
def test_matches_reference(dtype, config):
    check(gemm_tutorial.make_inputs(ODD, dtype, seed=1, device=DEVICE), config, dtype)


def test_group_order_covers_every_tile():
    # 5 x 4 tiles, GROUP_SIZE_M = 2 and 8: each output element written exactly once and right.
    p = {"M": 80, "N": 64, "K": 32}
    x = gemm_tutorial.make_inputs(p, "float16", seed=4, device=DEVICE)
    outs = [check(x, cfg(16, 16, 32, group=g), "float16") for g in (1, 2, 8)]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_transposed_and_sliced_operands():
    m, n, k = ODD["M"], ODD["N"], ODD["K"]
    gen = torch.Generator().manual_seed(3)
    a_t = torch.randn(k, m, generator=gen).half().to(DEVICE).t()
    b_s = torch.randn(k, 2 * n, generator=gen).half().to(DEVICE)[:, 1::2]
    check({"a": a_t, "b": b_s}, cfg(32, 16, 16), "float16")


def test_configs_from_the_space():
    p = {"M": 1, "N": 40, "K": 300}  # skinny: 32-wide tiles kept
    space = gemm_tutorial.config_space(p)
    x = gemm_tutorial.make_inputs(p, "bfloat16", seed=2, device=DEVICE)
    picked = next(c for c in space if c["BLOCK_K"] == 64 and c["num_stages"] == 3)
    check(x, picked, "bfloat16")


def test_kernel_calls_grid_and_implied_params():
    x = gemm_tutorial.make_inputs(ODD, "float16")
    for config in (cfg(32, 32, 32), Config.from_dict(cfg(16, 64, 32, group=1, warps=8))):
        (call,) = gemm_tutorial.kernel_calls(x, config)
        c = Config.from_dict(config).as_dict() if isinstance(config, dict) else config.as_dict()
        tiles = math.ceil(37 / c["BLOCK_M"]) * math.ceil(45 / c["BLOCK_N"])
        assert call.grid == gemm_tutorial.grid(ODD, config) == (tiles,)
        assert call.kwargs["GROUP_SIZE_M"] == c["GROUP_SIZE_M"] and not call.kwargs["UPCAST_DOT"]
        assert call.num_warps == c["num_warps"] and call.args[2].dtype == torch.float16
        assert gemm_tutorial.implied_params(ODD, config) == {"SPLIT_K": 1}


@pytest.mark.parametrize("config,match", [
    ({**cfg(), "SPLIT_K": 2}, "unknown config parameter"),
    ({k: v for k, v in cfg().items() if k != "GROUP_SIZE_M"}, "missing \\['GROUP_SIZE_M'\\]"),
    (cfg(group=0), "GROUP_SIZE_M=0 must be >= 1"),
    (cfg(bm=24), "BLOCK_M=24"),
    (cfg(bk=32.0), "BLOCK_K=32.0 must be an int"),
])
def test_bad_configs_raise(config, match):
    x = gemm_tutorial.make_inputs(ODD, "float16")
    with pytest.raises(ValueError, match=match):
        gemm_tutorial.launch(x, config)
    with pytest.raises(ValueError, match=match):
        gemm_tutorial.grid(ODD, config)


@pytest.mark.parametrize("inputs,match", [
    ({"a": torch.zeros(4, 8).half(), "b": torch.zeros(9, 4).half()}, "^b has 9 rows"),
    ({"a": torch.zeros(4, 8), "b": torch.zeros(8, 4)}, "^a has dtype"),
    ({"a": torch.zeros(4, 8).half()}, "missing \\['b'\\]"),
])
def test_bad_inputs_raise(inputs, match):
    with pytest.raises(ValueError, match=match):
        gemm_tutorial.launch(inputs, cfg())


def test_suites_are_the_familys():
    assert gemm_tutorial.TRAIN_SHAPES == gemm.TRAIN_SHAPES
    assert gemm_tutorial.TEST_SHAPES == gemm.TEST_SHAPES
    assert gemm_tutorial.BF16_SUBSET == gemm.BF16_SUBSET


def test_space_constraints():
    space = gemm_tutorial.config_space()
    assert [c.name for c in space.constraints] == ["shared_memory", "accumulator_registers"]
    assert space.violated(cfg(128, 256, 64, warps=8, stages=5)) == ["shared_memory"]
    assert space.violated(cfg(256, 128, 64, warps=4, stages=2)) == ["accumulator_registers"]
    sizes = [len(gemm_tutorial.config_space(p))
             for p in gemm_tutorial.TRAIN_SHAPES + gemm_tutorial.TEST_SHAPES]
    assert 40 <= min(sizes) and max(sizes) <= 250
    square = gemm_tutorial.config_space({"M": 4096, "N": 4096, "K": 4096})
    assert all(min(c["BLOCK_M"], c["BLOCK_N"]) >= 64 for c in square)
    assert {c["GROUP_SIZE_M"] for c in square} == {1, 8}
    # One tile column (BLOCK_N=64 over N=40): every group width gives the same order, only
    # GROUP_SIZE_M=1 is kept; two (BLOCK_N=32) keep both.
    narrow = gemm_tutorial.config_space({"M": 4096, "N": 40, "K": 512})
    assert {c["GROUP_SIZE_M"] for c in narrow if c["BLOCK_N"] == 64} == {1}
    assert {c["GROUP_SIZE_M"] for c in narrow if c["BLOCK_N"] == 32} == {1, 8}
    assert narrow.violated(cfg(64, 64, 32, group=8)) == ["group_changes_order"]
    assert not narrow.is_valid(cfg(32, 64, 32))  # BLOCK_N over the problem


# The largest configs the 4096^3 space keeps (5-stage 64x256 / 256x64, 4-stage 128x256), and
# the 5-stage 128x256 it drops for shared memory.
AOT_CASES = [
    (cfg(64, 256, 64, warps=4, stages=5), "ok"),
    (cfg(256, 64, 64, warps=8, stages=5), "ok"),
    (cfg(128, 256, 64, group=1, warps=8, stages=4), "ok"),
    (cfg(256, 128, 64, warps=8, stages=4), "ok"),
    (cfg(128, 128, 64, warps=4, stages=5), "ok"),
    (cfg(128, 256, 64, warps=8, stages=5), "out_of_resources"),
]


def _aot(cases: list[tuple[dict, str]]) -> list[dict]:
    from costtune.build.aot import compile_job, specialize
    from costtune.features.compiled import meta_inputs

    x = meta_inputs(gemm_tutorial, {"M": 4096, "N": 4096, "K": 4096}, "float16")
    return [compile_job(specialize(gemm_tutorial.kernel_calls(x, c)[0])) for c, _ in cases]


def test_aot_compiles_for_sm90_match_the_space():
    records = get_pool(1).submit(_aot, AOT_CASES).result()
    space = gemm_tutorial.config_space({"M": 4096, "N": 4096, "K": 4096})
    for (c, status), rec in zip(AOT_CASES, records, strict=True):
        assert rec["status"] == status, (c, rec["error"][:200])
        assert space.is_valid(c) == (status == "ok"), c
        loads = c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * 2
        floor = gemm_tutorial.shared_memory_floor({}, c, dtype="float16",
                                                  aligned={"a": True, "b": True})
        assert floor <= rec["shared_bytes"] == loads, c
        if status == "ok":
            assert rec["shared_bytes"] <= H200.max_shared_per_block and rec["local_bytes"] == 0
