"""gemm_streamk: the persistent TMA GEMM that shares its last partial wave out along K.
Correctness under the interpreter (programs run one after another there, so every order in
which a tile's contributors finish is the launch order; the atomics and the count are what
the GPU runs), the rule that decides the split, the self-resetting workspace, validation,
the config space, and AOT compiles for sm_90 in a spawned worker."""

from __future__ import annotations

import pytest
import torch

from costtune.build.pool import get_pool
from costtune.hardware import H200
from costtune.kernels import gemm, gemm_tma, relative_error
from costtune.kernels import gemm_streamk as sk
from costtune.kernels.base import IMPLEMENTATIONS

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SMALL = {"M": 100, "N": 72, "K": 120}


def cfg(bm=64, bn=64, bk=64, sub=0, warps=4, stages=3) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "EPILOGUE_SUBTILE": sub,
            "num_warps": warps, "num_stages": stages}


def check(inputs: dict, out: torch.Tensor, dtype: str) -> None:
    assert out.dtype == inputs["a"].dtype
    assert tuple(out.shape) == (inputs["a"].shape[0], inputs["b"].shape[1])
    err = relative_error(out, sk.reference(inputs))
    assert err <= sk.TOLERANCE[dtype] / 4, err


def test_registered_in_the_gemm_family():
    assert "gemm_streamk" in IMPLEMENTATIONS["gemm"]
    assert (sk.NAME, sk.FAMILY) == ("gemm_streamk", "gemm")
    assert sk.TRAIN_SHAPES == gemm_tma.TRAIN_SHAPES and sk.TEST_SHAPES == gemm_tma.TEST_SHAPES


def test_split_work_shares_out_only_what_pays():
    big = cfg(bm=128, bn=256)
    # 160 tiles on 132 SMs: 28 shared out, 80 + 17 K iterations instead of 2 x 80.
    assert sk.split_work({"M": 1024, "N": 5120, "K": 5120}, big) == {
        "tiles": 160, "dp_tiles": 132, "sk_tiles": 28, "sk_programs": 132, "sk_iters": 17}
    # 512 tiles, remainder 116: 4 x 64 vs 3 x 64 + 57 iterations (x1.03) - all data-parallel.
    w = sk.split_work({"M": 4096, "N": 4096, "K": 4096}, big)
    assert (w["dp_tiles"], w["sk_tiles"], w["sk_iters"]) == (512, 0, 0)
    # 32 tiles, a long K: every tile shared out over all SMs (K split over the GPU).
    w = sk.split_work({"M": 256, "N": 512, "K": 32768}, cfg(bk=128))
    assert (w["dp_tiles"], w["sk_tiles"], w["sk_programs"], w["sk_iters"]) == (0, 32, 132, 63)
    # 128 tiles < 132 SMs: sharing out would save x1.03 (< 3), so one wave of whole tiles.
    w = sk.split_work({"M": 1024, "N": 1024, "K": 1024}, cfg(bn=128, bk=128))
    assert (w["dp_tiles"], w["sk_tiles"]) == (128, 0)
    # A short shared-out run takes at least MIN_SK_ITERS iterations: fewer programs.
    w = sk.split_work({"M": 64, "N": 64, "K": 1024}, cfg(), num_sms=8)
    assert (w["sk_tiles"], w["sk_programs"], w["sk_iters"]) == (1, 4, 4)


def test_grid_follows_the_split():
    assert sk.grid({"M": 1024, "N": 5120, "K": 5120}, cfg(bm=128, bn=256)) == (H200.num_sms,)
    assert sk.grid({"M": 1024, "N": 1024, "K": 1024}, cfg(bn=128, bk=128)) == (128,)
    assert sk.grid({"M": 64, "N": 64, "K": 1024}, cfg()) == (4,)


@pytest.mark.parametrize("dtype", sk.DTYPES)
@pytest.mark.parametrize("p,sub", [(SMALL, 0), (SMALL, 1), ({"M": 256, "N": 192, "K": 1000}, 0),
                                   ({"M": 64, "N": 128, "K": 2048}, 1)])
