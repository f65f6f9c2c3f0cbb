"""IR features: the TTIR/TTGIR parser on real sm_90 compiles, the IR-only path against the full
compile, the cache, the feature sets and bad input.

The CPU test setup runs Triton's interpreter (conftest sets TRITON_INTERPRET=1); IR features
then specialize and compile in spawned workers without it, as these tests do.
"""

from __future__ import annotations

import pandas as pd
import pytest

from costtune.build.ir import IR_FEATURES, ir_counts, parse_ops, ttgir_counts, ttir_counts
from costtune.build.pool import get_pool
from costtune.features import compiled_features, ir_features
from costtune.model.features import IR_OK, attach_features, feature_names

GEMM = "BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,SPLIT_K=1,num_warps=4,num_stages=3"
SPLIT = "BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,SPLIT_K=2,num_warps=4,num_stages=2"
SOFTMAX = "BLOCK_N=1024,ROWS_PER_PROG=1,num_warps=8,num_stages=2"
SQ = {"M": 1024, "N": 1024, "K": 1024}


def _rows(entries: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame([{"kernel": k, "workload": f"{k}_{i}", "dtype": d, **p, "config": c}
                         for i, (k, p, d, c) in enumerate(entries)])


def _texts_and_records(cases: list[tuple]) -> list[tuple[dict, dict, dict]]:
    """In a JIT process, per case: the main launch's IR text, its IR-only record and its full
    compile record."""
    from costtune.build.aot import compile_ir, compile_job, ir_texts
    from costtune.features import launch_jobs

    out = []
    for kernel, problem, dtype, key in cases:
        jobs, main = launch_jobs(kernel, problem, dtype, key)
        job = jobs[main]
        out.append((ir_texts(job), compile_ir(job), compile_job(job, sass=False)))
    return out


@pytest.fixture(scope="module")
def compiled_cases():
    cases = [("softmax", {"rows": 100, "cols": 5000}, "float32", SOFTMAX),
             ("gemm", SQ, "float16", GEMM), ("gemm", SQ, "float16", SPLIT)]
    pool = get_pool(1)
    return dict(zip(("softmax", "gemm", "split"), pool.submit(_texts_and_records, cases).result(),
                    strict=True))


def test_parser_on_real_ttgir(compiled_cases):
    texts, rec, _ = compiled_cases["softmax"]
    ops, num_warps = parse_ops(texts["ttgir"])
    assert num_warps == 8 and ops[0][0] == "tt.func"
    c = ir_counts(texts["ttir"], texts["ttgir"])
    assert list(c) == IR_FEATURES and c == {k: rec[k] for k in IR_FEATURES}
    # The family kernel: an online max/sum pass over column chunks, then a normalize pass.
    assert c["ir_for"] == 2 and c["ir_for_depth"] == 1 and c["ir_reduce"] == 2
    assert c["ir_exp"] >= 2 and c["ir_dot"] == 0 and c["ttgir_wgmma"] == 0
    assert c["ir_load_masked"] == c["ir_load"] == 2 and c["ir_store_in_loop"] == 1
    assert c["ttgir_num_warps"] == 8 and c["ir_atomic"] == 0
    # num_stages=2 pipelines the chunk loads through shared memory with cp.async.
    assert c["ttgir_async_copy"] > 0 and c["ttgir_local_alloc"] > 0


def test_gemm_counts(compiled_cases):
    _, gemm, _ = compiled_cases["gemm"]
    assert gemm["status"] == "ok" and gemm["ir_dot"] == 1 and gemm["ir_for"] == 1
    assert gemm["ir_dot_in_loop"] == 1 and gemm["ir_store_in_loop"] == 0
    assert gemm["ttgir_wgmma"] >= 1 and gemm["ir_atomic"] == 0
    # Three stages of the 128x64 A and 64x128 B fp16 tiles.
    assert gemm["ttgir_local_alloc_bytes"] == 3 * (128 * 64 + 64 * 128) * 2
    _, split, _ = compiled_cases["split"]
    assert split["ir_atomic"] >= 1 and split["ttgir_atomic"] >= 1 and split["ir_store"] == 0


def test_ir_only_equals_full_compile(compiled_cases):
    for name, (_, ir_rec, full) in compiled_cases.items():
        assert full["status"] == "ok", name
        assert {k: ir_rec[k] for k in IR_FEATURES} == {k: full[k] for k in IR_FEATURES}, name
        # Stopping before LLVM/PTX/ptxas is the point: the IR-only record has no PTX counts.
        assert "n_regs" in full and "n_regs" not in ir_rec


def test_synthetic_structure():
    text = """module attributes {"ttg.num-warps" = 4 : i32} {
  tt.func public @k(%d: !tt.tensordesc<tensor<64x64xf16>>, %p: !tt.ptr<f32>) {
    scf.for %t = %c0 to %n step %c1  : i32 {
      scf.for %k = %c0 to %m step %c1  : i32 {
        %a = tt.descriptor_load %d[%t, %k] : !tt.tensordesc<tensor<64x64xf16>> -> tensor<64x64xf16>
        %x = tt.load %p : tensor<64x!tt.ptr<f32>>
      } {tt.num_stages = 3 : i32}
      tt.store %p, %x : tensor<64x!tt.ptr<f32>>
    } {tt.flatten, tt.warp_specialize}
    %r = "tt.reduce"(%x) <{axis = 0 : i32}> ({
    ^bb0(%u: f32, %v: f32):
      %s = arith.addf %u, %v : f32
      tt.reduce.return %s : f32
    }) : (tensor<64xf32>) -> f32
    ttg.warp_specialize(%p) attributes {requestedRegisters = array<i32: 24>}
    default {
      ttg.warp_yield
    }
    partition0(%q: !tt.ptr<f32>) num_warps(1) {
      ttg.warp_return
    }
    partition1(%q: !tt.ptr<f32>) num_warps(2) {
      ttg.warp_return
    } : (!tt.ptr<f32>) -> ()
    tt.return
  }
}"""
    c = ttir_counts(text)
    assert c["ir_for"] == 2 and c["ir_for_depth"] == 2 and c["ir_desc_args"] == 1
    assert c["ir_desc_load"] == 1 and c["ir_load"] == 1 and c["ir_load_masked"] == 0
    assert c["ir_load_in_loop"] == 2 and c["ir_store_in_loop"] == 1
    assert c["ir_store_masked"] == 0 and c["ir_reduce"] == 1 and c["ir_float_ops"] == 1
    assert c["ir_ws_loops"] == 1 and c["ir_flatten_loops"] == 1
    g = ttgir_counts(text)
    assert g["ttgir_warp_specialize"] == 1 and g["ttgir_ws_partitions"] == 2
    assert g["ttgir_num_warps"] == 4 and g["ttgir_for_depth"] == 2


def test_ir_features_cache_and_full_record_reuse(tmp_path):
    df = _rows([("gemm", SQ, "float16", GEMM),
                # Same specialization (sizes divisible by 16, none equal to 1): one IR compile.
                ("gemm", {"M": 2048, "N": 2048, "K": 2048}, "float16", GEMM),
                ("gemm", SQ, "float16", SPLIT),
                ("softmax", {"rows": 100, "cols": 5000}, "float32",
                 "BLOCK_N=1024,ROWS_PER_PROG=3,num_warps=4,num_stages=2")])  # not a power of 2
    first = ir_features(df, workers=1, cache_dir=tmp_path / "ir")
    assert list(first.columns) == ["workload", "config", "ir_status", "ir_error", "ir_s",
                                   "ir_key", *IR_FEATURES]
    gemm, gemm2, split, bad = (r for _, r in first.iterrows())
    assert gemm["ir_status"] == "ok" and gemm["ir_key"] == gemm2["ir_key"] and gemm["ir_s"] > 0
    assert split["ir_atomic"] >= 1 and gemm["ir_atomic"] == 0
    assert bad["ir_status"] == "compile_error" and "power of two" in bad["ir_error"]
    assert pd.isna(bad["ir_dot"])
    assert sorted(p.name[-8:] for p in (tmp_path / "ir").rglob("*.json")) == [".ir.json"] * 2
    # Cached records come back verbatim, IR seconds included; a recompile would differ.
    pd.testing.assert_frame_equal(first, ir_features(df, workers=1, cache_dir=tmp_path / "ir"))

    # A cache holding full compile records answers IR requests without an IR compile.
    full = tmp_path / "full"
    comp = compiled_features(df.iloc[:3], workers=1, cache_dir=full, sass=False)
    assert (comp["compile_status"] == "ok").all()
    again = ir_features(df.iloc[:3], workers=1, cache_dir=full)
    assert not list(full.rglob("*.ir.json")) and again["ir_s"].isna().all()
    pd.testing.assert_frame_equal(again[IR_FEATURES], first.iloc[:3][IR_FEATURES],
                                  check_dtype=False)


def test_feature_sets():
    static, comp = feature_names("static"), feature_names("static+compiled")
    assert not set(IR_FEATURES) & set(comp)  # the shipped models' sets are unchanged
    assert feature_names("static+ir") == [*static, *IR_FEATURES, IR_OK]
    both = feature_names("static+ir+compiled")
    assert both == [*static, *IR_FEATURES, IR_OK, *comp[len(static):]]
    rows = _rows([("softmax", {"rows": 8, "cols": 100}, "float16",
                   "BLOCK_N=128,ROWS_PER_PROG=1,num_warps=4,num_stages=1")] * 2)
    rows["BLOCK_N"], rows["ROWS_PER_PROG"], rows["num_warps"], rows["num_stages"] = 128, 1, 4, 1
    table = pd.DataFrame([{"workload": rows["workload"][1], "config": rows["config"][1],
                           "ir_status": "ok", **dict.fromkeys(IR_FEATURES, 3)}])
    out = attach_features(rows, features="static+ir", ir=table)
    assert out[IR_OK].tolist()[1] == 1.0 and out["ir_dot"].tolist()[1] == 3
    assert out[["ir_dot", IR_OK]].iloc[0].isna().all()  # no IR row: missing, not zero
    with pytest.raises(ValueError, match="IR feature table lacks column"):
        attach_features(rows, features="static+ir", ir=table.drop(columns="ir_dot"))
    with pytest.raises(ValueError, match="unknown feature set 'ir'"):
        feature_names("ir")


def test_bad_input():
    with pytest.raises(ValueError, match="holds no tt.func"):
        ir_counts("not IR at all", "")
    with pytest.raises(ValueError, match=r"lack column\(s\) \['config'\]"):
        ir_features(pd.DataFrame([{"kernel": "gemm", "workload": "w", "dtype": "float16"}]))


def test_cli_ir_needs_a_kernel(tmp_path):
    from typer.testing import CliRunner

    from costtune.cli import app

    res = CliRunner().invoke(app, ["features", "--ir", "--out", str(tmp_path / "f.parquet")])
    assert res.exit_code == 2 and "--ir writes one table per kernel family" in res.output
