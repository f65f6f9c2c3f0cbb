"""Compiled features: JIT-equal specialization, real sm_90 compiles on the CPU, failures as rows,
the disk cache, and (when the H200 fixture exists) equality with what the GPU reported.

The CPU test setup runs Triton's interpreter (conftest sets TRITON_INTERPRET=1); compiled
features then specialize and compile in spawned workers without it, as these tests do.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import triton
import triton.language as tl

from costtune.build.asm import ptx_counts, sass_counts
from costtune.build.pool import get_pool as _pool
from costtune.features import COMPILED_FEATURES, compiled_features, specialize
from costtune.kernels import KernelCall

FIXTURE = Path(__file__).parent / "fixtures" / "h200_resources.json"


@triton.jit
def _tiny_kernel(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs * stride, mask=offs < n)
    tl.store(y_ptr + offs, x + 1, mask=offs < n)


def _tiny_call(x, y, n, stride) -> KernelCall:
    # A JITFunction even under the interpreter: specialization needs no compile.
    fn = triton.runtime.jit.JITFunction(_tiny_kernel.fn)
    return KernelCall(fn, (1,), (x, y, n, stride), {"BLOCK": 64}, num_warps=4, num_stages=2)


def test_ptx_and_sass_counts():
    ptx = """
    .reg .b32 %r<10>;
    // begin inline asm
    @%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
    // end inline asm
    ld.global.b16 {%rs1}, [%rd2];
    st.global.v2.b32 [ %rd3 + 0 ], { %r5, %r6 };
    wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%f1}, %rd5, %rd6, 1, 1, 1, 0, 1;
    wgmma.commit_group.sync.aligned;
    cp.async.cg.shared.global [ %r7 + 0 ], [ %rd4 + 0 ], 0x10, %r8;
    cp.async.commit_group;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1];
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r9], %r10;
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1, %r2, %r3, %r4}, [%r5];
    ld.shared.v2.f32 {%f1, %f2}, [%r3];
    bar.sync 	0;
    fma.rn.f32 %f3, %f1, %f2, %f3;
    max.f32 %f5, %f4, %f3;
    ex2.approx.f32 %f4, %f3;
    add.s32 %r11, %r11, 1;
    cvt.rn.f16x2.f32 %r12, %f1, %f2;
    atom.global.gpu.relaxed.add.f32 %f6, [%rd7], %f5;
$L__BB0_2:
    ret;
"""
    c = ptx_counts(ptx)
    assert c["ptx_ld_global"] == 2 and c["ptx_ld_global_v4"] == 1
    assert c["ptx_ld_global_bytes"] == 16 + 2
    assert c["ptx_st_global_bytes"] == 8 and c["ptx_st_global"] == 1
    assert c["ptx_wgmma"] == 1 and c["ptx_cp_async"] == 1 and c["ptx_cp_async_bulk"] == 1
    assert c["ptx_mbarrier"] == 1 and c["ptx_ldmatrix"] == 1 and c["ptx_ld_shared"] == 1
    assert c["ptx_bar"] == 1 and c["ptx_fma_f32"] == 1 and c["ptx_minmax_f32"] == 1
    assert c["ptx_sfu"] == 1 and c["ptx_int_math"] == 1 and c["ptx_cvt"] == 1
    assert c["ptx_atomic"] == 1
    assert c["ptx_instructions"] == 19  # every line but directives, comments, labels

    sass = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @!P0 LDG.E.128 R4, desc[UR6][R2.64] ;
        /*0020*/                   HGMMA.64x128x16.F32 gdesc[UR4], RZ, !UPT ;
        /*0030*/                   NOP ;
        /*0040*/                   STL [R1], R2 ;
        /*0050*/                   FFMA R3, R4, R5, R3 ;
"""
    s = sass_counts(sass)
    assert s["sass_instructions"] == 5 and s["sass_ldg"] == 1 and s["sass_hgmma"] == 1
    assert s["sass_stl"] == 1 and s["sass_ffma"] == 1 and s["sass_fp32"] == 1


