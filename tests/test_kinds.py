"""Kernels at the families' edges, written as their authors would: the hook reads what they
compute (a backward pass by its gradient arguments, a GEMM with an exp epilogue, a row
logsumexp, scans and custom reductions) and doubts sizes the family's data never had (a
sliding window, quantized weights, per-row outputs, one program per column, an empty grid),
widening k instead of pruning hard with a model that does not apply."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest
import torch
import triton
import triton.language as tl

import costtune
from costtune.tune.kind import read_kind
from costtune.tune.launch import LaunchSpec, NotApplicable, describe


@triton.jit
def _attn_dq_kernel(Q, K, V, DO, DQ, L, Delta, Z, H, N_CTX, HEAD_DIM: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    q = tl.load(Q + tl.arange(0, BLOCK_M))
    tl.store(DQ + tl.arange(0, BLOCK_M), tl.dot(q, q) * tl.exp(tl.max(q, 0)))


@triton.jit
def fused_bias_gelu_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc = tl.dot(tl.load(a_ptr), tl.load(b_ptr))
    tl.store(c_ptr, acc / (1.0 + tl.exp(-1.702 * acc)))


@triton.jit
def _row_stat_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK_SIZE))
    m = tl.max(x, 0)
    tl.store(out_ptr, m + tl.log(tl.sum(tl.exp(x - m), 0)))


@triton.jit
def _prefix_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    tl.store(y_ptr + tl.arange(0, BLOCK_SIZE), tl.cumsum(tl.load(x_ptr), 0))


@triton.jit
def _argmax_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    tl.store(y_ptr, tl.argmax(tl.load(x_ptr + tl.arange(0, BLOCK_SIZE)), 0))


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr):
    tl.store(c_ptr, tl.dot(tl.load(a_ptr), tl.load(b_ptr)))


def test_what_a_kernel_computes_beyond_its_name():
    """dQ / dO / Delta arguments: a backward pass, whatever the name; an exp after a dot with
    no row max is a GEMM's epilogue (GELU, SiLU), not attention; scans and arg-reductions are
    no elementwise kernels; logsumexp and xent names are unseen kinds."""
    assert read_kind(_attn_dq_kernel).what == "a backward pass"
    assert "['DO']" in read_kind(_attn_dq_kernel).reason

    @triton.jit
    def _attn_fwd_dk(q, k, v, o, d_k, d_v, BLOCK_M: tl.constexpr):  # head dims d_k / d_v
        s = tl.dot(tl.load(q), tl.load(k))
        tl.store(o, tl.exp(s - tl.max(s, 1)))
    assert read_kind(_attn_fwd_dk).family == "attention"
    assert read_kind(fused_bias_gelu_kernel).family == "gemm"
    assert read_kind(_prefix_kernel).what == "a scan or sort"
    assert read_kind(_argmax_kernel).what == "a reduction"

    def named(name):
        def fn(x, y):
            pass
        fn.__name__ = name
        return fn
    for name, what in (("row_logsumexp_kernel", "a row logsumexp"),
                       ("softmax_xent_fwd_kernel", "a loss")):
        assert read_kind(triton.jit(named(name))).what == what


def _gemm_args(m=64, n=64, k=64, b_dtype=torch.float16):
    b = torch.empty(k, n).to(b_dtype) if b_dtype != torch.int32 else torch.empty(
        k // 8, n, dtype=torch.int32)
    return {"a_ptr": torch.empty(m, k).half(), "b_ptr": b, "c_ptr": torch.empty(m, n).half(),
            "M": m, "N": n, "K": k}


def _doubts(kernel, configs, args, grid=None, family=None):
    return dict(describe(LaunchSpec(family=family), configs, args=args, kernel=kernel,
                         grid=grid).doubts)


GEMM_CONFIGS = [triton.Config({"BLOCK_M": m, "BLOCK_N": 64, "BLOCK_K": 32}) for m in (32, 64)]


@pytest.mark.parametrize("b_dtype", [torch.int8, torch.int32])
def test_weight_only_quantized_gemm_is_a_dtype_doubt(b_dtype):
    doubts = _doubts(_matmul_kernel, GEMM_CONFIGS, _gemm_args(b_dtype=b_dtype))
    assert "mixed operands: a_ptr float16 x b_ptr" in doubts["dtype"]
    assert "dtype" not in _doubts(_matmul_kernel, GEMM_CONFIGS, _gemm_args())


def test_a_sliding_window_is_a_doubt():
    q = torch.empty(1, 2, 256, 64).half()
    args = {"Q": q, "K": q, "V": q, "Out": q, "Z": 1, "H": 2, "N_CTX": 256, "IS_CAUSAL": True}
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": 64}) for m in (64, 128)]
    assert "sliding window (WINDOW_SIZE = 32)" in _doubts(
        None, configs, {**args, "WINDOW_SIZE": 32}, family="attention")["shape"]
    for window in (-1, 256, 4096):  # none, or no shorter than the sequence
        assert _doubts(None, configs, {**args, "WINDOW_SIZE": window}, family="attention") == {}


def test_per_row_outputs_and_one_program_per_column_are_softmax_doubts():
    x = torch.empty(512, 256)
    configs = [triton.Config({"BLOCK_SIZE": 256}, num_warps=w) for w in (2, 4)]
    per_row = _doubts(_row_stat_kernel, configs, {"x_ptr": x, "out_ptr": torch.empty(512),
                                                  "n_cols": 256}, family="softmax")
    assert "1 per row: a loss, a row reduction" in per_row["kind"]
    # A softmax over dim 0 through strides: 256 programs, one per column.
    strided = {"x_ptr": x, "y_ptr": torch.empty_like(x), "n_rows": 512, "n_cols": 256}
    doubts = _doubts(None, configs, strided, grid=(256,), family="softmax")
    assert "one program per column" in doubts["grid"]
    assert _doubts(None, configs, strided, grid=(512,), family="softmax") == {}


def test_an_empty_grid_is_a_doubt_explain_reports():
    doubts = _doubts(_matmul_kernel, GEMM_CONFIGS, _gemm_args(), grid=lambda m: (2, 2, 0))
    assert "starts no programs" in doubts["grid"]
    tuner = triton.autotune(GEMM_CONFIGS, key=["M"], prune_configs_by=costtune.prune_configs_by(
        top_k=1, family="gemm"))(_matmul_kernel)
    with redirect_stdout(io.StringIO()) as out:
        costtune.explain(tuner, *_gemm_args().values(), grid=lambda m: (2, 2, 0))
    assert "starts no programs" in out.getvalue()


def test_a_kind_whose_configs_tile_otherwise_says_so():
    @triton.jit
    def _attn_like(q, k, v, o, B, H, S, D, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr):
        s = tl.dot(tl.load(q), tl.load(k))
        tl.store(o, tl.exp(s - tl.max(s, 1)))
    configs = [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32})]
    with pytest.raises(NotApplicable, match=r"reads as an attention kernel .* its configs name "
                                            r"\['BLOCK_K'\]"):
        describe(LaunchSpec(), configs, args={"q": torch.empty(1, 1, 64, 64).half(), "B": 1,
                                              "H": 1, "S": 64, "D": 64}, kernel=_attn_like)


def test_attention_terms_the_model_never_saw_and_queries_by_name():
    """An S x S bias or mask is a doubt; a 4-D bias is never taken as the query (its last dim
    read as D); Q_ptr and head_size name the query and D."""
    b, h, s, d = 2, 4, 256, 64
    q = torch.empty(b * h, s, d).half()
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": 64}) for m in (64, 128)]
    args = {"Bias_ptr": torch.empty(b, h, s, s).half(), "Q_ptr": q, "K_ptr": q, "V_ptr": q,
            "Out_ptr": q, "B": b, "H": h, "N_CTX": s, "head_size": d}
    got = describe(LaunchSpec(family="attention"), configs, args=args)
    assert got.problem["D"] == d and got.origin["D"] == "arg head_size"
    assert "Bias_ptr (2, 4, 256, 256) is an S x S bias or mask" in dict(got.doubts)["shape"]
    mask = {"q": torch.empty(b, h, s, d).half(), "mask": torch.ones(b, 1, s, s, dtype=torch.bool)}
    assert "mask" in dict(_doubts(None, configs, mask, family="attention"))["shape"]
    biased = {"bias": torch.empty(b, h, s, 2 * s).half(), "qq": torch.empty(b, h, s, d).half()}
    assert describe(LaunchSpec(family="attention"), configs, args=biased).problem["D"] == d


@triton.jit
def _fwd_kernel_stage1(Q, K_Buffer, V_Buffer, Att_Out, kv_len, BLOCK_N: tl.constexpr):
    q = tl.load(Q + tl.arange(0, 64))
    k = tl.load(K_Buffer + tl.arange(0, BLOCK_N)[:, None] * 64 + tl.arange(0, 64)[None, :])
    s = tl.sum(q[None, :] * k, 1)
    p = tl.exp(s - tl.max(s, 0))
    tl.store(Att_Out + tl.arange(0, BLOCK_N), p / tl.sum(p, 0))


def test_a_decode_attention_without_dot_is_no_softmax():
    """sglang / lightllm decode kernels compute q.k with sums (no tl.dot): their source reads
    as a softmax, but the KV buffers are far larger than the 'rows x cols' of the queries."""
    q = torch.empty(16, 64).half()
    kv = torch.empty(2048, 64).half()
    configs = [triton.Config({"BLOCK_N": n}) for n in (64, 128, 256)]
    args = {"Q": q, "K_Buffer": kv, "V_Buffer": kv, "Att_Out": torch.empty(16, 64).half(),
            "kv_len": 2048}
    got = describe(LaunchSpec(), configs, args=args, kernel=_fwd_kernel_stage1)
    assert got.family == "softmax" and "K_Buffer (2048, 64) is larger" in dict(got.doubts)["kind"]


def test_inductor_names_and_layouts():
    """Inductor names kernels after the ops they came from: a pointwise kernel of an addmm is
    no GEMM, a reduction named after a softmax with no exp is none; a softmax over a strided
    dim (NCHW, dim=1), one stage of a split softmax and mm_plus_mm are doubts; flex's backward
    reads its gradient as arg_DO."""
    @triton.jit
    def triton_poi_fused_addmm_relu_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
        x = tl.load(in_ptr0 + tl.arange(0, XBLOCK))
        tl.store(out_ptr0 + tl.arange(0, XBLOCK), tl.maximum(x, 0.0))

    @triton.jit
    def triton_red_fused__softmax_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr,
                                    R0_BLOCK: tl.constexpr):
        tl.store(out_ptr0, tl.max(tl.load(in_ptr0 + tl.arange(0, R0_BLOCK)), 0))

    @triton.jit
    def triton_tem_fused_zeros_1(arg_Q, arg_K, arg_V, arg_LSE, arg_DO, out_ptr0,
                                 BLOCK_M: tl.constexpr):
        tl.store(out_ptr0, tl.dot(tl.load(arg_Q), tl.load(arg_DO)))

    assert read_kind(triton_poi_fused_addmm_relu_0).family is None
    assert read_kind(triton_red_fused__softmax_0).what == "a reduction"
    assert read_kind(triton_tem_fused_zeros_1).what == "a backward pass"
    configs = [triton.Config({"XBLOCK": x, "R0_BLOCK": 64}) for x in (4, 8)]
    nchw = {"in_ptr0": torch.empty(8, 64, 32, 32), "out_ptr0": torch.empty(8, 64, 32, 32),
            "xnumel": 8192, "r0_numel": 64}
    assert "not in_ptr0's last dim" in _doubts(None, configs, nchw, family="softmax")["shape"]
    split = {"in_ptr0": torch.empty(2, 1_000_000), "out_ptr0": torch.empty(2, 1, 128),
             "xnumel": 256, "r0_numel": 7813}
    assert "one stage of a split" in _doubts(None, configs, split, family="softmax")["kind"]
    m = 256
    plus = {"arg_A": torch.empty(m, 64).half(), "arg_B": torch.empty(64, m).half(),
            "arg_C": torch.empty(m, 128).half(), "arg_D": torch.empty(128, m).half(),
            "out_ptr0": torch.empty(m, m).half()}
    doubts = _doubts(None, GEMM_CONFIGS, plus, family="gemm")
    assert "arg_C (256, 128) @ arg_D (128, 256)" in doubts["kind"]
    scaled = {"arg_A": torch.empty(m, 64).half(), "arg_B": torch.empty(64, 512).half(),
              "in_ptr2": torch.empty(m, 1), "out_ptr0": torch.empty(m, 512).half()}
    got = describe(LaunchSpec(family="gemm"), GEMM_CONFIGS, args={**scaled, "out_ptr0":
                                                                  torch.empty(1)})
    assert got.problem == {"M": m, "N": 512, "K": 64}  # a row scale, no M x N output


def test_a_flex_block_mask_is_said_and_stays_a_doubt_with_a_mapping():
    q = torch.empty(1, 2, 256, 64).half()
    args = {"arg_Q": q, "arg_K": q, "arg_V": q, "arg_LSE": torch.empty(1, 2, 256),
            "arg_KV_NUM_BLKS": torch.zeros(1, 1, 2, dtype=torch.int32),
            "arg_KV_IDX": torch.zeros(1, 1, 2, 2, dtype=torch.int32)}
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": 64}) for m in (64, 128)]
    with pytest.raises(NotApplicable, match=r"block-sparse \(flex\) attention"):
        describe(LaunchSpec(family="attention"), configs, args=args)
    mapped = describe(LaunchSpec(family="attention", problem={"B": 1, "H": 2, "S": 256,
                                                              "D": 64}), configs, args=args)
    assert "integer tensors ['arg_KV_NUM_BLKS'" in dict(mapped.doubts)["shape"]


def test_what_must_not_raise_a_doubt():
    """False doubts a review found: a (B, H, S, D) query where S == D is no S x S mask; a
    D_OUT size or a REQUIRES_GRAD flag is no gradient; (M, 1) and (1, N) scales are no second
    GEMM."""
    q = torch.empty(8, 16, 64, 64).half()
    configs = [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=w) for w in (4, 8)]
    assert _doubts(None, configs, {"Q": q, "K": q, "V": q, "Out": q}, family="attention") == {}
    masked = {"Q": q, "K": q, "V": q, "Out": q, "mask": torch.ones(8, 1, 64, 64, dtype=torch.bool)}
    assert "mask" in _doubts(None, configs, masked, family="attention")["shape"]

    @triton.jit
    def linear_kernel(x_ptr, w_ptr, y_ptr, M, D_IN, D_OUT, REQUIRES_GRAD: tl.constexpr,
                      BLOCK_M: tl.constexpr):
        tl.store(y_ptr, tl.dot(tl.load(x_ptr), tl.load(w_ptr)))
    assert read_kind(linear_kernel).family == "gemm"
    m = 256
    scaled = {"a_ptr": torch.empty(m, 64).half(), "b_ptr": torch.empty(64, 512).half(),
              "scale_a_ptr": torch.empty(m, 1), "scale_b_ptr": torch.empty(1, 512),
              "c_ptr": torch.empty(m, 512).half()}
    assert "kind" not in _doubts(None, GEMM_CONFIGS, scaled, family="gemm")


def test_operand_names_are_matched_whatever_their_case():
    # fp16 A_ptr / B_ptr with an fp32 output, bias and scale: the dtype is A's, not the
    # commonest; and where the dtype is read wrongly the warning says from where.
    args = {"A_ptr": torch.empty(64, 64).half(), "B_ptr": torch.empty(64, 64).half(),
            "C_ptr": torch.empty(64, 64), "bias_ptr": torch.empty(64),
            "scale_ptr": torch.empty(1), "M": 64, "N": 64, "K": 64}
    launch = describe(LaunchSpec(family="gemm"), GEMM_CONFIGS, args=args, kernel=_matmul_kernel)
    assert (launch.dtype, launch.origin["dtype"]) == ("float16", "arg A_ptr")
    assert launch.problem == {"M": 64, "N": 64, "K": 64}
    fp32 = {**args, "A_ptr": args["C_ptr"], "B_ptr": args["C_ptr"]}
    tuned = costtune.autotune(GEMM_CONFIGS, key=["M"], family="gemm")(_matmul_kernel)
    hook = tuned.early_config_prune
    with pytest.warns(costtune.CosttuneWarning,
                      match=r"no float32 measurements \(read from arg A_ptr; pass dtype= if "):
        hook(GEMM_CONFIGS, fp32)
