"""gemm_splitk: split-K over TMA loads with an fp32 workspace and a reduction launch.
Correctness under the interpreter (K tails, rows past M, splits left without K tiles),
its launches and workspace, validation, the config space, and AOT compiles for sm_90 in a
spawned worker (compiled shared memory against the space's estimate)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from costtune.build.pool import get_pool
from costtune.hardware import H200
from costtune.kernels import gemm_splitk as gs
from costtune.kernels import gemm_tma, relative_error
from costtune.kernels.base import IMPLEMENTATIONS, poisoned_scratch
from costtune.kernels.check import check_family

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# M off the tile (100 rows in 64-row tiles), a K tail (520 = 16 x 32 + 8), N = 72 (8-aligned).
SMALL = {"M": 100, "N": 72, "K": 520}


def cfg(bm=64, bn=64, bk=32, sk=1, warps=4, stages=2) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sk, "num_warps": warps,
            "num_stages": stages}


def test_registered_in_the_gemm_family():
    assert "gemm_splitk" in IMPLEMENTATIONS["gemm"]
    assert (gs.NAME, gs.FAMILY) == ("gemm_splitk", "gemm")


@pytest.mark.parametrize("dtype", gs.DTYPES)
@pytest.mark.parametrize("split", [1, 2, 3, 8])
def test_matches_reference(dtype, split):
    x = gs.make_inputs(SMALL, dtype, seed=1, device=DEVICE)
    with poisoned_scratch():  # every split must write its slice of the workspace
        out = gs.launch(x, cfg(sk=split))
    assert out.dtype == x["a"].dtype and tuple(out.shape) == (100, 72)
    assert relative_error(out, gs.reference(x)) <= gs.TOLERANCE[dtype] / 4


def test_splits_without_k_tiles_add_nothing():
    # K = 40 is two 32-wide K tiles: of 8 splits, six own none and store zero tiles.
    p = {"M": 16, "N": 8, "K": 40}
    x = gs.make_inputs(p, "float16", seed=3, device=DEVICE)
    with poisoned_scratch():  # the empty splits must still store (zero) tiles
        one, eight = gs.launch(x, cfg(sk=1)), gs.launch(x, cfg(sk=8))
    assert relative_error(eight, gs.reference(x)) <= gs.TOLERANCE["float16"] / 4
    assert torch.allclose(one.float(), eight.float(), atol=1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="the interpreter runs programs one by one")
def test_result_does_not_depend_on_launch_order():
    # No atomics: the reduction adds the splits in order, so repeated launches agree bit for
    # bit however the GPU schedules the splits.
    x = gs.make_inputs(SMALL, "float16", seed=2, device=DEVICE)
    assert torch.equal(gs.launch(x, cfg(sk=4)), gs.launch(x, cfg(sk=4)))


def test_check_fails_if_the_partial_launch_writes_nothing(monkeypatch):
    x = gs.make_inputs(SMALL, "float16", seed=1)
    with poisoned_scratch():  # as the runner's check launches: the workspace starts as NaN
        assert relative_error(gs.launch(x, cfg(sk=4)), gs.reference(x)) <= 5e-3
        partial, total = gs.kernel_calls(x, cfg(sk=4))
        total.run()  # the reduction alone reads an unwritten workspace
    assert relative_error(partial.args[2].base, gs.reference(x)) == float("inf")
    # `costtune kernels --check` runs split configs and catches such a launch.

    def reduction_only(inputs, config):
        calls = gs.kernel_calls(inputs, config)
        for call in calls[-1:] if len(calls) > 1 else calls:
            call.run()
        return calls[0].args[2].base

    monkeypatch.setattr(gs, "launch", reduction_only)
    errors = check_family("gemm_splitk", n_configs=12)
    assert errors and all("SPLIT_K=1," not in e and "rel err inf" in e for e in errors)


def test_kernel_calls_and_workspace():
    x = gs.make_inputs(SMALL, "float16")
    (only,) = gs.kernel_calls(x, cfg(bm=64, bn=64, bk=64, sk=1))
    assert only.grid == (2 * 2, 1) and only.kwargs["SPLIT_K"] == 1
    a_desc, b_desc, c_desc, w_desc = only.args[:4]
    assert (a_desc.block_shape, b_desc.block_shape, c_desc.block_shape) == (
        [64, 64], [64, 64], [64, 64])
    assert w_desc is c_desc
    partial, total = gs.kernel_calls(x, cfg(bm=64, bn=64, bk=64, sk=4))
    work = partial.args[3]
    assert partial.grid == (4, 4) and work.block_shape == [1, 64, 64]
    assert tuple(work.base.shape) == (4, 100, 72) and work.base.dtype == torch.float32
    assert total.args[0] is work.base and total.args[1] is partial.args[2].base
    assert total.grid == (-(-100 * 72 // gs.SUM_BLOCK),) and total.kwargs["SPLIT_K"] == 4
    assert gs.grid(SMALL, cfg(sk=4)) == (4, 4)
    assert gs.implied_params(SMALL, cfg()) == {"GROUP_SIZE_M": 8}


@pytest.mark.parametrize("inputs,match", [
    (lambda: {"a": torch.ones(8, 16, dtype=torch.float16),
              "b": torch.ones(16, 12, dtype=torch.float16)}, "b row stride 12"),
    (lambda: {"a": torch.ones(16, 8, dtype=torch.float16).t(),
              "b": torch.ones(16, 8, dtype=torch.float16)}, "row-major.*gemm_splitk moves it"),
    (lambda: {"a": torch.ones(8, 16, dtype=torch.float16)}, "missing"),
])
def test_unsupported_inputs_raise(inputs, match):
    with pytest.raises(ValueError, match=match):
        gs.launch(inputs(), cfg())


@pytest.mark.parametrize("config,match", [
    (cfg(sk=0), "SPLIT_K=0 must be >= 1"),
    (cfg(bn=48), "BLOCK_N=48"),
    ({**cfg(), "SPLIT_K": True}, "SPLIT_K=True must be an int"),
    ({**cfg(), "GROUP_M": 8}, "unknown config parameter"),
    ({k: v for k, v in cfg().items() if k != "SPLIT_K"}, "missing"),
])
def test_bad_configs_raise(config, match):
    x = gs.make_inputs(SMALL, "float16")
    with pytest.raises(ValueError, match=match):
        gs.launch(x, config)


def test_suites_are_the_tma_gemms():
    assert gs.TRAIN_SHAPES == gemm_tma.TRAIN_SHAPES and gs.TEST_SHAPES == gemm_tma.TEST_SHAPES
    assert gs.BF16_SUBSET == gemm_tma.BF16_SUBSET


def test_space_sizes_and_constraints():
    space = gs.config_space()
    assert [c.name for c in space.constraints] == [
        "shared_memory", "accumulator_registers", "warps_have_work"]
    for c in space:
        assert gs.splitk_shared_bytes(c.as_dict()) + 1024 <= H200.max_shared_per_block
    sizes = [len(gs.config_space(p)) for p in gs.TEST_SHAPES + gs.TRAIN_SHAPES]
    assert 50 <= min(sizes) and max(sizes) <= 450
    # K-heavy, few tiles: every split that keeps >= 4 K tiles and <= 4 waves, not only the
    # largest (the original kernel's space keeps one split per tile shape).
    heavy = gs.config_space({"M": 768, "N": 768, "K": 24576})
    assert {c["SPLIT_K"] for c in heavy} == {1, 2, 4, 8, 16}
    mid = gs.config_space({"M": 2048, "N": 2048, "K": 8192})

    def splits(bm, bn):
        return {c["SPLIT_K"] for c in mid if (c["BLOCK_M"], c["BLOCK_N"]) == (bm, bn)}

    assert splits(128, 256) == {1, 2, 4}  # 128 tiles: 8 splits are 1,024 programs > 4 x 132
    assert splits(64, 64) == {1}  # 1,024 tiles: no split fits
    # Many tiles, short K: no split fits.
    assert {c["SPLIT_K"] for c in gs.config_space({"M": 4096, "N": 4096, "K": 512})} == {1}


def test_shared_memory_floor_is_vectorised_and_the_estimate():
    configs = list(gs.config_space())
    table = {k: np.array([c.as_dict()[k] for c in configs]) for k in configs[0].as_dict()}
    floors = gs.shared_memory_floor({}, table, dtype="float16", aligned={})
    est = np.array([gs.splitk_shared_bytes(c.as_dict()) for c in configs])
    assert floors.shape == est.shape and (floors > 0).all() and (floors <= est).all()
    # An fp32 staging tile larger than the loads: the floor is the tile.
    assert gs.shared_memory_floor({}, cfg(bm=128, bn=256, bk=32, sk=2, warps=8, stages=2),
                                  dtype="float16", aligned={}) == 128 * 256 * 4


# The largest configs the space keeps (loads or the fp32 staging tile the larger), and two
# it drops for shared memory.
AOT_CASES = [
    (cfg(bm=128, bn=256, bk=64, sk=1, warps=8, stages=3), "ok"),
    (cfg(bm=128, bn=256, bk=64, sk=2, warps=8, stages=4), "ok"),
    (cfg(bm=128, bn=256, bk=32, sk=4, warps=8, stages=2), "ok"),
    (cfg(bm=128, bn=128, bk=128, sk=4, warps=8, stages=3), "ok"),
    (cfg(bm=64, bn=64, bk=128, sk=16, warps=4, stages=4), "ok"),
    (cfg(bm=128, bn=256, bk=128, sk=1, warps=8, stages=3), "out_of_resources"),
    (cfg(bm=128, bn=128, bk=128, sk=2, warps=8, stages=4), "out_of_resources"),
]


def _aot(cases: list[tuple[dict, str]]) -> list[list[dict]]:
    from costtune.build.aot import compile_job, specialize
    from costtune.features.compiled import meta_inputs

    x = meta_inputs(gs, {"M": 768, "N": 768, "K": 24576}, "float16")
    return [[compile_job(specialize(call)) for call in gs.kernel_calls(x, config)]
            for config, _ in cases]


def test_aot_compiles_for_sm90_match_the_space():
    records = get_pool(1).submit(_aot, AOT_CASES).result()
    space = gs.config_space()
    for (config, status), recs in zip(AOT_CASES, records, strict=True):
        rec = recs[0]
        assert rec["status"] == status, (config, rec["error"][:200])
        assert space.is_valid(config) == (status == "ok"), config
        assert len(recs) == (2 if config["SPLIT_K"] > 1 else 1)
        est = gs.splitk_shared_bytes(config)
        assert est <= rec["shared_bytes"] <= est + 64, (config, rec["shared_bytes"])
        assert gs.shared_memory_floor({}, config, dtype="float16", aligned={}) <= est
        if status == "ok":
            assert rec["local_bytes"] == 0
        if len(recs) == 2:
            assert recs[1]["status"] == "ok" and recs[1]["local_bytes"] == 0
