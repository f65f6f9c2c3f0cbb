"""Kernels costtune never saw, written as Triton's tutorials and Inductor write them
(experiments/user_kernels.py), tuned on CPU under the interpreter with the shipped model and a
do_bench that counts: each is pruned to top_k without a user mapping and computes the right
result; unseen kinds are never pruned silently; harvests carry family and sizes; explain tells
how a launch was read (issue 17)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from helpers import Bench, launch_tile_matmul, masked_tile_matmul, ours
from triton.tools.tensor_descriptor import TensorDescriptor

import costtune
from costtune.tune.kind import read_kind
from costtune.tune.launch import LaunchSpec, NotApplicable, config_key, describe
from costtune.types import CosttuneWarning

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


zoo = _load("user_kernels", ROOT / "experiments" / "user_kernels.py")
STYLES = zoo.STYLES


@pytest.mark.parametrize("name", list(STYLES))
def test_each_style_is_pruned_to_top_k_without_a_mapping(name, record):
    style = STYLES[name]
    configs = style.configs("cpu")
    bench = Bench()
    tuner = costtune.autotune(configs, key=list(style.key), top_k=2, do_bench=bench)(
        style.kernel)
    inputs = style.inputs("cpu", device="cpu")
    out = style.launch(tuner, inputs)
    assert zoo.relative_error(out, style.reference(inputs)) < style.tolerance
    last = tuner.early_config_prune.last
    # A knob the model does not learn (tutorial 09's EPILOGUE_SUBTILE) gets the one warning
    # issue 21's rule gives it, and no other fallback; every other style gets none.
    knobs = sorted({k for c in configs for k in c.kwargs if k == "EPILOGUE_SUBTILE"})
    assert last.fallbacks == (["knobs"] if knobs else []), last.notes
    assert [w for w in ours(record) if not all(k in w for k in knobs)] == [] and (
        len(ours(record)) == len(last.fallbacks))
    assert bench.calls == 2 and last.k == 2 < len(configs)
    assert last.family == style.family and last.problem == style.cpu_problem
    assert config_key(tuner.best_config) in last.kept


def _capture(fn):
    """A stand-in for a tuned kernel: ``launch(Capture(fn), inputs)`` calls
    ``fn(grid, *args, **kwargs)`` with the launch the style would make."""

    class Capture:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: fn(grid, *args, **kwargs)

    return Capture()


def _explain(style, tuner, **options):
    """``costtune.explain`` of the launch the style makes."""
    made = []
    style.launch(_capture(lambda grid, *a, **k: made.append(
        costtune.explain(tuner, *a, grid=grid, **options, **k))),
        style.inputs("cpu", device="cpu"))
    return made[0]


def test_tutorial02_launch_kwargs_and_launch_option_lists(capsys):
    """BLOCK_SIZE given at the launch is the softmax's BLOCK_N; configs that vary only
    num_warps / num_stages are ranked (the issue: all were benchmarked); the mapping the old
    warning suggested now works; num_ctas / maxnreg variants are told apart."""
    style = STYLES["tutorial02_softmax"]
    tuner = triton.autotune(style.configs("cpu"), key=["n_cols"])(style.kernel)
    report = _explain(style, tuner)
    assert report.family == "softmax" and report.problem == {"rows": 48, "cols": 200}
    assert report.launch_params == {"BLOCK_N": 256} and report.mapping == {}
    assert report.origin["BLOCK_N"] == "launch BLOCK_SIZE=256"
    assert report.k == 8 < report.n_configs and report.doubts == []
    scores = [r.score for r in report.ranking]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1
    assert any("persistent launch" in note for note in report.info)  # 16 programs, 48 rows
    printed = capsys.readouterr().out
    assert "BLOCK_N = 256 (launch BLOCK_SIZE=256)" in printed and "benchmarks 8 of 12" in printed
    hook = costtune.prune_configs_by(top_k=2, params={"BLOCK_SIZE": "BLOCK_N"})
    assert _explain(style, tuner, prune=hook).k == 2
    options = [triton.Config({}, num_warps=4, num_ctas=c, maxnreg=r)
               for c in (1, 2) for r in (None, 128)]
    keys = [config_key(c) for c in options]
    assert len(set(keys)) == 4 and "num_ctas=2" in keys[2] and "maxnreg=128" in keys[1]
    knobbed = triton.autotune(options, key=["n_cols"])(style.kernel)
    report = _explain(style, knobbed)
    assert set(report.knobs) == {"num_ctas", "maxnreg"} and report.family == "softmax"


@triton.jit
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    inside = cols < N
    x = tl.load(X + row * stride + cols, mask=inside, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    centred = tl.where(inside, x - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(centred * centred, axis=0) / N + eps)
    w = tl.load(W + cols, mask=inside)
    b = tl.load(B + cols, mask=inside)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    tl.store(Y + row * stride + cols, centred * rstd * w + b, mask=inside)


LN_CONFIGS = [triton.Config({}, num_warps=w, num_stages=s) for w in (1, 2, 4, 8)
              for s in (1, 2)]


def _layer_norm(tuner, rows=8, cols=300):  # 300: 2-16 elements per thread, as trained
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(rows, cols, generator=g), torch.rand(cols), torch.randn(cols)
    y, mean, rstd = torch.empty_like(x), torch.empty(rows), torch.empty(rows)
    tuner[(rows,)](x, y, w, b, mean, rstd, x.stride(0), cols, 1e-5,
                   BLOCK_SIZE=triton.next_power_of_2(cols))
    ref = torch.nn.functional.layer_norm(x, (cols,), w, b, eps=1e-5)
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("options, benchmarked, word", [
    ({"family": "softmax"}, 4, "reads as a layer norm"),  # widen=4 x top_k=1
    ({}, 8, "cannot tell the kernel family"),
    ({"family": "softmax", "trust_family": True}, 1, None),
    ({"family": "layernorm"}, 8, "cannot tell the kernel family"),
])
def test_a_layer_norm_is_never_pruned_silently(options, benchmarked, word, record):
    bench = Bench()
    tuner = costtune.autotune(LN_CONFIGS, key=["N"], top_k=1, do_bench=bench, **options)(
        _layer_norm_fwd_fused)
    _layer_norm(tuner)
    _layer_norm(tuner)  # the same key: tuned once, warned once
    assert bench.calls == benchmarked
    messages = ours(record)
    if word is None:
        assert messages == []
    else:
        assert len(messages) == 1 and word in messages[0], messages
        assert f"benchmarking {benchmarked} of 8" in messages[0]
    if options.get("family") == "softmax" and word:
        assert "softmax model has not seen such kernels" in messages[0]


@triton.jit
def _mm(a, b, c, M, N, K, BLK_M: tl.constexpr, BLK_N: tl.constexpr, BLK_K: tl.constexpr):
    masked_tile_matmul(a, b, c, M, N, K, BLK_M, BLK_N, BLK_K)


def test_unknown_names_get_the_likely_mapping(record):
    configs = [triton.Config({"BLK_M": 32, "BLK_N": n, "BLK_K": 32}, num_warps=w)
               for n in (32, 64) for w in (4, 8)]  # values the training data has
    a, b = torch.randn(16, 256).half(), torch.randn(256, 128).half()

    def run(**options):
        bench = Bench()
        tuner = costtune.autotune(configs, key=["M", "N", "K"], top_k=1, do_bench=bench,
                                  **options)(_mm)
        c = torch.empty(16, 128)
        tuner[lambda m: (1, triton.cdiv(128, m["BLK_N"]))](a, b, c, 16, 128, 256)
        torch.testing.assert_close(c, a.float() @ b.float(), atol=1e-2, rtol=1e-2)
        return bench.calls

    assert run() == 4
    (message,) = ours(record)
    hint = "params={'BLK_M': 'BLOCK_M', 'BLK_N': 'BLOCK_N', 'BLK_K': 'BLOCK_K'}"
    assert "_mm reads as a GEMM" in message and hint in message
    record.clear()
    assert run(params={"BLK_M": "BLOCK_M", "BLK_N": "BLOCK_N", "BLK_K": "BLOCK_K"}) == 1
    assert ours(record) == []


def test_sizes_from_descriptors_and_shapes():
    a, b, c = torch.empty(64, 256).half(), torch.empty(128, 256).half(), torch.empty(64, 128)
    descs = {n: TensorDescriptor.from_tensor(t, [16, 16]) for n, t in
             (("a_desc", a), ("b_desc", b), ("c_desc", c))}
    cfg = [triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32})]
    launch = describe(LaunchSpec(), cfg, args=descs)
    assert launch.family == "gemm" and launch.problem == {"M": 64, "N": 128, "K": 256}
    assert launch.dtype == "float16" and "(b is N x K)" in launch.origin["N"]
    # tutorial 06's [Z*H*N_CTX, HEAD_DIM] descriptor views, with Z and H named
    q = TensorDescriptor(torch.empty(2 * 3 * 64, 32).half(), [384, 32], [32, 1], [16, 32])
    attn = describe(LaunchSpec(family="attention"), [triton.Config({"BLOCK_M": 16,
                                                                    "BLOCK_N": 16})],
                    args={"M": torch.empty(6, 64), "Z": 2, "H": 3, "desc_q": q})
    assert attn.problem == {"B": 2, "H": 3, "S": 64, "D": 32, "causal": 0}
    assert attn.dtype == "float16"  # desc_q's, not the fp32 statistics buffer M
    assert attn.origin["S"] == "desc_q.shape[0] / (B*H)"
    with pytest.raises(NotApplicable, match="cannot find softmax size 'cols'"):
        describe(LaunchSpec(family="softmax"), [triton.Config({"BLOCK": 16})],
                 args={"n_rows": 4, "dtype_src": torch.empty(4, 0)})


def test_grid_fixes_an_absent_parameter_or_reads_as_persistent():
    x = torch.empty(64, 100)
    cfgs = [triton.Config({"BLOCK_SIZE": 128}, num_warps=w) for w in (2, 4)]
    args = {"x": x, "n_rows": 64, "n_cols": 100}
    spec = LaunchSpec(family="softmax")
    fixed = describe(spec, cfgs, args=args, grid=lambda m: (triton.cdiv(64, 4),))
    assert fixed.meta == {"ROWS_PER_PROG": 4} and fixed.doubts == ()
    persistent = describe(spec, cfgs, args=args, grid=(24,))  # 64 / 24 rows: a loop
    assert persistent.meta == {} and "persistent" in persistent.info[0]
    assert persistent.programs_cap == 24 and fixed.programs_cap is None
    other = describe(spec, cfgs, args=args, grid=(128,))  # more programs than rows
    assert [c for c, _ in other.doubts] == ["grid"]
    gemm = describe(LaunchSpec(), [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16,
                                                  "BLOCK_K": 16})],
                    args={"M": 64, "N": 64, "K": 64, "a": torch.empty(1).half()},
                    grid=lambda m: (16, 3))
    assert gemm.meta == {"SPLIT_K": 3} and gemm.origin["SPLIT_K"] == "launch grid"


def test_a_batch_grid_axis_is_read_as_rows_not_split_k():
    """A batched matmul's third grid axis counts BATCH programs: no split of K (the kernel
    has no SPLIT_K). Where BATCH x the GEMM's programs is the grid, the batch folds into M
    (B x M x N x K launches the programs of a (B*M) x N x K GEMM), still a doubt (batched
    operands); where it is not (an M edge in every batch), the grid is a doubt naming the
    batch."""
    tile = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16})
    args = {"A": torch.empty(1).half(), "BATCH": 8, "M": 64, "N": 64, "K": 64}
    bmm = describe(LaunchSpec(), [tile], args=args, grid=lambda m: (4, 4, 8))
    assert bmm.problem == {"M": 512, "N": 64, "K": 64}
    assert [c for c, _ in bmm.doubts] == ["grid"] and "read as gemm M x 8" in bmm.doubts[0][1]
    assert "SPLIT_K" not in bmm.meta and bmm.origin["M"].endswith("x BATCH")
    assert any("batch axis read as gemm M" in note for note in bmm.info)
    edge = describe(LaunchSpec(), [tile], args={**args, "M": 72}, grid=lambda m: (5, 4, 8))
    assert "SPLIT_K" not in edge.meta and [c for c, _ in edge.doubts] == ["grid"]
    assert "BATCH = 8: a batch axis" in edge.doubts[0][1]
    split = describe(LaunchSpec(), [tile], args={**args, "BATCH": 2}, grid=lambda m: (4, 4, 8))
    assert split.meta == {"SPLIT_K": 8}  # an argument of another value does not stand in


def test_split_counts_and_size_args_are_no_batch_axis():
    """A split-K count under a common spelling (K_SPLITS) is SPLIT_K, not a batch folded into
    M; sizes spelled m / n / k are sizes, never the batch a grid axis counts."""
    tile = triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "K_SPLITS": 4})
    split = describe(LaunchSpec(), [tile], args={"a": torch.empty(1).half(), "M": 256,
                                                 "N": 256, "K": 2048},
                     grid=lambda m: (64, m["K_SPLITS"]))
    assert split.problem == {"M": 256, "N": 256, "K": 2048} and split.doubts == ()
    assert split.rename["K_SPLITS"] == "SPLIT_K"
    tile = triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32})
    for names in (("M", "N", "K"), ("m", "n", "k")):  # 4 tiles x 64 splits; m is 64 too
        args = {"a": torch.empty(1).half(), names[0]: 64, names[1]: 64, names[2]: 4096}
        lower = describe(LaunchSpec(), [tile], args=args, grid=lambda m: (4, 64))
        assert lower.problem == {"M": 64, "N": 64, "K": 4096}, names
        assert lower.meta == {"SPLIT_K": 64} and lower.doubts == ()


def test_a_grouped_gemm_is_no_gemm_and_metadata_tensors_are_no_operands():
    """Tutorial 08's grouped GEMM (per-group sizes and pointers in int32 / int64 tensors) is
    not one M x N x K: by its name it is a kind no model saw (all configs kept); and index,
    size or pointer tensors never give a family's sizes or dtype."""
    import warnings

    @triton.jit
    def grouped_matmul_kernel(group_a_ptrs, group_b_ptrs, group_c_ptrs, group_gemm_sizes,
                              g_lds, group_size, NUM_SM: tl.constexpr,
                              BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                              BLOCK_SIZE_K: tl.constexpr):
        pass

    configs = [triton.Config({"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32,
                              "NUM_SM": 84}) for m in (32, 64, 128)]
    pruner = costtune.prune_configs_by(top_k=1)["early_config_prune"]
    pruner.kernel = grouped_matmul_kernel
    sizes = torch.tensor([[256, 256, 128]] * 4, dtype=torch.int32)
    ptrs = torch.zeros(4, dtype=torch.int64)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        kept = pruner(configs, {"group_a_ptrs": ptrs, "group_b_ptrs": ptrs,
                                "group_c_ptrs": ptrs, "group_gemm_sizes": sizes,
                                "g_lds": sizes, "group_size": 4})
    assert len(kept) == 3 and pruner.last.family is None
    assert "a grouped GEMM" in dict(pruner.last.notes)["family"]
    # Declared as a GEMM anyway: its sizes come from the fp16 operands, not the int32 table.
    a, b = torch.empty(96, 40).half(), torch.empty(40, 72).half()
    gemm = describe(LaunchSpec(family="gemm"), configs[:1],
                    args={"sizes": sizes, "a": a, "b": b, "lds": sizes})
    assert gemm.problem == {"M": 96, "N": 72, "K": 40} and gemm.dtype == "float16"