def test_specialization_alignment_ones_and_divisibility():
    x = torch.empty(256, dtype=torch.float16, device="meta")
    job = specialize(_tiny_call(x, x, 32, 1))
    assert job.signature["stride"] == "constexpr" and job.constexprs[(3,)] == 1  # == 1
    assert job.attrs[(0,)] == job.attrs[(2,)] == [["tt.divisibility", 16]]  # 16-aligned
    odd = specialize(_tiny_call(x, x[1:], 33, 3))  # 2-byte offset pointer, odd ints
    assert odd.attrs[(1,)] == [] and odd.attrs[(2,)] == [] and odd.attrs[(3,)] == []
    assert odd.signature["stride"] == "i32"
    assert odd.key != job.key
    # Same specialization from different values -> same compile job.
    assert specialize(_tiny_call(x, x, 48, 1)).key == job.key


def _jit_and_aot_specs(cases: list) -> list[tuple[str, str]]:
    """In a JIT (not interpreter) process: the JIT's own specialization for each case, read
    from ``jit_cache_hook`` on a real-tensor warmup with a stand-in sm_90 driver, beside
    ``launch_jobs`` on meta tensors."""
    from helpers import use_stand_in_driver
    from triton import knobs

    from costtune.features import launch_jobs, parse_config_key, spec_text
    from costtune.kernels import get_family

    use_stand_in_driver()
    seen: list[str] = []

    def hook(*, compile, **_):
        seen.append(spec_text(compile["signature"], compile["constants"], compile["configs"][0]))
        return True  # skip the compile: the specialization is all we want

    knobs.runtime.jit_cache_hook = hook
    out = []
    for kernel, problem, dtype, key in cases:
        family = get_family(kernel)
        jobs, main = launch_jobs(kernel, problem, dtype, key)
        calls = family.kernel_calls(family.make_inputs(problem, dtype), parse_config_key(key))
        seen.clear()
        calls[main].warmup()
        out.append((jobs[main].spec, seen[0]))
    return out


def test_specialization_equals_the_jit():
    cases = [
        ("gemm", {"M": 256, "N": 256, "K": 256}, "float16",
         "BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,SPLIT_K=1,num_warps=4,num_stages=3"),
        ("gemm", {"M": 77, "N": 409, "K": 1025}, "bfloat16",
         "BLOCK_M=32,BLOCK_N=64,BLOCK_K=64,SPLIT_K=2,num_warps=8,num_stages=2"),
        ("gemm", {"M": 1, "N": 512, "K": 512}, "float16",
         "BLOCK_M=32,BLOCK_N=32,BLOCK_K=32,SPLIT_K=1,num_warps=4,num_stages=2"),
        ("softmax", {"rows": 100, "cols": 1000}, "float16",
         "BLOCK_N=1024,ROWS_PER_PROG=2,num_warps=4,num_stages=1"),
        ("softmax", {"rows": 77, "cols": 1234}, "float32",
         "BLOCK_N=256,ROWS_PER_PROG=1,num_warps=2,num_stages=3"),
        ("attention", {"B": 1, "H": 2, "S": 100, "D": 64, "causal": 1}, "float16",
         "BLOCK_M=64,BLOCK_N=32,num_warps=4,num_stages=2"),
        ("attention", {"B": 2, "H": 3, "S": 128, "D": 128, "causal": 0}, "bfloat16",
         "BLOCK_M=128,BLOCK_N=64,num_warps=8,num_stages=3"),
    ]
    pool = _pool(1)
    try:
        pairs = pool.submit(_jit_and_aot_specs, cases).result()
    finally:
        pool.shutdown()
    for case, (aot, jit) in zip(cases, pairs, strict=True):
        assert aot == jit, case
    # Sizes off multiples of 16 do change the specialization.
    assert pairs[0][0] != pairs[1][0]