def test_matches_reference(dtype, p, sub):
    config = cfg(sub=sub, bn=128 if sub else 64)
    assert sk.config_space(p).is_valid(config)
    x = sk.make_inputs(p, dtype, seed=1, device=DEVICE)
    check(x, sk.launch(x, config), dtype)


def _shrunk_call(x: dict, config: dict, num_sms: int):
    """The launch with the persistent grid shrunk to ``num_sms`` programs (interpreter)."""
    problem = {"M": x["a"].shape[0], "N": x["b"].shape[1], "K": x["a"].shape[1]}
    (call,) = sk.kernel_calls(x, config)
    w = sk.split_work(problem, config, num_sms=num_sms)
    call.grid = (num_sms if w["dp_tiles"] else w["sk_programs"],)
    call.kwargs["NUM_SMS"] = num_sms
    call.args = (*call.args[:-2], w["dp_tiles"], w["sk_iters"])
    return call, w


@pytest.mark.skipif(DEVICE == "cuda", reason="shrinks the persistent grid (interpreter only)")
@pytest.mark.parametrize("sub", [0, 1])
def test_data_parallel_waves_then_shared_tiles_and_replays(sub):
    # 4 x 3 = 12 tiles on 5 programs: 10 data-parallel (2 waves), the last 2 shared out as
    # 20 K iterations, 4 a program: runs that end one tile and start the next, three
    # contributors to a tile. Replayed: the workspace and counters are left zeroed.
    x = sk.make_inputs({"M": 256, "N": 192, "K": 640}, "float16", seed=2)
    call, w = _shrunk_call(x, cfg(sub=sub, bn=64), 5)
    assert (w["dp_tiles"], w["sk_tiles"], w["sk_iters"]) == (10, 2, 4)
    work, count = call.args[3:5]
    for _ in range(2):
        out = call.args[2].base
        out.zero_()
        call.run()
        check(x, out, "float16")
        assert not work.any() and not count.any()


def test_workspace_is_kept_per_device_and_grown():
    dev = torch.device("cpu")
    sk._WORKSPACE.pop(("cpu", None), None)
    w1, c1 = sk.workspace(dev, 100, 3)
    assert w1.dtype == torch.float32 and c1.dtype == torch.int32
    assert sk.workspace(dev, 50, 2)[0] is w1  # reused, no new buffer
    w2, c2 = sk.workspace(dev, 200, 3)
    assert w2.numel() == 200 and w2 is not w1 and not w2.any() and not c2.any()
    assert sk.workspace(dev, 10, 1)[0] is w2


def test_kernel_calls_set_descriptors_and_split():
    x = sk.make_inputs(SMALL, "float16")
    (call,) = sk.kernel_calls(x, cfg(bm=128, bn=256, sub=1, warps=8))
    a_desc, b_desc, c_desc = call.args[:3]
    assert a_desc.block_shape == [128, 64] and b_desc.block_shape == [64, 256]
    assert c_desc.block_shape == [128, 128]
    assert call.args[5:] == (100, 72, 120, 1, 0)  # one tile, data-parallel
    assert call.kwargs["GROUP"] == 8 and call.kwargs["NUM_SMS"] == H200.num_sms


def test_implied_params_name_the_k_split_of_a_shared_out_problem():
    assert sk.implied_params(SMALL, cfg()) == {"SPLIT_K": 1, "GROUP_SIZE_M": 8}
    # 32 tiles, 256 K blocks, 63 a program: each tile in about 4 runs, like SPLIT_K=4.
    long_k = {"M": 256, "N": 512, "K": 32768}
    assert sk.implied_params(long_k, cfg(bk=128)) == {"SPLIT_K": 4, "GROUP_SIZE_M": 8}
    # Rows whose family parameters are already filled in (search replay) are read too.
    filled = {**cfg(bk=128), "SPLIT_K": 1.0, "GROUP_SIZE_M": 8.0}
    assert sk.implied_params(long_k, filled)["SPLIT_K"] == 4
    # A shared-out remainder after full waves: the bulk runs whole tiles.
    assert sk.implied_params({"M": 1024, "N": 5120, "K": 5120},
                             cfg(bm=128, bn=256))["SPLIT_K"] == 1
    from costtune.features.static import static_features
    row = {"kernel": "gemm", "implementation": "gemm_streamk", "dtype": "float16", **long_k,
           "config": "BLOCK_M=64,BLOCK_N=64,BLOCK_K=128,EPILOGUE_SUBTILE=0,num_warps=4,"
                     "num_stages=3"}
    f = static_features([row]).iloc[0]
    assert f["log2_SPLIT_K"] == 2 and f["num_programs"] == 128 and f["loop_trips"] == 64