@triton.jit
def _filtered_matmul(x, y, out, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                     BK: tl.constexpr):
    masked_tile_matmul(x, y, out, M, N, K, BM, BN, BK)


def test_your_early_config_prune_runs_first_and_what_it_drops_is_never_run():
    """A filter that depends on the call (tutorial 06 drops BLOCK_M > N_CTX, which would race)
    passes to costtune.autotune as Triton's prune_configs_by, or to prune_configs_by: it runs
    first on each call; the model ranks, keeps and replaces with only what it kept."""
    configs = [triton.Config({"BM": m, "BN": n, "BK": 32}, num_warps=w)
               for m in (16, 32, 64) for n in (16, 32) for w in (2, 4)]
    seen = []

    def keep(configs, named_args, **kwargs):
        seen.append(named_args["M"])
        return [c for c in configs if c.kwargs["BM"] <= named_args["M"]]

    bench = Bench()
    tuner = costtune.autotune(configs, key=["M", "N", "K"], top_k=8, do_bench=bench,
                              prune_configs_by={"early_config_prune": keep})(_filtered_matmul)
    best = launch_tile_matmul(tuner, 24, 40, 64)  # BM 64 (and 32) exceed M: dropped
    last = tuner.early_config_prune.last
    assert seen == [24] and last.filtered == 8 and "BM: 16" in best
    assert all(configs[i].kwargs["BM"] == 16 for i in last.ranked) and len(last.ranked) == 4
    assert bench.calls == 4 and last.k == 4
    launch_tile_matmul(tuner, 40, 40, 64)  # a new key: the filter runs again
    assert seen == [24, 40] and tuner.early_config_prune.last.filtered == 4
    # Through triton.autotune: the dict carries the filter. One that returns configs of its
    # own (Triton's old prune_num_stages rebuilt them) has its result ranked, as Triton would
    # benchmark it; one that returns nothing is an error, as under Triton.
    args = {"x": torch.empty(24, 64).half(), "y": torch.empty(64, 40).half(), "M": 24,
            "N": 40, "K": 64}
    own = [triton.Config({"BM": 16, "BN": 16, "BK": 32}, num_warps=4, num_stages=s)
           for s in (1, 2, 3)]
    for returned, k in ((own, 2), (own[:1], 1), ([configs[0], *own[1:]], 2)):
        pruner = costtune.prune_configs_by(top_k=2, family="gemm", widen=1, early_config_prune=
                                           lambda c, a, r=returned, **kw: r)["early_config_prune"]
        kept = pruner(configs, args)
        assert len(kept) == k and all(any(c is r for r in returned) for c in kept)
        assert pruner.last.configs == returned and pruner.last.n_configs == len(returned)
    pruner = costtune.prune_configs_by(top_k=2, family="gemm", early_config_prune=lambda c, a,
                                       **kw: [])["early_config_prune"]
    with pytest.raises(ValueError, match="kept none of the 12 configs"):
        pruner(configs, args)