def _rows(entries: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame([{"kernel": k, "workload": f"{k}_{i}_{sorted(p.items())}",
                          "dtype": d, **p, "config": c}
                         for i, (k, p, d, c) in enumerate(entries)])


GEMM_OK = "BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,SPLIT_K=1,num_warps=4,num_stages=3"


def test_real_compiles_failures_and_cache(tmp_path):
    sq = {"M": 1024, "N": 1024, "K": 1024}
    df = _rows([
        ("gemm", sq, "float16", GEMM_OK),
        # Same specialization (sizes divisible by 16, none equal to 1): compiled once.
        ("gemm", {"M": 2048, "N": 2048, "K": 2048}, "float16", GEMM_OK),
        ("gemm", sq, "float16", "BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,SPLIT_K=2,num_warps=4,"
                                "num_stages=2"),
        # 5 stages x 64 KiB of A and B tiles: over the 227 KiB an sm_90 block may use.
        ("gemm", sq, "float16", "BLOCK_M=64,BLOCK_N=64,BLOCK_K=256,SPLIT_K=1,num_warps=4,"
                                "num_stages=5"),
        ("softmax", {"rows": 100, "cols": 5000}, "float32",
         "BLOCK_N=1024,ROWS_PER_PROG=1,num_warps=4,num_stages=2"),
        ("softmax", {"rows": 100, "cols": 5000}, "float32",
         "BLOCK_N=1024,ROWS_PER_PROG=3,num_warps=4,num_stages=2"),  # not a power of two
        ("attention", {"B": 1, "H": 2, "S": 128, "D": 64, "causal": 1}, "float16",
         "BLOCK_M=64,BLOCK_N=32,num_warps=4,num_stages=2"),
    ])
    start = time.perf_counter()
    first = compiled_features(df, workers=2, cache_dir=tmp_path)
    cold = time.perf_counter() - start
    assert list(first.columns[-len(COMPILED_FEATURES):]) == COMPILED_FEATURES
    gemm, gemm2, split, huge, soft, bad, attn = (r for _, r in first.iterrows())

    assert gemm["compile_status"] == "ok" and gemm["n_regs"] > 0
    assert gemm["ptx_wgmma"] > 0 and gemm["sass_hgmma"] > 0  # Hopper tensor cores
    assert gemm["ptx_cp_async"] + gemm["ptx_cp_async_bulk"] > 0  # pipelined loads
    assert gemm["shared_bytes"] == 3 * (128 * 64 + 64 * 128) * 2 and gemm["ptx_atomic"] == 0
    assert gemm2["compile_key"] == gemm["compile_key"]
    assert split["compile_status"] == "ok" and split["ptx_atomic"] > 0
    assert huge["compile_status"] == "out_of_resources" and huge["shared_bytes"] > 232448
    assert "shared memory" in huge["compile_error"]
    assert soft["compile_status"] == "ok" and soft["ptx_sfu"] > 0 and soft["ptx_wgmma"] == 0
    assert bad["compile_status"] == "compile_error" and "power of two" in bad["compile_error"]
    assert pd.isna(bad["n_regs"])
    assert attn["compile_status"] == "ok" and attn["ptx_wgmma"] + attn["ptx_mma"] > 0
    assert 0 < attn["occupancy"] <= 1
    assert len(list(tmp_path.rglob("*.json"))) == 5  # distinct compile jobs

    start = time.perf_counter()
    second = compiled_features(df, workers=2, cache_dir=tmp_path)
    warm = time.perf_counter() - start
    # Cached records come back verbatim, compile time included; a recompile would differ.
    pd.testing.assert_frame_equal(first, second)
    print(f"compiled features: cold {cold:.1f}s, cached {warm:.1f}s")

    # In threads (the pruning hook's stage 2), into a fresh cache: the same records, bar the
    # compile seconds, and the same failures as data.
    threaded = compiled_features(df, workers=2, cache_dir=tmp_path / "threads", threads=True)
    pd.testing.assert_frame_equal(threaded.drop(columns="compile_s"),
                                  first.drop(columns="compile_s"))
    assert len(list((tmp_path / "threads").rglob("*.json"))) == 5


def test_matches_gpu_fixture():
    """Registers, spills, shared bytes and specialization equal what the H200 reported."""
    if not FIXTURE.exists():
        pytest.skip(f"{FIXTURE.name} absent: run experiments/gpu_resource_check.py on a GPU")
    results = json.loads(FIXTURE.read_text())["results"]
    entries = [(r["kernel"], r["problem"], r["dtype"], r["config"]) for r in results]
    pool = _pool(1)
    try:
        table, hashes, specs = pool.submit(_cpu_side, entries).result()
    finally:
        pool.shutdown()
    current = [i for i, r in enumerate(results) if r["source_hash"] == hashes[i]]
    if not current:
        pytest.skip("fixture recorded for other kernel sources: re-run the GPU check")
    mismatches = []
    for i in current:
        r, row = results[i], table.iloc[i]
        if r["status"] == "ok":
            got = (row["compile_status"], row["n_regs"], row["n_spills"], row["shared_bytes"])
            want = ("ok", r["n_regs"], r["n_spills"], r["shared"])
        else:
            got, want = row["compile_status"], r["status"]
        if got != want or (r["spec"] is not None and specs[i] != r["spec"]):
            mismatches.append((entries[i], got, want))
    assert not mismatches, f"{len(mismatches)}/{len(current)} differ: {mismatches[:5]}"


def _cpu_side(entries: list) -> tuple[pd.DataFrame, list[str], list[str]]:
    """In a JIT process: compiled features (disk cache, 2 workers) and each entry's kernel
    source hash and specialization."""
    from costtune.build.pool import shutdown_pool
    from costtune.features import kernel_source_hash, launch_jobs

    try:
        table = compiled_features(_rows(entries), workers=2)
    finally:
        # This runs in a pool worker: its own pool must go before it exits, or the exit
        # waits on that pool's processes (seen with a cold compile cache).
        shutdown_pool(wait=True)
    hashes, specs = [], []
    for kernel, problem, dtype, key in entries:
        jobs, main = launch_jobs(kernel, problem, dtype, key)
        hashes.append(kernel_source_hash(jobs[main].resolve_fn()))
        specs.append(jobs[main].spec)
    return table, hashes, specs


def test_killed_run_keeps_what_it_compiled(tmp_path, monkeypatch):
    """Each record reaches the disk cache as it arrives: a run stopped part-way resumes."""
    from types import SimpleNamespace

    import costtune.features.compiled as C

    jobs = [SimpleNamespace(key=f"{i:02d}job", fn_module="m", fn_name="f", spec="s", arch=90)
            for i in range(3)]
    calls, stop_at = [], [2]

    def fake_compile(job, *, sass):
        calls.append(job.key)
        if len(calls) in stop_at:
            raise KeyboardInterrupt  # the user (or a time limit) stops the run
        return {"status": "ok", "n_regs": 40 + len(calls), "compile_s": 0.1}

    monkeypatch.setattr(C, "compile_job", fake_compile)
    with pytest.raises(KeyboardInterrupt):
        C.compile_jobs(jobs, workers=1, cache_dir=tmp_path)
    assert [p.stem for p in tmp_path.rglob("*.json")] == ["00job"]

    calls.clear()
    stop_at.clear()  # the resumed run compiles only what is missing
    records = C.compile_jobs([*jobs, jobs[2]], workers=1, cache_dir=tmp_path)
    assert calls == ["01job", "02job"]  # the duplicate job compiled once
    assert records["00job"]["n_regs"] == 41 and set(records) == {"00job", "01job", "02job"}


def test_features_cli_one_kernel(tmp_path):
    from typer.testing import CliRunner

    from costtune.cli import app

    root = Path(__file__).resolve().parents[1] / "datasets" / "h200"
    out = tmp_path / "f.parquet"
    res = CliRunner().invoke(app, ["features", "--dataset", str(root), "--kernel", "softmax",
                                   "--no-compiled", "--out", str(out)])
    assert res.exit_code == 0, res.output
    table = pd.read_parquet(out)
    assert table["workload"].str.startswith("softmax").all() and len(table) > 1000
    assert not table.duplicated(["workload", "config"]).any()
    bad = CliRunner().invoke(app, ["features", "--dataset", str(root), "--kernel", "conv"])
    assert bad.exit_code == 2 and "unknown kernel family 'conv'" in bad.output
