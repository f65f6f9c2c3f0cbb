"""gemm_tma_device: the persistent GEMM over TMA descriptors built in the kernel. Correctness
under the interpreter (which runs device-side descriptors in triton 3.6 and ignores warp
specialization), the allocator for the descriptor scratch, validation, the config space, and AOT
compiles for sm_90 in a spawned worker (status, shared memory, warp specialization in TTGIR)."""

from __future__ import annotations

import contextvars

import numpy as np
import pytest
import torch

from costtune.build.pool import get_pool
from costtune.hardware import H200
from costtune.kernels import gemm, gemm_tma, relative_error
from costtune.kernels import gemm_tma_device as gd
from costtune.kernels.base import IMPLEMENTATIONS
from costtune.types import Config

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# M off the tile (100 rows in 64-row tiles), K tail (120 = 64 + 56), N = 72 (8-aligned).
SMALL = {"M": 100, "N": 72, "K": 120}


def cfg(bm=64, bn=64, bk=64, ws=0, sub=0, fl=0, warps=4, stages=3) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "WARP_SPECIALIZE": ws,
            "EPILOGUE_SUBTILE": sub, "FLATTEN": fl, "num_warps": warps, "num_stages": stages}


def check(inputs: dict, out: torch.Tensor, dtype: str) -> None:
    assert out.dtype == inputs["a"].dtype
    assert tuple(out.shape) == (inputs["a"].shape[0], inputs["b"].shape[1])
    err = relative_error(out, gd.reference(inputs))
    assert err <= gd.TOLERANCE[dtype] / 4, err


def test_registered_in_the_gemm_family():
    assert "gemm_tma_device" in IMPLEMENTATIONS["gemm"]
    assert (gd.NAME, gd.FAMILY) == ("gemm_tma_device", "gemm")


@pytest.mark.parametrize("dtype", gd.DTYPES)
@pytest.mark.parametrize("ws,sub,fl", [(0, 0, 0), (0, 1, 1), (1, 0, 0), (1, 1, 0)])
def test_matches_reference(dtype, ws, sub, fl):
    space = gd.config_space(SMALL)
    config = cfg(ws=ws, sub=sub, fl=fl, bk=64 if ws else 128, bn=128 if sub else 64)
    assert space.is_valid(config), space.violated(config)
    x = gd.make_inputs(SMALL, dtype, seed=1, device=DEVICE)
    check(x, gd.launch(x, config), dtype)


@pytest.mark.skipif(DEVICE == "cuda", reason="shrinks the persistent grid (interpreter only)")
def test_persistent_loop_over_many_tiles():
    # 4 x 3 = 12 tiles on 5 programs, each storing where its own tile counter says.
    p = {"M": 256, "N": 192, "K": 64}
    x = gd.make_inputs(p, "float16", seed=2)
    for sub, fl in ((0, 1), (1, 0)):
        (call,) = gd.kernel_calls(x, cfg(sub=sub, fl=fl))
        assert call.grid == (12,)
        call.grid, call.kwargs["NUM_SMS"] = (5,), 5
        call.run()
        check(x, call.args[2], "float16")


def test_kernel_calls_pass_pointers_and_strides():
    x = gd.make_inputs(SMALL, "float16")
    (call,) = gd.kernel_calls(x, Config.from_dict(cfg(bm=128, bn=256, sub=1, fl=1, warps=8)))
    a, b, c = call.args[:3]
    assert a is x["a"] and b is x["b"] and tuple(c.shape) == (100, 72)
    assert call.args[3:] == (100, 72, 120, 120, 72, 72)
    assert call.grid == gd.grid(SMALL, cfg(bm=128, bn=256)) == (1,)
    assert call.kwargs["FLATTEN"] and call.kwargs["EPILOGUE_SUBTILE"]
    assert not call.kwargs["WARP_SPECIALIZE"] and call.kwargs["GROUP"] == 8
    assert call.kwargs["NUM_SMS"] == H200.num_sms and call.num_warps == 8
    assert gd.grid({"M": 8192, "N": 8192, "K": 64}, cfg(bm=128, bn=128)) == (H200.num_sms,)