def test_a_filter_that_builds_or_changes_configs_is_tuned_as_triton_would():
    """costtune.autotune with a filter returning configs of its own: they are ranked and
    benchmarked (it raised "kept none"); a filter that changes the list's configs in place
    (clamping BM to the problem) is read after it ran: the clamped configs that became the
    same launch take one slot."""
    configs = [triton.Config({"BM": m, "BN": n, "BK": 32}, num_warps=4)
               for m in (16, 32, 64) for n in (16, 32)]

    def rebuild(configs, named_args, **kwargs):
        return [triton.Config(dict(c.kwargs), num_warps=c.num_warps, num_stages=1)
                for c in configs if c.kwargs["BM"] <= named_args["M"]]

    bench = Bench()
    tuner = costtune.autotune(configs, key=["M", "N", "K"], top_k=2, widen=1, do_bench=bench,
                              prune_configs_by={"early_config_prune": rebuild})(_filtered_matmul)
    launch_tile_matmul(tuner, 24, 40, 64)
    assert bench.calls == 2 and tuner.best_config.num_stages == 1
    assert tuner.best_config not in configs

    def clamp(configs, named_args, **kwargs):
        for c in configs:
            c.kwargs["BM"] = min(c.kwargs["BM"], 16)
        return configs

    fresh = [triton.Config(dict(c.kwargs), num_warps=4) for c in configs]
    pruner = costtune.prune_configs_by(top_k=4, family="gemm", widen=1,
                                       early_config_prune=clamp)["early_config_prune"]
    args = {"x": torch.empty(16, 64).half(), "y": torch.empty(64, 40).half(), "M": 16,
            "N": 40, "K": 64}
    kept = pruner(fresh, args)
    assert len(kept) == 2 and pruner.last.duplicates == 4
    assert all("BM=16" in key for key in pruner.last.kept)
    with pytest.raises(ValueError, match="pass costtune.prune_configs_by.*to triton.autotune"):
        costtune.autotune(configs, key=["M"], prune_configs_by=costtune.prune_configs_by())


