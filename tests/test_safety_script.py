"""The CPU parts of the H200 safety check (experiments/device/safety_h200.py): its plan, its
tutorial-style kernels' correctness under Triton's interpreter at tiny shapes, and check= on
the fused attention (outputs behind TMA descriptors) keeping a wrong config from winning."""

from __future__ import annotations

import importlib.util
import math
import sys
import warnings
from pathlib import Path

import pytest
import torch
import triton

from costtune.types import Config

PATH = Path(__file__).resolve().parents[1] / "experiments" / "device" / "safety_h200.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("safety_h200", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_plan_and_dry_run(script, capsys, tmp_path):
    assert script.main(["--dry-run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "gemm_top1" in out and "attention_Z4_H32_S4096_D128_causal1" in out
    assert "gemm_exhaustive" not in out
    ids = [r["id"] for r in script.plan(exhaustive=True)]
    assert ids[:3] == ["gemm_top1", "gemm_top4", "gemm_top8"] and ids[-1] == "gemm_exhaustive"
    log = tmp_path / "safety_h200.jsonl"  # what a rerun skips
    log.write_text('{"id": "gemm_top1"}\n')
    assert script.done_ids(log) == {"gemm_top1"}
    assert len(script.gemm_configs()) == 384
    assert any(c.kwargs["warp_specialize"] and c.num_stages >= 3
               for c in script.attention_configs())


def test_tutorial_matmul_is_correct(script):
    torch.manual_seed(0)
    a, b = torch.randn(64, 96).half(), torch.randn(96, 80).half()
    for config in (script.gemm_configs()[0], script.gemm_configs()[100]):
        kernel = triton.autotune([config], key=["M"])(script.matmul_kernel)
        assert script.rel_err(script.matmul(kernel, a, b), a.float() @ b.float()) < 1e-3


def attention_inputs(s=256, d=128):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, s, d, generator=gen).half() for _ in range(3)]


def attention_config(script, bm, bn, pre_hook=None):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "warp_specialize": False},
                         num_stages=2, num_warps=4,
                         pre_hook=pre_hook or script._host_descriptor_pre_hook)


@pytest.mark.parametrize("causal", [False, True])
def test_tutorial_attention_is_correct_and_block_m_below_block_n_is_not(script, causal):
    q, k, v = attention_inputs()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                           is_causal=causal)
    for bm, bn in ((64, 32), (128, 64), (64, 128)):
        kernel = triton.autotune([attention_config(script, bm, bn)], key=["N_CTX"])(
            script._attn_fwd)
        err = script.rel_err(script.attention(kernel, q, k, v, causal, 1 / math.sqrt(128)), ref)
        if causal and bm < bn:  # the off-band loop crosses the diagonal unmasked
            assert err > 0.1
        else:
            assert err < 2e-3


def test_check_keeps_the_wrong_attention_config_from_winning(script):
    """Causal, with BLOCK_M=64 < BLOCK_N=128 made the fastest: without check= it wins, with
    check= (outputs found behind the TMA descriptors) it is rejected and named."""
    current = {}

    def recording_hook(nargs):
        current["wrong"] = nargs["BLOCK_M"] < nargs["BLOCK_N"]
        script._host_descriptor_pre_hook(nargs)

    class Bench:
        def __init__(self):
            self.calls = 0

        def __call__(self, fn, quantiles=None):
            self.calls += 1
            fn()
            ms = 0.5 if current["wrong"] else 1.0 + self.calls
            return [ms, ms, ms]

    configs = [attention_config(script, bm, bn, recording_hook)
               for bm, bn in ((64, 128), (64, 64), (128, 64), (128, 128))]
    q, k, v = attention_inputs()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                           is_causal=True)
    results = {}
    for label, options in (("unchecked", {}), ("checked", {"check": True})):
        kernel = script.attention_tuner(configs, top_k=4, do_bench=Bench(), **options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            o = script.attention(kernel, q, k, v, True, 1 / math.sqrt(128))
        results[label] = (kernel, script.rel_err(o, ref), [str(w.message) for w in caught])
    kernel, err, _ = results["unchecked"]
    assert kernel.best_config is configs[0] and err > 0.1
    kernel, err, messages = results["checked"]
    wrong = Config.from_triton(configs[0]).key
    assert kernel.best_config is not configs[0] and err < 2e-3
    assert list(kernel.rejected) == [wrong]
    assert any("check= rejected" in m and wrong in m for m in messages)
    assert kernel.early_config_prune.last.knobs == {}  # warp_specialize is constant here
