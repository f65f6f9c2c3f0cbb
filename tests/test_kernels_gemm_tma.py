"""gemm_tma: the persistent TMA GEMM. Correctness under the interpreter (which runs host
TensorDescriptor kernels in triton 3.6 and ignores warp specialization), the TMA alignment
checks, suite filtering, the config space, and AOT compiles for sm_90 in a spawned worker."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from costtune.build.pool import get_pool
from costtune.hardware import H200
from costtune.kernels import gemm, gemm_tma, relative_error
from costtune.types import Config

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# M off the tile (100 rows in 64-row tiles), K tail (120 = 64 + 56), N = 72 (8-aligned).
SMALL = {"M": 100, "N": 72, "K": 120}


def cfg(bm=64, bn=64, bk=64, ws=0, sub=0, warps=4, stages=3) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "WARP_SPECIALIZE": ws,
            "EPILOGUE_SUBTILE": sub, "num_warps": warps, "num_stages": stages}


def check(inputs: dict, out: torch.Tensor, dtype: str) -> None:
    assert out.dtype == inputs["a"].dtype
    assert tuple(out.shape) == (inputs["a"].shape[0], inputs["b"].shape[1])
    err = relative_error(out, gemm_tma.reference(inputs))
    assert err <= gemm_tma.TOLERANCE[dtype] / 4, err


@pytest.mark.parametrize("dtype", gemm_tma.DTYPES)
@pytest.mark.parametrize("ws,sub", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_matches_reference(dtype, ws, sub):
    space = gemm_tma.config_space(SMALL)
    config = cfg(ws=ws, sub=sub, bk=64 if ws else 128, bn=128 if sub else 64)
    assert space.is_valid(config), space.violated(config)
    x = gemm_tma.make_inputs(SMALL, dtype, seed=1, device=DEVICE)
    check(x, gemm_tma.launch(x, config), dtype)


@pytest.mark.skipif(DEVICE == "cuda", reason="shrinks the persistent grid (interpreter only)")
def test_persistent_loop_over_many_tiles():
    # 4 x 3 = 12 tiles on 5 programs: each loops over 2 or 3 tiles and stores each one where
    # its own counter says, in grouped order (4 tile rows < GROUP_SIZE_M).
    p = {"M": 256, "N": 192, "K": 64}
    x = gemm_tma.make_inputs(p, "float16", seed=2)
    for sub in (0, 1):
        (call,) = gemm_tma.kernel_calls(x, cfg(sub=sub))
        assert call.grid == (12,)
        call.grid, call.kwargs["NUM_SMS"] = (5,), 5
        call.run()
        check(x, call.args[2].base, "float16")


def test_kernel_calls_set_descriptors_from_the_config():
    x = gemm_tma.make_inputs(SMALL, "float16")
    (call,) = gemm_tma.kernel_calls(
        x, Config.from_dict(cfg(bm=128, bn=256, bk=64, sub=1, warps=8)))
    a_desc, b_desc, c_desc = call.args[:3]
    assert a_desc.block_shape == [128, 64] and b_desc.block_shape == [64, 256]
    assert c_desc.block_shape == [128, 128]  # subtiled: half of BLOCK_N
    assert a_desc.base is x["a"] and b_desc.base is x["b"]
    assert call.grid == gemm_tma.grid(SMALL, cfg(bm=128, bn=256)) == (1,)
    assert call.kwargs["FLATTEN"] and not call.kwargs["WARP_SPECIALIZE"]
    assert call.kwargs["GROUP"] == gemm_tma.GROUP_SIZE_M == 8
    assert call.kwargs["NUM_SMS"] == H200.num_sms and call.num_warps == 8
    (ws_call,) = gemm_tma.kernel_calls(x, cfg(ws=1))
    assert ws_call.kwargs["WARP_SPECIALIZE"] and not ws_call.kwargs["FLATTEN"]
    big = {"M": 8192, "N": 8192, "K": 64}
    assert gemm_tma.grid(big, cfg(bm=128, bn=128)) == (H200.num_sms,)


def test_implied_params():
    assert gemm_tma.implied_params(SMALL, cfg()) == {"SPLIT_K": 1, "GROUP_SIZE_M": 8}


@pytest.mark.parametrize("inputs,match", [
    (lambda: gemm.make_inputs({"M": 32, "N": 45, "K": 64}, "float16"), "^b row stride 45"),
    (lambda: {"a": torch.zeros(32, 64).half(), "b": torch.zeros(64, 128).half()[:, :45]},
     "^N=45 gives C rows"),
    (lambda: gemm.make_inputs({"M": 32, "N": 64, "K": 70}, "float16"), "^a row stride 70"),
    (lambda: {"a": torch.zeros(64, 32).half().t(), "b": torch.zeros(64, 64).half()},
     "^a must be row-major"),
    (lambda: {"a": torch.zeros(32, 64).half(), "b": torch.zeros(64, 128).half()[:, ::2]},
     "^b must be row-major"),
    (lambda: {"a": torch.zeros(32 * 64 + 1).half()[1:].view(32, 64),
              "b": torch.zeros(64, 64).half()}, "^a data pointer"),
    (lambda: {"a": torch.zeros(32, 64), "b": torch.zeros(64, 64)}, "^a has dtype"),
])
def test_unsupported_inputs_raise(inputs, match):
    with pytest.raises(ValueError, match=match):
        gemm_tma.launch(inputs(), cfg())


@pytest.mark.parametrize("config,match", [
    ({**cfg(), "SPLIT_K": 1}, "unknown config parameter"),
    ({**cfg(), "GROUP_SIZE_M": 4}, "unknown config parameter"),
    ({k: v for k, v in cfg().items() if k != "EPILOGUE_SUBTILE"}, "missing"),
    (cfg(ws=2), "WARP_SPECIALIZE=2 must be 0 or 1"),
    (cfg(sub=True), "EPILOGUE_SUBTILE=True must be an int"),
    (cfg(bn=48), "BLOCK_N=48"),
    (cfg(bn=16, sub=1), "needs BLOCK_N >= 32"),
])
def test_bad_configs_raise(config, match):
    x = gemm_tma.make_inputs(SMALL, "float16")
    with pytest.raises(ValueError, match=match):
        gemm_tma.launch(x, config)


def test_suites_drop_exactly_the_unaligned_shapes():
    for mine, family in ((gemm_tma.TRAIN_SHAPES, gemm.TRAIN_SHAPES),
                         (gemm_tma.TEST_SHAPES, gemm.TEST_SHAPES),
                         (gemm_tma.BF16_SUBSET, gemm.BF16_SUBSET)):
        assert mine == [p for p in family if p["K"] % 8 == 0 and p["N"] % 8 == 0]
    assert (len(gemm_tma.TRAIN_SHAPES), len(gemm_tma.TEST_SHAPES)) == (42, 20)
    assert {"M": 4099, "N": 1001, "K": 2049} not in gemm_tma.TEST_SHAPES


def test_space_sizes_and_constraints():
    space = gemm_tma.config_space()
    assert [c.name for c in space.constraints] == [
        "shared_memory", "accumulator_registers", "warp_specialization_compiles",
        "warps_have_work"]
    for c in space:
        d = c.as_dict()
        assert gemm_tma.tma_shared_bytes(d) + 1024 <= H200.max_shared_per_block
        if d["WARP_SPECIALIZE"]:
            assert d["num_warps"] == 4 and d["BLOCK_M"] == 64 and d["BLOCK_N"] <= 128
    assert space.violated(cfg(bm=128, bn=128, ws=1, warps=4)) == [
        "warp_specialization_compiles"]
    sizes = [len(gemm_tma.config_space(p)) for p in gemm_tma.TEST_SHAPES + gemm_tma.TRAIN_SHAPES]
    assert 50 <= min(sizes) and max(sizes) <= 250
    skinny = gemm_tma.config_space({"M": 16, "N": 4096, "K": 4096})
    assert all(c["BLOCK_M"] == 64 for c in skinny)


def test_shared_memory_floor_is_vectorised_and_below_the_estimate():
    configs = list(gemm_tma.config_space())
    table = {k: np.array([c.as_dict()[k] for c in configs]) for k in configs[0].as_dict()}
    floors = gemm_tma.shared_memory_floor({}, table, dtype="float16", aligned={})
    est = np.array([gemm_tma.tma_shared_bytes(c.as_dict()) for c in configs])
    assert floors.shape == est.shape and (floors > 0).all() and (floors <= est).all()
    one = cfg(bm=128, bn=256, bk=64, warps=8, stages=4)
    assert gemm_tma.shared_memory_floor({}, one, dtype="float16", aligned={}) == (
        4 * (128 + 256) * 64 * 2 + 128 * 256 * 2)


# The largest configs the space keeps, the smallest it drops for shared memory, and a
# warp-specialized one: compiled shared memory, registers and whether the loop was specialized.
AOT_CASES = [
    (cfg(bm=128, bn=256, bk=64, sub=1, warps=8, stages=4), "ok"),
    (cfg(bm=128, bn=256, bk=64, warps=8, stages=3), "ok"),
    (cfg(bm=128, bn=128, bk=128, warps=8, stages=3), "ok"),
    (cfg(bm=64, bn=128, bk=128, ws=1, warps=4, stages=4), "ok"),
    (cfg(bm=64, bn=256, bk=64, warps=8, stages=5), "out_of_resources"),
    (cfg(bm=64, bn=128, bk=128, ws=1, sub=1, warps=4, stages=5), "out_of_resources"),
    (cfg(bm=128, bn=128, bk=64, ws=1, warps=4, stages=3), "compile_error"),
]


def _aot(cases: list[tuple[dict, str]]) -> list[dict]:
    import re

    import triton
    from triton.compiler import ASTSource

    from costtune.build.aot import _binder, compile_job, jit_function, specialize
    from costtune.features.compiled import meta_inputs

    x = meta_inputs(gemm_tma, {"M": 4096, "N": 4096, "K": 4096}, "float16")
    out = []
    for config, _ in cases:
        job = specialize(gemm_tma.kernel_calls(x, config)[0])
        rec = compile_job(job)
        if rec["status"] == "ok" and config["WARP_SPECIALIZE"]:
            target, backend, _ = _binder(jit_function(job.resolve_fn()), 90)
            opts = backend.parse_options(dict(job.options)).__dict__
            src = ASTSource(jit_function(job.resolve_fn()), job.signature, job.constexprs,
                            job.attrs)
            ttgir = triton.compile(src, target=target, options=opts).asm["ttgir"]
            rec["specialized"] = bool(re.search(r"ttg\.warp_specialize", ttgir))
        out.append(rec)
    return out


def test_aot_compiles_for_sm90_match_the_space():
    records = get_pool(1).submit(_aot, AOT_CASES).result()
    space = gemm_tma.config_space()
    for (config, status), rec in zip(AOT_CASES, records, strict=True):
        assert rec["status"] == status, (config, rec["error"][:200])
        assert space.is_valid(config) == (status == "ok"), config
        if "shared_bytes" in rec:
            est = gemm_tma.tma_shared_bytes(config)
            assert est <= rec["shared_bytes"] <= est + 200, (config, rec["shared_bytes"])
            floor = gemm_tma.shared_memory_floor({}, config, dtype="float16", aligned={})
            assert floor <= rec["shared_bytes"]
        if status == "ok":
            assert rec["shared_bytes"] <= H200.max_shared_per_block and rec["local_bytes"] == 0
            assert rec.get("specialized", True), config