@triton.jit
def triton_tem_fused_addmm_relu_threshold_backward_0(in_ptr0, arg_A, arg_B, out_ptr0,
                                                     BLOCK_M: tl.constexpr,
                                                     BLOCK_N: tl.constexpr,
                                                     BLOCK_K: tl.constexpr):
    pass  # how Inductor names a training Linear + ReLU (it saves the ReLU mask)


@triton.jit
def triton_tem_fused_bmm_0(arg_A, arg_B, out_ptr0, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pass


def test_inductor_templates_read_from_their_operands():
    """What torch.compile passes its GEMM templates: a Linear's raw (B, S, K) activation as
    arg_A (M = B*S), the (N, K) weight as arg_B, an fp32 bias first; a bmm's 3-D operands
    (the batch folds into M, with a doubt); a fused "threshold_backward" epilogue is no
    backward kernel. A grid axis read as SPLIT_K in a kernel whose source splits no K is a
    doubt (a batch mapped by hand), not a silent split."""
    tile = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32})]
    x, w = torch.empty(2, 64, 256).half(), torch.empty(192, 256).half()
    args = {"in_ptr0": torch.empty(192), "arg_A": x, "arg_B": w,
            "out_ptr0": torch.empty(2, 64, 192)}
    kernel = triton_tem_fused_addmm_relu_threshold_backward_0
    linear = describe(LaunchSpec(), tile, args=args, kernel=kernel)
    assert linear.family == "gemm" and linear.problem == {"M": 128, "N": 192, "K": 256}
    assert linear.dtype == "float16" and linear.doubts == ()
    # Inductor sorts the fused ops: an epilogue may come before the template's op.
    for name in ("triton_tem_fused_add_addmm_relu_threshold_backward_0",
                 "triton_tem_fused__to_copy_mm_1"):
        def named():
            pass
        named.__name__ = name
        assert read_kind(named).family == "gemm", name
    a, b = torch.empty(4, 64, 288).half(), torch.empty(4, 288, 192).half()
    bmm = describe(LaunchSpec(), tile, args={"arg_A": a, "arg_B": b,
                                             "out_ptr0": torch.empty(4, 64, 192).half()},
                   kernel=triton_tem_fused_bmm_0, grid=(2 * 6, 1, 4))
    assert bmm.problem == {"M": 256, "N": 192, "K": 288}
    assert [c for c, _ in bmm.doubts] == ["grid"] and "batched operands" in bmm.doubts[0][1]
    mapped = describe(LaunchSpec(problem={"M": ("arg_A", 1), "N": ("arg_B", 2),
                                          "K": ("arg_A", 2)}), tile,
                      args={"arg_A": a, "arg_B": b}, kernel=triton_tem_fused_bmm_0,
                      grid=(2 * 6, 1, 4))
    assert mapped.meta == {"SPLIT_K": 4} and "splits no K" in mapped.doubts[0][1]


