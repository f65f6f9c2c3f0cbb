"""GEMM family: correctness (interpreter on CPU), split-K, strides, space, suites, input checks."""

from __future__ import annotations

import math

import pytest
import torch
import triton

from costtune.hardware import H200
from costtune.kernels import gemm, relative_error
from costtune.types import Config

# On a GPU machine the same tests run compiled; on CPU conftest turns the interpreter on.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ODD = {"M": 37, "N": 45, "K": 70}


def cfg(bm: int, bn: int, bk: int, split: int = 1, warps: int = 4, stages: int = 2) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split,
            "num_warps": warps, "num_stages": stages}


def check(inputs: dict, config, dtype: str) -> torch.Tensor:
    out = gemm.launch(inputs, config)
    m, n = inputs["a"].shape[0], inputs["b"].shape[1]
    assert out.dtype == inputs["a"].dtype and tuple(out.shape) == (m, n)
    err = relative_error(out, gemm.reference(inputs))
    # Real outputs should sit well inside the tolerance, not just under it.
    assert err <= gemm.TOLERANCE[dtype] / 4, f"{config}: {err:.2e}"
    return out


# K=70 is no multiple of any block. BLOCK_K=16 with SPLIT_K=4 gives splits of 2, 2, 1 and 0
# K tiles (an empty split); BLOCK_K=32 with SPLIT_K=2 gives 2 and 1. A Config and a dict.
CASES = [cfg(16, 16, 16), cfg(32, 32, 32, split=2), Config(cfg(16, 32, 16, split=4))]


@pytest.mark.parametrize("dtype", gemm.DTYPES)
@pytest.mark.parametrize("config", CASES, ids=["plain", "split2", "split4"])
def test_matches_reference(dtype, config):
    check(gemm.make_inputs(ODD, dtype, seed=1, device=DEVICE), config, dtype)


def test_transposed_and_sliced_operands():
    m, n, k = ODD["M"], ODD["N"], ODD["K"]
    gen = torch.Generator().manual_seed(3)
    a_t = torch.randn(k, m, generator=gen).half().to(DEVICE).t()  # column-major A
    b_t = torch.randn(n, k, generator=gen).half().to(DEVICE).t()  # column-major B
    check({"a": a_t, "b": b_t}, cfg(32, 16, 16), "float16")
    # Every-other-column views: non-unit inner strides on both operands, with split-K.
    a_s = torch.randn(m, 2 * k, generator=gen).half().to(DEVICE)[:, ::2]
    b_s = torch.randn(k, 2 * n, generator=gen).half().to(DEVICE)[:, 1::2]
    check({"a": a_s, "b": b_s}, cfg(16, 32, 32, split=2), "float16")


def test_configs_from_the_default_space():
    # A GEMV-like shape (M=1 under a 32-row tile) and a space config that splits K.
    problem = {"M": 1, "N": 40, "K": 300}
    space = gemm.config_space(problem)
    split = next(c for c in space if c["SPLIT_K"] > 1 and c["BLOCK_N"] == 32)
    plain = next(c for c in space if c["SPLIT_K"] == 1 and c["BLOCK_K"] == 128)
    inputs = gemm.make_inputs(problem, "float16", seed=2, device=DEVICE)
    torch.testing.assert_close(check(inputs, split, "float16"), check(inputs, plain, "float16"),
                               atol=2e-3, rtol=1e-2)


def test_tolerance_rejects_garbage():
    # Plausible bugs at suite scale, computed with torch alone: a dropped BLOCK_K slice of a
    # long K, a transposed operand, zeros.
    x = gemm.make_inputs({"M": 64, "N": 64, "K": 16384}, "float16", seed=0)
    ref = gemm.reference(x)
    a, b = x["a"].float(), x["b"].float()
    dropped = ref - a[:, 4096:4128] @ b[4096:4128]
    sq = gemm.make_inputs({"M": 64, "N": 64, "K": 64}, "bfloat16", seed=0)
    transposed = sq["a"].float() @ sq["b"].float().t()
    for dtype in gemm.DTYPES:
        assert relative_error(dropped, ref) > gemm.TOLERANCE[dtype]
        assert relative_error(transposed, gemm.reference(sq)) > gemm.TOLERANCE[dtype]
        assert relative_error(torch.zeros_like(ref), ref) > gemm.TOLERANCE[dtype]
        # Rounding the exact result to the dtype stays far below the threshold.
        rounded = ref.to(getattr(torch, dtype))
        assert relative_error(rounded, ref) < gemm.TOLERANCE[dtype] / 5