def test_implied_params():
    assert gd.implied_params(SMALL, cfg()) == {"SPLIT_K": 1, "GROUP_SIZE_M": 8}
    assert gemm.implied_params(SMALL, {}) == {"GROUP_SIZE_M": 8}


def test_ensure_allocator_sets_one_only_if_none_is_set():
    from triton.runtime import _allocation

    def fresh():
        _allocation._allocator.set(_allocation._NULL_ALLOCATOR)
        gd.ensure_allocator()
        return _allocation._allocator.get()

    assert contextvars.copy_context().run(fresh) is gd._torch_allocator

    def own(size, alignment, stream):
        return torch.empty(size, dtype=torch.int8)

    def kept():
        _allocation._allocator.set(own)
        gd.ensure_allocator()
        return _allocation._allocator.get()

    assert contextvars.copy_context().run(kept) is own


@pytest.mark.parametrize("inputs,match", [
    (lambda: gemm.make_inputs({"M": 32, "N": 45, "K": 64}, "float16"), "^b row stride 45"),
    (lambda: gemm.make_inputs({"M": 32, "N": 64, "K": 70}, "float16"), "^a row stride 70"),
    (lambda: {"a": torch.zeros(64, 32).half().t(), "b": torch.zeros(64, 64).half()},
     "^a must be row-major"),
    (lambda: {"a": torch.zeros(32, 64), "b": torch.zeros(64, 64)}, "^a has dtype"),
])
def test_unsupported_inputs_raise(inputs, match):
    with pytest.raises(ValueError, match=match):
        gd.launch(inputs(), cfg())


@pytest.mark.parametrize("config,match", [
    ({**cfg(), "SPLIT_K": 1}, "unknown config parameter"),
    ({**cfg(), "GROUP_SIZE_M": 8}, "unknown config parameter"),
    ({k: v for k, v in cfg().items() if k != "FLATTEN"}, "missing"),
    (cfg(fl=2), "FLATTEN=2 must be 0 or 1"),
    (cfg(ws=True), "WARP_SPECIALIZE=True must be an int"),
    (cfg(bm=96), "BLOCK_M=96"),
    (cfg(bn=16, sub=1), "needs BLOCK_N >= 32"),
])
def test_bad_configs_raise(config, match):
    x = gd.make_inputs(SMALL, "float16")
    with pytest.raises(ValueError, match=match):
        gd.launch(x, config)


def test_suites_are_gemm_tmas():
    assert gd.TRAIN_SHAPES == gemm_tma.TRAIN_SHAPES and gd.TEST_SHAPES == gemm_tma.TEST_SHAPES
    assert gd.BF16_SUBSET == gemm_tma.BF16_SUBSET
    assert all(p["K"] % 8 == 0 and p["N"] % 8 == 0 for p in gd.TRAIN_SHAPES + gd.TEST_SHAPES)


def test_space_sizes_and_constraints():
    space = gd.config_space()
    assert [c.name for c in space.constraints] == [
        "shared_memory", "accumulator_registers", "warp_specialization_compiles",
        "warps_have_work", "pipeline_depth", "tall_tiles"]
    for c in space:
        d = c.as_dict()
        assert gd.tma_shared_bytes(d) + 1024 <= H200.max_shared_per_block
        if d["WARP_SPECIALIZE"]:
            assert d["num_warps"] == 4 and not d["FLATTEN"], d
    ws_tiles = {(c["BLOCK_M"], c["BLOCK_N"]) for c in space if c["WARP_SPECIALIZE"]}
    assert {(128, 128), (128, 256), (256, 128)} <= ws_tiles and (64, 256) not in ws_tiles
    # Compile failures and loops that would not specialize (see AOT_CASES).
    for bad in (cfg(bm=128, bn=128, ws=1, sub=1), cfg(bm=64, bn=256, ws=1),
                cfg(bm=128, bn=128, ws=1, warps=8), cfg(bm=128, bn=128, ws=1, fl=1)):
        assert space.violated(bad) == ["warp_specialization_compiles"], bad
    sizes = [len(gd.config_space(p)) for p in gd.TEST_SHAPES + gd.TRAIN_SHAPES]
    assert 50 <= min(sizes) and max(sizes) <= 250
    skinny = gd.config_space({"M": 16, "N": 4096, "K": 4096})
    assert all(c["BLOCK_M"] == 64 for c in skinny)