@triton.jit
def _fwd_kernel(Q, K, V, Out, softmax_scale, nheads, seqlen_q, seqlen_k, headdim,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    tl.dot(tl.load(Q), tl.load(K))  # flash-attn's names; what it computes: dot, exp, max, sum
    tl.exp(tl.max(tl.sum(tl.load(V), 0), 0))


def test_attention_layouts_varlen_and_cross_attention_as_libraries_pass_them():
    """flash-attn and FlagGems take q as (B, S, H, D): the sizes named in the args decide the
    axes; a varlen or paged attention (integer offsets or block tables) is no dense batch
    (all kept); keys of another length than the queries are a doubt."""
    tiles = [triton.Config({"BLOCK_M": m, "BLOCK_N": 64}) for m in (64, 128)]
    q = torch.empty(2, 128, 4, 64).half()  # (B, S, H, D)
    for names in ({"nheads": 4, "seqlen_q": 128, "headdim": 64}, {"h": 4, "seqlen_q": 128}):
        got = describe(LaunchSpec(family="attention"), tiles, args={"Q": q, "K": q, "V": q,
                                                                   **names})
        assert got.problem == {"B": 2, "H": 4, "S": 128, "D": 64, "causal": 0}, names
    tutorial = describe(LaunchSpec(family="attention"), tiles,
                        args={"q": torch.empty(2, 4, 128, 64).half(), "N_CTX": 128})
    assert tutorial.problem == {"B": 2, "H": 4, "S": 128, "D": 64, "causal": 0}
    paged = {"Q": torch.empty(256, 4, 64).half(), "K_cache": torch.empty(32, 4, 8, 16, 8).half(),
             "B_Loc": torch.zeros(2, 16, dtype=torch.int32), "nheads": 4}
    with pytest.raises(NotApplicable, match="varlen or paged attention.*B_Loc"):
        describe(LaunchSpec(family="attention"), tiles, args=paged)
    cross = describe(LaunchSpec(), tiles, kernel=_fwd_kernel,
                     args={"Q": q, "K": torch.empty(2, 512, 4, 64).half(), "nheads": 4,
                           "seqlen_q": 128, "seqlen_k": 512, "headdim": 64},
                     grid=lambda m: (triton.cdiv(128, m["BLOCK_M"]), 2 * 4))
    assert cross.problem["S"] == 128 and [c for c, _ in cross.doubts] == ["shape"]
    assert "512 keys (seqlen_k) for 128 queries" in cross.doubts[0][1]
    # No length argument: the keys' shape says it (a chunked prefill over a longer cache).
    chunked = describe(LaunchSpec(family="attention"), tiles,
                       args={"q": torch.empty(2, 4, 256, 64).half(),
                             "k": torch.empty(2, 4, 4096, 64).half(), "N_CTX": 256})
    assert "4096 keys (k.shape[2]) for 256 queries" in dict(chunked.doubts)["shape"]


def test_a_single_tile_count_is_not_read_as_persistent_without_a_program_loop():
    """Fewer programs than tiles reads as a persistent launch only where that is told apart
    from a misread problem: tile counts that differ between configs and share one cap, or a
    source that loops over programs (tl.num_programs, an SM count)."""
    tiles = [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=w) for w in (4, 8)]
    args = {"q": torch.empty(2, 4, 512, 64).half()}  # 8 query blocks x 8 heads = 64 tiles
    plain = describe(LaunchSpec(), tiles, kernel=_fwd_kernel, args=args, grid=(16,))
    assert plain.programs_cap is None and [c for c, _ in plain.doubts] == ["grid"]

    @triton.jit
    def attn_persistent(q, k, v, o, NUM_SMS: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr):
        tl.dot(tl.load(q), tl.load(k))
        tl.exp(tl.max(tl.sum(tl.load(v), 0), 0))

    looped = describe(LaunchSpec(), tiles, kernel=attn_persistent, args=args, grid=(16,))
    assert looped.programs_cap == 16 and looped.doubts == ()


def test_losses_and_expert_kernels_are_kinds_no_model_saw():
    """A cross-entropy / NLL / KL / log-sum-exp kernel computes exp, max and sum as a softmax
    does but is none; a kernel indexing experts (ScatterMoE) is a grouped GEMM."""
    @triton.jit
    def _ce_fwd_kernel(X_ptr, Y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
        tl.exp(tl.max(tl.sum(tl.load(X_ptr), 0), 0))

    @triton.jit
    def _scatter2scatter(X_ptr, W_ptr, expert_idxs_ptr, M, N, K, BLOCK_M: tl.constexpr):
        tl.dot(tl.load(X_ptr), tl.load(W_ptr + tl.load(expert_idxs_ptr)))

    assert read_kind(_ce_fwd_kernel).what == "a loss"
    assert read_kind(_scatter2scatter).what == "a grouped GEMM"
    assert read_kind(_scatter2scatter).family is None
    # Liger's softmax: the dtype is its input X_ptr's, not the fp32 output's.
    liger = describe(LaunchSpec(family="softmax"), [triton.Config({"BLOCK_SIZE": 1024})],
                     args={"Y_ptr": torch.empty(64, 1000), "X_ptr": torch.empty(64, 1000).half(),
                           "n_rows": 64, "n_cols": 1000})
    assert liger.dtype == "float16"


def test_a_heuristic_knob_is_no_family_parameter():
    """Inductor's EVEN_K, set by triton.heuristics: a knob, not a parameter; no doubt."""
    even_k = describe(LaunchSpec(), STYLES["inductor_mm"].configs("cpu"),
                      args={"arg_A": torch.empty(64, 64).half(),
                            "arg_B": torch.empty(64, 64).half(), "M": 64, "N": 64, "K": 64},
                      kernel=STYLES["inductor_mm"].kernel)
    assert not [c for c, _ in even_k.doubts if c == "params"] and even_k.by_rule == {}


def test_a_config_listed_twice_is_kept_once():
    """min(BLOCK, next_power_of_2(cols)) clamps several configs to one: each distinct config
    takes one of the top_k slots and is benchmarked once."""
    configs = [triton.Config({"BLOCK_SIZE": max(b, 256)}, num_warps=w)
               for b in (64, 128, 256) for w in (2, 4, 8)]  # 3 distinct
    pruner = costtune.prune_configs_by(top_k=2, family="softmax",
                                       problem={"rows": "n_rows", "cols": "n_cols"}
                                       )["early_config_prune"]
    with pytest.warns(CosttuneWarning, match="source could not be read"):  # no kernel here
        kept = pruner(configs, {"x": torch.empty(8, 200), "n_rows": 8, "n_cols": 200})
    # Widened (no source to read) to every config: the three distinct ones, not 8 of 9.
    assert len({config_key(c) for c in kept}) == len(kept) == 3
    assert pruner.last.duplicates == 6 and len(pruner.last.ranked) == 3


def test_decoration_errors_name_what_is_wrong():
    # An empty list (filtered to nothing on this machine) runs Triton's default config, as
    # triton.autotune does.
    empty = costtune.autotune([], key=["n_cols"])(STYLES["tutorial02_softmax"].kernel)
    assert [(c.kwargs, c.num_warps) for c in empty.configs] == [({}, 4)]
    with pytest.raises(ValueError, match=r"may hold only your 'early_config_prune'.*perf_model"):
        costtune.autotune([triton.Config({})], key=["n"],
                          prune_configs_by={"perf_model": len, "early_config_prune": None})
    with pytest.raises(ValueError, match="early_config_prune must be callable"):
        costtune.prune_configs_by(early_config_prune=3)
    # A mapping onto no family's parameter, with or without family=.
    with pytest.raises(ValueError, match=r"params map onto \['TILE_M'\], no parameter"):
        costtune.prune_configs_by(params={"BLOCK_M": "TILE_M"})
    costtune.prune_configs_by(params={"BM": "BLOCK_M"})


def test_hopper_knobs_are_recognised_and_passed_through(record):
    configs = [triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32,
                              "GROUP_SIZE_M": 8, "EPILOGUE_SUBTILE": sub,
                              "WARP_SPECIALIZE": ws, "FLATTEN": fl}, num_warps=4,
                             num_ctas=ctas, maxnreg=reg)
               for sub in (True, False) for ws in (True, False) for fl in (True,)
               for ctas, reg in ((1, None), (2, 128))]
    args = {"a": torch.empty(1).half(), "M": 256, "N": 512, "K": 512}
    launch = describe(LaunchSpec(), configs, args=args)
    assert launch.family == "gemm" and launch.unknown == ()
    assert set(launch.knobs) == {"GROUP_SIZE_M", "EPILOGUE_SUBTILE", "WARP_SPECIALIZE",
                                 "FLATTEN"}
    pruner = costtune.prune_configs_by(top_k=2)["early_config_prune"]
    kept = pruner(configs, args)
    assert len(kept) >= 2 and all(c in configs for c in kept)
    assert len(set(pruner.config_keys(configs))) == len(configs)
    assert not [m for m in ours(record) if "cannot" in m or "pruning failed" in m]