def test_kernel_calls_match_grid():
    x = gemm.make_inputs(ODD, "float16")
    for config in (cfg(32, 32, 32), cfg(16, 32, 16, split=4), Config(cfg(64, 16, 32, split=2))):
        (call,) = gemm.kernel_calls(x, config)
        assert call.grid == gemm.grid(ODD, config)
        c = config if isinstance(config, dict) else config.as_dict()
        tiles = math.ceil(37 / c["BLOCK_M"]) * math.ceil(45 / c["BLOCK_N"])
        assert call.grid == (tiles, c["SPLIT_K"]) and call.num_programs == tiles * c["SPLIT_K"]
        assert call.num_warps == c["num_warps"] and call.num_stages == c["num_stages"]
        assert call.kwargs["GROUP_M"] == gemm.GROUP_M and not call.kwargs["UPCAST_DOT"]
        out = call.args[2]
        assert out.dtype == (torch.float16 if c["SPLIT_K"] == 1 else torch.float32)


def test_make_inputs_seeded_and_scaled():
    p = {"M": 8, "N": 16, "K": 4096}
    a = gemm.make_inputs(p, "bfloat16", seed=3)
    b = gemm.make_inputs(p, "bfloat16", seed=3)
    c = gemm.make_inputs(p, "bfloat16", seed=4)
    assert a["a"].dtype == torch.bfloat16 and a["a"].shape == (8, 4096)
    assert a["b"].shape == (4096, 16)
    assert torch.equal(a["a"], b["a"]) and torch.equal(a["b"], b["b"])
    assert not torch.equal(a["a"], c["a"])
    # C stays O(1) however long K is, so fp16 never overflows.
    assert 0.5 < float(gemm.reference(a).std()) < 2.0
    with pytest.raises(ValueError, match="float32"):
        gemm.make_inputs(p, "float32")


def test_flops_bytes_and_torch_op():
    p = {"M": 10, "N": 20, "K": 30}
    assert gemm.flops(p) == 2 * 10 * 20 * 30
    assert gemm.min_bytes(p, "float16") == (300 + 600 + 200) * 2
    x = gemm.make_inputs(p, "float16")
    assert gemm.torch_op(x).dtype == torch.float16
    assert relative_error(gemm.torch_op(x), gemm.reference(x)) <= gemm.TOLERANCE["float16"]


@pytest.mark.parametrize("inputs,match", [
    ({"a": torch.zeros(4, 8), "b": torch.zeros(8, 4).half()}, "^a has dtype"),
    ({"a": torch.zeros(4, 8).half(), "b": torch.zeros(8, 4, dtype=torch.int8)}, "^b has dtype"),
    ({"a": torch.zeros(2, 4, 8).half(), "b": torch.zeros(8, 4).half()}, "^a must have 2"),
    ({"a": torch.zeros(4, 8).half(), "b": torch.zeros(8).half()}, "^b must have 2"),
    ({"a": torch.zeros(4, 8).half(), "b": torch.zeros(9, 4).half()}, "^b has 9 rows"),
    ({"a": torch.zeros(4, 8).half(), "b": torch.zeros(8, 4).bfloat16()}, "^b has dtype"),
    ({"a": torch.zeros(4, 8).half(), "b": torch.zeros(8, 4, device="meta").half()}, "^b is on"),
    ({"a": [[1.0]], "b": torch.zeros(8, 4).half()}, "^a must be a torch.Tensor"),
    ({"a": torch.zeros(4, 8).half()}, "missing \\['b'\\]"),
])
def test_bad_inputs_name_the_argument(inputs, match):
    with pytest.raises(ValueError, match=match):
        gemm.kernel_calls(inputs, cfg(32, 32, 32))


@pytest.mark.parametrize("config,match", [
    ({**cfg(32, 32, 32), "GROUP_M": 4}, "unknown config parameter"),
    ({k: v for k, v in cfg(32, 32, 32).items() if k != "SPLIT_K"}, "missing \\['SPLIT_K'\\]"),
    (cfg(24, 32, 32), "BLOCK_M=24"),
    (cfg(32, 8, 32), "BLOCK_N=8"),
    (cfg(32, 32, 32, split=0), "SPLIT_K=0"),
    (cfg(32, 32, 32.0), "BLOCK_K=32.0 must be an int"),
])
def test_bad_configs_raise(config, match):
    x = gemm.make_inputs(ODD, "float16")
    with pytest.raises(ValueError, match=match):
        gemm.launch(x, config)
    with pytest.raises(ValueError, match=match):
        gemm.grid(ODD, config)


def test_numpy_ints_from_a_table_are_accepted():
    import numpy as np

    config = {k: np.int64(v) for k, v in cfg(32, 16, 32, split=2).items()}
    (call,) = gemm.kernel_calls(gemm.make_inputs(ODD, "float16"), config)
    assert call.grid == (6, 2) and type(call.kwargs["BLOCK_M"]) is int
    assert gemm.grid({**ODD, "dtype": "float16"}, config) == (6, 2)  # extra keys ignored


def test_bad_problem_raises():
    with pytest.raises(ValueError, match="lacks \\[.K.\\]"):
        gemm.flops({"M": 1, "N": 2})
    with pytest.raises(ValueError, match=">= 1"):
        gemm.config_space({"M": 0, "N": 2, "K": 3})