@pytest.mark.parametrize("inputs,match", [
    (lambda: gemm.make_inputs({"M": 32, "N": 45, "K": 64}, "float16"), "^b row stride 45"),
    (lambda: {"a": torch.zeros(64, 32).half().t(), "b": torch.zeros(64, 64).half()},
     "^a must be row-major"),
    (lambda: {"a": torch.zeros(32, 64), "b": torch.zeros(64, 64)}, "^a has dtype"),
])
def test_unsupported_inputs_raise(inputs, match):
    with pytest.raises(ValueError, match=match):
        sk.launch(inputs(), cfg())


@pytest.mark.parametrize("config,match", [
    ({**cfg(), "WARP_SPECIALIZE": 0}, "unknown config parameter"),
    ({**cfg(), "SPLIT_K": 2}, "unknown config parameter"),
    ({k: v for k, v in cfg().items() if k != "EPILOGUE_SUBTILE"}, "missing"),
    (cfg(sub=2), "EPILOGUE_SUBTILE=2 must be 0 or 1"),
    (cfg(bn=48), "BLOCK_N=48"),
])
def test_bad_configs_raise(config, match):
    with pytest.raises(ValueError, match=match):
        sk.launch(sk.make_inputs(SMALL, "float16"), config)


def test_space_sizes_and_constraints():
    space = sk.config_space()
    assert [c.name for c in space.constraints] == [
        "shared_memory", "accumulator_registers", "warps_have_work", "pipeline_depth",
        "tall_tiles"]
    for c in space:
        d = c.as_dict()
        assert sk.tma_shared_bytes(d) + 1024 <= H200.max_shared_per_block
        assert d["num_stages"] * d["BLOCK_K"] >= 192
    assert {(c["BLOCK_M"], c["BLOCK_N"]) for c in space if c["BLOCK_M"] == 256} == {(256, 128)}
    sizes = [len(sk.config_space(p)) for p in sk.TEST_SHAPES + sk.TRAIN_SHAPES]
    assert 50 <= min(sizes) and max(sizes) == len(space) == 103


# The largest tiles the space keeps (both loops pipelined in the same buffers) and the
# 4-stage full-width 128 x 256 it drops for shared memory.
AOT_CASES = [
    (cfg(bm=128, bn=256, sub=1, warps=8, stages=4), "ok"),
    (cfg(bm=256, bn=128, sub=1, warps=8, stages=4), "ok"),
    (cfg(bm=128, bn=128, warps=4, stages=5), "ok"),
    (cfg(bm=128, bn=256, warps=8, stages=4), "out_of_resources"),
]


def _aot(cases: list[tuple[dict, str]]) -> list[dict]:
    from costtune.build.aot import compile_job, specialize
    from costtune.features.compiled import meta_inputs

    x = meta_inputs(sk, {"M": 1024, "N": 5120, "K": 5120}, "float16")
    return [compile_job(specialize(sk.kernel_calls(x, c)[0])) for c, _ in cases]


def test_aot_compiles_for_sm90_match_the_space():
    records = get_pool(1).submit(_aot, AOT_CASES).result()
    space = sk.config_space()
    for (config, status), rec in zip(AOT_CASES, records, strict=True):
        assert rec["status"] == status, (config, rec["error"][:200])
        assert space.is_valid(config) == (status == "ok"), config
        est = sk.tma_shared_bytes(config)
        assert est <= rec["shared_bytes"] <= est + 200, (config, rec["shared_bytes"])
        if status == "ok":
            assert rec["local_bytes"] == 0 and rec["ir_atomic"] == 2 and rec["ir_while"] == 1
            assert rec["ttgir_tma_load"] >= 4 * config["num_stages"] - 4  # both loops pipelined