@triton.jit
def triton_per_fused__softmax_0(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK: tl.constexpr):
    # Inductor's persistent reduction: the reduction block is fixed in the body.
    R0_BLOCK: tl.constexpr = 512
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    mask = (xindex < xnumel) & (r0_index < r0_numel)
    tmp0 = tl.load(in_ptr0 + (r0_index + r0_numel * xindex), mask, other=float("-inf"))
    tmp2 = tl.exp(tmp0 - tl.max(tmp0, 1)[:, None])
    tmp4 = tl.sum(tl.where(mask, tmp2, 0.0), 1)[:, None]
    tl.store(out_ptr2 + (r0_index + r0_numel * xindex), tmp2 / tmp4, mask)


def test_inductor_persistent_reduction_reads_its_block_from_the_body(record):
    configs = [triton.Config({"XBLOCK": x}, num_warps=w, num_stages=1)
               for x in (1, 2, 4, 8) for w in (2, 4)]
    bench = Bench()
    tuner = costtune.autotune(configs, key=["xnumel", "r0_numel"], top_k=2, do_bench=bench)(
        triton_per_fused__softmax_0)
    x = torch.randn(12, 400)
    y = torch.empty_like(x)
    tuner[lambda meta: (triton.cdiv(12, meta["XBLOCK"]), 1, 1)](x, y, 12, 400)
    torch.testing.assert_close(y, torch.softmax(x, -1))
    assert bench.calls == 2 and ours(record) == []
    report = _explain_call(tuner, (x, y, 12, 400),
                           {"grid": lambda meta: (triton.cdiv(12, meta["XBLOCK"]), 1, 1)})
    assert report.launch_params == {"BLOCK_N": 512}
    assert report.origin["BLOCK_N"] == "kernel constant R0_BLOCK=512"
    assert report.mapping == {"XBLOCK": "ROWS_PER_PROG"}


def _explain_call(tuner, args, kwargs):
    from costtune.tune.explain import explain_call

    return explain_call(tuner, args, kwargs)


def test_kernel_kinds_from_names_and_sources():
    @triton.jit
    def kernel(a, b, c, BLOCK: tl.constexpr):  # a GEMM by its source only
        x = tl.load(a + tl.arange(0, BLOCK)[:, None] + tl.arange(0, BLOCK)[None, :])
        tl.store(c + tl.arange(0, BLOCK)[:, None], tl.dot(x, x))

    @triton.jit
    def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
        i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
        tl.store(out_ptr0 + i, tl.load(in_ptr0 + i) + 1.0)

    @triton.jit
    def _attn_bwd(q, k, BLOCK: tl.constexpr):
        pass

    assert read_kind(kernel).family == "gemm" and "source" in read_kind(kernel).reason
    assert read_kind(triton_poi_fused_add_0).what == "an elementwise kernel"
    assert read_kind(_attn_bwd).what == "a backward pass"
    assert read_kind(STYLES["inductor_softmax"].kernel).family == "softmax"
    assert read_kind(_layer_norm_fwd_fused).what == "a layer norm"
    assert read_kind(object()) is None


def test_harvest_rows_carry_family_sizes_and_knobs(tmp_path, record):
    """The issue: a harvest of a tutorial-02 softmax recorded family None and no sizes."""
    store = tmp_path / "harvest"
    t02, t09 = STYLES["tutorial02_softmax"], STYLES["tutorial09_tma_matmul"]
    with costtune.harvest(store) as h:
        plain = triton.autotune(t02.configs("cpu"), key=["n_cols"], do_bench=Bench())(
            t02.kernel)  # plain triton.autotune: no costtune hook at all
        t02.launch(plain, t02.inputs("cpu", device="cpu"))
        tma = costtune.autotune(t09.configs("cpu"), key=["M", "N", "K"], top_k=2,
                                do_bench=Bench())(t09.kernel)
        t09.launch(tma, t09.inputs("cpu", device="cpu"))
        ln = costtune.autotune(LN_CONFIGS[:2], key=["N"], family="softmax",
                               do_bench=Bench())(_layer_norm_fwd_fused)
        _layer_norm(ln)
    assert h.errors == [] and h.rows == 12 + 2 + 2
    df = costtune.load_dataset(store)
    soft = df[df["kernel"] == "softmax_kernel"]
    assert (soft["family"] == "softmax").all() and soft["config"].nunique() == 12
    assert (soft[["rows", "cols", "BLOCK_N", "ROWS_PER_PROG"]].to_numpy()
            == [48, 200, 256, 1]).all() and (soft["dtype"] == "float32").all()
    mm = df[df["kernel"] == "matmul_kernel_tma_persistent"]
    assert (mm["family"] == "gemm").all() and (mm[["M", "N", "K"]].to_numpy()
                                               == [32, 128, 256]).all()
    assert mm["BLOCK_M"].notna().all() and mm["EPILOGUE_SUBTILE"].notna().all()
    assert "'BLOCK_SIZE_M': 'BLOCK_M'" in mm["param_map"].iloc[0]
    layer_norm = df[df["kernel"] == "_layer_norm_fwd_fused"]
    assert len(layer_norm) == 2 and layer_norm["family"].isna().all()
    # tutorial 09's untold knob (issue 21's one warning), then the layer norm's doubt
    assert [("EPILOGUE_SUBTILE" in m, "reads as a layer norm" in m) for m in ours(record)] == [
        (True, False), (False, True)]