def test_default_space_constraints():
    space = gemm.config_space()
    assert space.names == ["BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps",
                           "num_stages"]
    assert [c.name for c in space.constraints] == ["shared_memory", "accumulator_registers"]
    for c in space:
        d = c.as_dict()
        smem = d["num_stages"] * (d["BLOCK_M"] + d["BLOCK_N"]) * d["BLOCK_K"] * 2
        assert smem <= H200.max_shared_per_block
        assert d["BLOCK_M"] * d["BLOCK_N"] <= 256 * 32 * d["num_warps"]
    # 256 accumulators per thread (they spill) are in the space, measured; 512 are not.
    assert space.is_valid(cfg(256, 256, 32, warps=8))
    assert space.is_valid(cfg(128, 256, 32, warps=4))
    assert not space.is_valid(cfg(256, 256, 32, warps=4))
    assert space.violated(cfg(256, 256, 128, warps=4, stages=5)) == [
        "shared_memory", "accumulator_registers"]


def test_split_256_tiles_need_an_aligned_n():
    # The split-K epilogue of a 256x256 tile needs 262,144 B of shared memory when N is not a
    # multiple of 16 (measured out_of_resources on the H200); aligned N launches.
    big = cfg(256, 256, 32, split=2, warps=8)
    odd = gemm.config_space({"M": 4099, "N": 1001, "K": 2049})
    assert odd.violated(big) == ["split_k_epilogue"]
    assert odd.is_valid(cfg(128, 256, 32, split=2, warps=4))
    assert gemm.config_space({"M": 1024, "N": 1024, "K": 16384}).violated(
        {**big, "SPLIT_K": 8}) == []


def _all_shapes():
    return [("train", p) for p in gemm.TRAIN_SHAPES] + [("test", p) for p in gemm.TEST_SHAPES]


def test_problem_spaces_are_bounded_and_sound():
    full = {c.key for c in gemm.config_space()}
    for _, p in _all_shapes():
        m, n, k = p["M"], p["N"], p["K"]
        space = gemm.config_space(p)
        keys = {c.key for c in space}
        assert 100 <= len(keys) <= 650, (p, len(keys))
        assert keys <= full
        splits = set()
        for c in space:
            d = c.as_dict()
            assert d["BLOCK_M"] <= max(32, triton.next_power_of_2(m))
            assert d["BLOCK_N"] <= max(32, triton.next_power_of_2(n))
            assert d["BLOCK_K"] <= max(32, triton.next_power_of_2(k))
            if d["SPLIT_K"] > 1:
                tiles = gemm.grid(p, c)[0]
                assert k >= d["SPLIT_K"] * d["BLOCK_K"] * 4
                assert tiles * d["SPLIT_K"] <= 2 * gemm.NUM_SMS
                splits.add(d["SPLIT_K"])
        if k >= 16384:  # K-heavy shapes must get split-K configs
            assert splits


def test_split_k_keeps_only_the_largest_fitting_split():
    space = gemm.config_space({"M": 512, "N": 512, "K": 16384})
    # 128x128 tiles: 16 tiles, so 8 splits (128 programs) is the largest within two waves.
    base = cfg(128, 128, 64, warps=8, stages=3)
    assert space.is_valid(base) and space.is_valid({**base, "SPLIT_K": 8})
    assert space.violated({**base, "SPLIT_K": 4}) == ["split_k_pays"]
    # 32x32 tiles: 256 programs already, no split fits two waves.
    assert not space.is_valid(cfg(32, 32, 32, split=2))
    # Short K: 4 iterations of BLOCK_K per split needed.
    short = gemm.config_space({"M": 64, "N": 64, "K": 256})
    assert not short.is_valid(cfg(64, 64, 64, split=2))
    assert short.is_valid(cfg(64, 64, 32, split=2))


def test_suites():
    train = {tuple(p[k] for k in gemm.PROBLEM_KEYS) for p in gemm.TRAIN_SHAPES}
    test = {tuple(p[k] for k in gemm.PROBLEM_KEYS) for p in gemm.TEST_SHAPES}
    assert len(train) == len(gemm.TRAIN_SHAPES) and len(test) == len(gemm.TEST_SHAPES)
    assert not train & test
    assert 40 <= len(train) <= 50 and 18 <= len(test) <= 25
    for suite in (gemm.TRAIN_SHAPES, gemm.TEST_SHAPES):
        assert all(set(p) == set(gemm.PROBLEM_KEYS) for p in suite)
        assert all(gemm.flops(p) <= 0.6e12 for p in suite)
        assert any(p["M"] <= 16 for p in suite)  # skinny
        assert any(p["K"] >= 16 * max(p["M"], p["N"]) for p in suite)  # K-heavy
        assert any(p["M"] == p["N"] == p["K"] >= 512 for p in suite)  # squares
        assert any(any(p[k] % 16 for k in "MNK") for p in suite)  # not multiples of 16
    bf16 = [tuple(p.values()) for p in gemm.BF16_SUBSET]
    assert len(set(bf16)) == len(bf16)
    assert 8 <= sum(s in train for s in bf16) <= 12 and 4 <= sum(s in test for s in bf16) <= 6
    assert all(s in train | test for s in bf16)