def test_shared_memory_floor_is_vectorised_and_below_the_estimate():
    configs = list(gd.config_space())
    table = {k: np.array([c.as_dict()[k] for c in configs]) for k in configs[0].as_dict()}
    floors = gd.shared_memory_floor({}, table, dtype="float16", aligned={})
    est = np.array([gd.tma_shared_bytes(c.as_dict()) for c in configs])
    assert floors.shape == est.shape and (floors > 0).all() and (floors <= est).all()


# Kept: the largest warp-specialized config of the main WS classes and the largest plain ones
# (64-row 8-warp subtiled flattened: the extra C buffer). Dropped: one stage over the shared
# memory limit, and the WS combinations NVGPUWarpSpecialization or the LLVM lowering refuse.
AOT_CASES = [
    (cfg(bm=128, bn=256, ws=1, stages=3), "ok"),
    (cfg(bm=256, bn=128, ws=1, stages=3), "ok"),
    (cfg(bm=128, bn=128, ws=1, stages=5), "ok"),
    (cfg(bm=64, bn=128, ws=1, sub=1, stages=5), "ok"),
    (cfg(bm=128, bn=256, sub=1, warps=8, stages=4), "ok"),
    (cfg(bm=256, bn=128, sub=1, fl=1, warps=8, stages=4), "ok"),
    (cfg(bm=64, bn=128, bk=128, sub=1, fl=1, warps=8, stages=4), "ok"),
    (cfg(bm=128, bn=256, ws=1, stages=4), "out_of_resources"),
    (cfg(bm=128, bn=128, ws=1, sub=1, stages=3), "compile_error"),
    (cfg(bm=64, bn=256, ws=1, stages=3), "compile_error"),
]


def _aot(cases: list[tuple[dict, str]]) -> list[dict]:
    import triton
    from triton.compiler import ASTSource

    from costtune.build.aot import _binder, compile_job, jit_function, specialize
    from costtune.features.compiled import meta_inputs

    x = meta_inputs(gd, {"M": 4096, "N": 4096, "K": 4096}, "float16")
    out = []
    for config, _ in cases:
        job = specialize(gd.kernel_calls(x, config)[0])
        rec = compile_job(job, sass=False)
        if rec["status"] == "ok" and config["WARP_SPECIALIZE"]:
            target, backend, _ = _binder(jit_function(job.resolve_fn()), 90)
            opts = backend.parse_options(dict(job.options)).__dict__
            src = ASTSource(jit_function(job.resolve_fn()), job.signature, job.constexprs,
                            job.attrs)
            ttgir = triton.compile(src, target=target, options=opts).asm["ttgir"]
            rec["specialized"] = "ttg.warp_specialize" in ttgir
        out.append(rec)
    return out


def test_aot_compiles_for_sm90_match_the_space():
    records = get_pool(1).submit(_aot, AOT_CASES).result()
    space = gd.config_space()
    for (config, status), rec in zip(AOT_CASES, records, strict=True):
        assert rec["status"] == status, (config, rec["error"][:200])
        assert space.is_valid(config) == (status == "ok"), config
        if "shared_bytes" in rec:
            est = gd.tma_shared_bytes(config)
            assert est <= rec["shared_bytes"] <= est + 1024, (config, rec["shared_bytes"])
            floor = gd.shared_memory_floor({}, config, dtype="float16", aligned={})
            assert floor <= rec["shared_bytes"]
        if status == "ok":
            assert rec["shared_bytes"] <= H200.max_shared_per_block and rec["local_bytes"] == 0
            assert rec.get("specialized", True), config