def test_a_persistent_launch_is_ranked_and_harvested_with_its_programs(tmp_path, monkeypatch):
    """A persistent attention (min(NUM_SMS, tiles) programs; 4 "SMs" on the CPU, 6 tiles):
    the hook ranks with the features of 4 launched programs, and the harvest records them so
    a model learning from it sees the same."""
    from costtune.features.static import static_features, static_features_for

    style = STYLES["persistent_attention"]
    caps = []
    real = static_features_for

    def spy(*args, **kwargs):  # the launch's grid check calls it too, with no cap
        caps.append(kwargs.get("programs_cap"))
        return real(*args, **kwargs)

    monkeypatch.setattr("costtune.features.static.static_features_for", spy)
    store = tmp_path / "harvest"
    with costtune.harvest(store) as h:
        tuner = costtune.autotune(style.configs("cpu"), key=list(style.key), top_k=2,
                                  do_bench=Bench())(style.kernel)
        inputs = style.inputs("cpu", device="cpu")
        out = style.launch(tuner, inputs)
    assert zoo.relative_error(out, style.reference(inputs)) < style.tolerance
    assert 4 in caps and h.errors == [] and h.rows == 2
    rows = costtune.load_dataset(store)
    assert (rows["family"] == "attention").all() and (rows["launched_programs"] == 4).all()
    feats = static_features(rows.assign(kernel=rows["family"]))  # as learn=True reads them
    assert np.allclose(feats["launched_per_tile"], 4 / 6)  # S=64: one query block, 6 heads


def test_explain_returns_what_it_printed(capsys):
    style = STYLES["inductor_softmax"]
    tuner = costtune.autotune(style.configs("cpu"), key=list(style.key), top_k=3)(
        style.kernel)
    report = _explain(style, tuner)
    assert report.family == "softmax" and len(report.benchmarked) == report.k >= 3
    if report.k > 3:  # untrained values ranked above the 3rd trained config are measured too
        assert "outside the training data" in report.warning
    assert report.mapping == {"XBLOCK": "ROWS_PER_PROG", "R0_BLOCK": "BLOCK_N"}
    assert report.origin["rows"] == "arg xnumel" and report.origin["cols"] == "arg r0_numel"
    assert [r.position for r in report.ranking] == list(range(1, 13))
    assert tuner.early_config_prune.last is None  # the kernel's own hook is left untouched
    assert str(report) in capsys.readouterr().out
    ln = costtune.autotune(LN_CONFIGS, key=["N"], top_k=1, family="softmax")(
        _layer_norm_fwd_fused)
    x = torch.empty(4, 300)  # 300 columns: 2-16 elements per thread, values as trained
    report = costtune.explain(ln, x, x, x[0], x[0], x[:, 0], x[:, 0], 300, 300, 1e-5,
                              grid=(4,), BLOCK_SIZE=512)
    assert report.k == 4 and [c for c, _ in report.doubts] == ["kind"]
    assert "reads as a layer norm" in report.warning
    none = costtune.explain(costtune.autotune(LN_CONFIGS, key=["N"])(_layer_norm_fwd_fused),
                            x, x, x[0], x[0], x[:, 0], x[:, 0], 300, 300, 1e-5, grid=(4,),
                            BLOCK_SIZE=512)
    assert none.family is None and "a layer norm" in none.not_described
    assert none.k == 8 and none.kind.what == "a layer norm"
    with pytest.raises(ValueError, match="triton.autotune"):
        costtune.explain(_layer_norm_fwd_fused, x)


def test_explain_cli_runs_a_script(tmp_path):
    from typer.testing import CliRunner

    from costtune.cli import app

    script = tmp_path / "user.py"
    script.write_text(
        "import sys, triton\n"
        f"sys.path.insert(0, {str(ROOT / 'experiments')!r})\n"
        "from user_kernels import STYLES\n"
        "style = STYLES['tutorial02_softmax']\n"
        "bench = lambda fn, quantiles=None: (fn(), [1.0, 1.0, 1.0])[1]\n"
        "tuner = triton.autotune(style.configs('cpu'), key=['n_cols'], do_bench=bench)("
        "style.kernel)\n"
        "style.launch(tuner, style.inputs('cpu', device='cpu'))\n"
        "print('ran', sys.argv[1:])\n")
    result = CliRunner().invoke(app, ["explain", str(script), "--top-k", "3", "extra"])
    assert result.exit_code == 0, result.output
    assert "costtune.explain: softmax_kernel" in result.output
    assert "benchmarks 3 of 12" in result.output and "ran ['extra']" in result.output
    assert "1 launch(es) explained" in result.output
    # A plain triton.autotune kernel benchmarks all its configs in this run: said so.
    assert "this run has no costtune hook on this kernel: it benchmarks all 12" in result.output
    assert CliRunner().invoke(app, ["explain", str(tmp_path / "nosuch.py")]).exit_code == 2
    missing = CliRunner().invoke(app, ["explain", str(script), "--model", "/no/such.json"])
    assert missing.exit_code == 2 and "--model /no/such.json: no model file" in missing.output
    assert "ran" not in missing.output  # checked before the script runs


def test_explain_cli_runs_a_script_as_python_would(tmp_path):
    """In a fresh process: the script sets TRITON_INTERPRET itself before importing triton (as
    CPU scripts do; costtune must not import triton first) and imports a module beside it."""
    (tmp_path / "mykernels.py").write_text(
        "import triton, triton.language as tl\n"
        "@triton.jit\n"
        "def row_sum(X, Y, N, BLOCK_SIZE: tl.constexpr):\n"
        "    row = tl.program_id(0)\n"
        "    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)\n"
        "    for off in range(0, N, BLOCK_SIZE):\n"
        "        cols = off + tl.arange(0, BLOCK_SIZE)\n"
        "        acc += tl.load(X + row * N + cols, mask=cols < N, other=0.0)\n"
        "    tl.store(Y + row, tl.sum(acc, axis=0))\n")
    (tmp_path / "main.py").write_text(
        "import os\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "import torch, triton, costtune\n"
        "from mykernels import row_sum\n"
        "configs = [triton.Config({'BLOCK_SIZE': b}) for b in (64, 128)]\n"
        "kernel = costtune.autotune(configs, key=['N'], top_k=1)(row_sum)\n"
        "x, y = torch.randn(4, 300), torch.empty(4)\n"
        "kernel[(4,)](x, y, 300)\n"
        "print('right', torch.allclose(y, x.sum(1), atol=1e-4))\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(COSTTUNE_HOME=str(tmp_path / "home"),
               PYTHONPATH=f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}")
    res = subprocess.run([sys.executable, "-m", "costtune.cli", "explain", "main.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "right True" in res.stdout and "1 launch(es) explained" in res.stdout, res.stdout


def test_h200_script_plans_and_runs_its_cpu_parts(tmp_path, capsys):
    """experiments/device/user_kernels_h200.py: the plan fits its budget, and one style's two
    cold runs (here in-process at the CPU shape) tune, check and report."""
    script = _load("user_kernels_h200", ROOT / "experiments" / "device" /
                   "user_kernels_h200.py")
    # Every style's two cold runs fit one device call (600 s) when asked; the default budget
    # plans what fits and says what it skips.
    assert script.main(["--dry-run", "--out", str(tmp_path), "--budget-s", "580"]) == 0
    out = capsys.readouterr().out
    assert f"plan: {2 * len(STYLES)} cold runs" in out and '"gpu": "none (CPU)"' in out
    runs, skipped = script.plan(list(STYLES), top_k=8, budget_s=120, done=set())
    assert sum(e for *_, e in runs) + script.EST_RETIME_S <= 120 and skipped
    assert [m for s, m, _ in runs[:2]] == ["exhaustive", "costtune"]
    bench = Bench()
    results = [script.run_one("inductor_softmax", m, top_k=2, size="cpu", device="cpu",
                              do_bench=bench) for m in script.METHODS]
    assert [r["n_benchmarked"] for r in results] == [12, 2] and bench.calls == 14
    assert all(r["correct"] for r in results) and results[1]["family"] == "softmax"
    assert results[1]["chosen"] in {str(c) for c in STYLES["inductor_softmax"].configs("cpu")}
    report = script.write_report(tmp_path, [{**r, "status": "ok"} for r in results], None,
                                 script.provenance()).read_text()
    assert "| inductor_softmax | 12 |" in report and "12 / 2" in report
    with pytest.raises(SystemExit):
        script.main(["--dry-run", "--styles", "conv"])


def test_a_user_kernel_named_like_a_suite_kernel_is_harvested_apart(tmp_path):
    """A user's kernel named ``softmax`` is stored as ``user_softmax``: its rows never share
    the suite's folder and workload ids (where some were dropped as already stored)."""
    @triton.jit
    def softmax(out_ptr, in_ptr, n_cols, BLOCK_N: tl.constexpr):
        cols = tl.arange(0, BLOCK_N)
        x = tl.load(in_ptr + tl.program_id(0) * n_cols + cols, mask=cols < n_cols,
                    other=-float("inf"))
        e = tl.exp(x - tl.max(x, 0))
        tl.store(out_ptr + tl.program_id(0) * n_cols + cols, e / tl.sum(e, 0),
                 mask=cols < n_cols)

    tuner = triton.autotune([triton.Config({"BLOCK_N": 128}, num_warps=w) for w in (1, 2)],
                            key=["n_cols"], do_bench=Bench())(softmax)
    x = torch.randn(4, 100)
    y = torch.empty_like(x)
    with costtune.harvest(tmp_path / "h") as h:
        tuner[(4,)](y, x, 100)
    rows = costtune.load_dataset(tmp_path / "h")
    assert h.errors == [] and h.rows == 2 and set(rows["kernel"]) == {"user_softmax"}
    assert (rows["family"] == "softmax").all()


def test_explain_ranks_what_a_rebuilding_filter_returned(capsys):
    """costtune.explain with a filter returning configs of its own (it raised KeyError)."""
    configs = [triton.Config({"BM": m, "BN": 32, "BK": 32}, num_warps=4) for m in (16, 32)]

    def rebuild(configs, named_args, **kwargs):
        return [triton.Config(dict(c.kwargs), num_warps=4, num_stages=1) for c in configs]

    tuner = costtune.autotune(configs, key=["M"], top_k=1,
                              prune_configs_by={"early_config_prune": rebuild})(_filtered_matmul)
    x, y = torch.empty(64, 64).half(), torch.empty(64, 64).half()
    costtune.explain(tuner, x, y, torch.empty(64, 64), 64, 64, 64,
                     grid=lambda meta: (64 // meta["BM"], 2))
    assert "num_stages=1" in capsys.readouterr().out


def test_after_import_leaves_a_shared_loader_alone(tmp_path, monkeypatch):
    """``explain``'s hook on the autotuner's import calls back for that module only, even
    when its loader serves other modules too (a zip import), and not after it is left."""
    import zipfile

    from costtune.tune.explain import after_import

    archive = tmp_path / "mods.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zpkg/__init__.py", "")
        z.writestr("zpkg/watched.py", "X = 1\n")
        z.writestr("zpkg/other.py", "Y = 2\n")
    monkeypatch.syspath_prepend(str(archive))
    for name in ("zpkg", "zpkg.watched", "zpkg.other"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    seen = []
    with after_import("zpkg.watched", lambda module: seen.append(module.__name__)):
        importlib.import_module("zpkg.watched")
        importlib.import_module("zpkg.other")
    assert seen == ["zpkg.watched"] and sys.modules["zpkg.watched"].X == 1
