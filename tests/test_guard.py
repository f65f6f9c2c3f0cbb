"""costtune.autotune never ends on a failing or wrong config, on CPU under Triton's interpreter:
a kept config that fails (a compile-time assertion, OutOfResources at launch) is replaced by the
next-ranked one, and check= keeps a config whose output is wrong from winning. A do_bench that
counts its calls shows what was benchmarked; times follow the benchmark order, so without the
guard the first config benchmarked would win."""

from __future__ import annotations

import itertools
import logging
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
import triton
import triton.language as tl
from helpers import masked_tile_matmul, ours
from triton.compiler.errors import CompileTimeAssertionFailure
from triton.runtime.errors import InterpreterError, OutOfResources

import costtune
from costtune.model.xgb import CostModel
from costtune.tune.decision import config_key
from costtune.tune.guard import check_spec
from costtune.types import Config, CosttuneWarning

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "h200"
TRAIN = ["gemm_M512_N512_K512_float16", "gemm_M1000_N1000_K1000_float16",
         "gemm_M1_N1000_K3001_float16", "gemm_M128_N256_K32768_float16",
         "gemm_M4_N11008_K4096_float16"]
PARAMS = {"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"}
CONFIGS = [triton.Config({"BM": 32, "BN": bn, "BK": bk}, num_warps=w, num_stages=2)
           for bn, bk, w in itertools.product((32, 64, 128), (32, 64), (4, 8))]


@pytest.fixture(scope="module")
def model() -> CostModel:
    df = costtune.load_dataset(DATASET, kernel="gemm")
    rows = df[df["workload"].isin(TRAIN)].reset_index(drop=True)
    return CostModel(n_estimators=20, max_depth=4, family="gemm").fit(rows)


class Bench:
    """do_bench that runs the launch once and reports the n-th call as taking n ms; the
    interpreter's static_assert failure is reported as the GPU compiler reports it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fn, quantiles=None):
        self.calls += 1
        try:
            fn()
        except InterpreterError as exc:
            if "static_assert" not in str(exc) and "Assertion" not in str(exc):
                raise
            raise CompileTimeAssertionFailure(None, None, str(exc)) from exc
        return [float(self.calls)] * 3


@triton.jit
def _matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
            BAD_BN: tl.constexpr):
    tl.static_assert(BN != BAD_BN)  # this tile width "does not compile"
    masked_tile_matmul(x, y, out, m, n, k, BM, BN, BK)


def matmul_tuner(model, bench, configs=CONFIGS, **options):
    return costtune.autotune(configs, key=["m", "n", "k"], model=model, family="gemm",
                             problem={"M": "m", "N": ("y", 1), "K": "k"}, params=PARAMS,
                             do_bench=bench, **options)(_matmul)


def run_matmul(tuner, bad_bn, m=16, n=128, k=256):
    x, y = (torch.randn(s).to(torch.float16) for s in ((m, k), (k, n)))
    out = torch.empty(m, n, dtype=torch.float32)
    tuner[lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))](
        x, y, out, m, n, k, BAD_BN=bad_bn)
    torch.testing.assert_close(out, x.float() @ y.float(), rtol=1e-3, atol=1e-3)
    return out


def ranked_configs(model, top_k):
    """The configs the pruner ranks first, as the tuner will see them."""
    pruner = costtune.prune_configs_by(model, top_k, family="gemm", params=PARAMS,
                                       problem={"M": "m", "N": ("y", 1), "K": "k"})
    pruner = pruner["early_config_prune"]
    y = torch.empty(256, 128, dtype=torch.float16)
    pruner(CONFIGS, {"x": torch.empty(16, 256, dtype=torch.float16), "y": y, "m": 16,
                     "k": 256})
    return [CONFIGS[i] for i in pruner.last.ranked]


def test_top1_that_fails_to_compile_is_replaced_by_the_next(model):
    ranked = ranked_configs(model, 1)
    bad = ranked[0].kwargs["BN"]  # every config of the top pick's tile width fails
    expected = next(c for c in ranked if c.kwargs["BN"] != bad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bench = Bench()
        tuner = matmul_tuner(model, bench, top_k=1)
        run_matmul(tuner, bad)
    assert tuner.best_config is expected and list(tuner.configs_timings) == [expected]
    failed = sum(c.kwargs["BN"] == bad for c in ranked[: ranked.index(expected)])
    assert bench.calls == failed + 1  # each failure replaced by the next-ranked, in order
    assert all("failed to compile" in why for why in tuner.rejected.values())
    assert len(tuner.rejected) == failed
    messages = [str(w.message) for w in caught if issubclass(w.category, CosttuneWarning)]
    assert any("replaced by the next-ranked" in m for m in messages), messages
    # Plain triton.autotune over every config tunes too (the failures time as inf): the pruned
    # tuner is never worse than that.
    exhaustive = triton.autotune(CONFIGS, key=["m", "n", "k"], do_bench=Bench())(_matmul)
    run_matmul(exhaustive, bad)
    assert exhaustive.best_config.kwargs["BN"] != bad


def test_k_runnable_configs_are_benchmarked(model):
    """top_k=4 where the top configs fail: four configs that run are timed, none that fail."""
    ranked = ranked_configs(model, 4)
    bad = ranked[0].kwargs["BN"]
    bench = Bench()
    tuner = matmul_tuner(model, bench, top_k=4)
    run_matmul(tuner, bad)
    timed = list(tuner.configs_timings)
    assert len(timed) == 4 and all(c.kwargs["BN"] != bad for c in timed)
    assert timed == [c for c in ranked if c.kwargs["BN"] != bad][:4]


def test_out_of_resources_at_launch_is_replaced(model):
    """A config that raises OutOfResources when launched (as one over the shared-memory limit
    does on the GPU) is replaced; when every config fails, Triton's own error surfaces, as
    with exhaustive tuning."""
    def too_big(nargs):
        raise OutOfResources(245760, 232448, "shared memory")

    configs = [triton.Config(dict(c.kwargs), num_warps=c.num_warps, num_stages=c.num_stages,
                             pre_hook=too_big if c.kwargs["BN"] == 128 else None)
               for c in CONFIGS]
    bench = Bench()
    tuner = matmul_tuner(model, bench, configs=configs, top_k=2)
    run_matmul(tuner, bad_bn=0)
    assert len(tuner.configs_timings) == 2
    assert all(c.kwargs["BN"] != 128 for c in tuner.configs_timings)
    hopeless = [triton.Config(dict(c.kwargs), num_warps=c.num_warps, num_stages=2,
                              pre_hook=too_big) for c in CONFIGS[:3]]
    tuner = matmul_tuner(model, Bench(), configs=hopeless, top_k=1)
    with pytest.raises(OutOfResources):
        run_matmul(tuner, bad_bn=0)


@triton.jit
def _scale(x, out, n, BLOCK: tl.constexpr, BUG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask) * 2.0
    if BUG == 1:
        v = v + 0.5  # a plausible but wrong result
    if BUG == 2:
        v = v * float("nan")
    tl.store(out + offs, v, mask=mask)


SCALE = [triton.Config({"BLOCK": 16, "BUG": 1}), triton.Config({"BLOCK": 32, "BUG": 0}),
         triton.Config({"BLOCK": 64, "BUG": 0}), triton.Config({"BLOCK": 128, "BUG": 0})]


def scale_tuner(configs, bench, **options):
    # No family fits this kernel: every config is kept (one warning), in the given order.
    return costtune.autotune(configs, key=["n"], do_bench=bench, **options)(_scale)


def run_scale(tuner, n=100):
    x = torch.randn(n)
    out = torch.empty_like(x)
    tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return x, out


def test_without_check_the_wrong_config_wins():
    tuner = scale_tuner(SCALE, Bench())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x, out = run_scale(tuner)
    assert tuner.best_config is SCALE[0] and not torch.allclose(out, 2 * x)


@pytest.mark.parametrize("check", [True, {"outputs": ["out"]},
                                   {"reference": lambda args: 2 * args["x"]},
                                   {"outputs": "out", "reference": lambda args: [2 * args["x"]],
                                    "rtol": 1e-6}])
def test_check_keeps_a_wrong_config_from_winning(check):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuner = scale_tuner(SCALE, Bench(), check=check)
        x, out = run_scale(tuner)
    assert tuner.best_config is SCALE[1] and torch.allclose(out, 2 * x)
    assert set(tuner.configs_timings) == set(SCALE[1:])
    wrong = Config.from_triton(SCALE[0]).key
    assert list(tuner.rejected) == [wrong] and "wrong output" in tuner.rejected[wrong]
    assert any("check= rejected 1 config" in m and wrong in m for m in ours(caught))


def test_a_split_vote_says_it_could_not_decide():
    """Two configs wrong alike and two right: no majority, no reference, so nothing can be
    rejected; the tuning says so (every time) and names the way out."""
    configs = [triton.Config({"BLOCK": 16, "BUG": 1}), triton.Config({"BLOCK": 32, "BUG": 1}),
               triton.Config({"BLOCK": 64, "BUG": 0}), triton.Config({"BLOCK": 128, "BUG": 0})]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuner = scale_tuner(configs, Bench(), check=True)
        run_scale(tuner)
        run_scale(tuner, n=200)
    said = [m for m in ours(caught) if "could not tell right outputs from wrong" in m]
    assert len(said) == 2 and "groups of 2, 2" in said[0] and "reference" in said[0]
    assert tuner.rejected == {}
    with warnings.catch_warnings(record=True) as caught:  # a reference decides
        warnings.simplefilter("always")
        tuner = scale_tuner(configs, Bench(), check={"reference": lambda a: 2 * a["x"]})
        x, out = run_scale(tuner)
    assert torch.allclose(out, 2 * x) and len(tuner.rejected) == 2
    assert not [m for m in ours(caught) if "could not tell" in m]


def test_a_split_vote_counts_only_the_configs_left_after_nan_is_rejected():
    configs = [triton.Config({"BLOCK": 16, "BUG": 2}),
               triton.Config({"BLOCK": 32, "BUG": 1}), triton.Config({"BLOCK": 64, "BUG": 1}),
               triton.Config({"BLOCK": 128, "BUG": 0}), triton.Config({"BLOCK": 256, "BUG": 0})]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuner = scale_tuner(configs, Bench(), check=True)
        run_scale(tuner)
    (said,) = [m for m in ours(caught) if "could not tell" in m]
    assert "the 4 configs left disagree, in groups of 2, 2" in said
    assert list(tuner.rejected) == ["BLOCK=16,BUG=2,num_warps=4,num_stages=3"]


@triton.jit
def _accumulate(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.atomic_add(out + offs, tl.load(x + offs, mask=mask) * 2.0, mask=mask)  # out zeroed first


def _zero_out(nargs):
    nargs["out"].zero_()


class _LastFastest:
    """do_bench: the n-th config benchmarked takes 10 - n ms (the last one wins)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fn, quantiles=None):
        self.calls += 1
        fn()
        return [10.0 - self.calls] * 3


def test_check_judges_configs_alike_but_for_their_pre_hook_apart():
    """The config that forgot its pre_hook (out not zeroed) is its own voter: out-voted and
    rejected, not taken for the one with the hook."""
    configs = [triton.Config({"BLOCK": b}, pre_hook=_zero_out) for b in (16, 32, 64)]
    configs.append(triton.Config({"BLOCK": 16}))
    tuner = costtune.autotune(configs, key=["n"], do_bench=_LastFastest(), check=True)(
        _accumulate)
    n, x = 100, torch.randn(100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            out = torch.full((n,), 7.0)
            tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    assert tuner.best_config.pre_hook is _zero_out and torch.allclose(out, 2 * x)
    assert len(tuner.rejected) == 1 and "pre_hook" not in next(iter(tuner.rejected))


def test_check_rejects_nan_without_a_majority():
    """Two configs, one NaN: no majority, but NaN where the other is finite cannot win."""
    configs = [triton.Config({"BLOCK": 16, "BUG": 2}), triton.Config({"BLOCK": 32, "BUG": 0})]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuner = scale_tuner(configs, Bench(), check=True)
        x, out = run_scale(tuner)
    assert tuner.best_config is configs[1] and torch.allclose(out, 2 * x)
    assert "NaN" in next(iter(tuner.rejected.values()))


def test_check_rejects_nan_even_when_most_configs_give_it():
    """NaN where another config is finite cannot win, also when the NaN configs outnumber
    the finite one (they agreed with each other and out-voted it)."""
    configs = [triton.Config({"BLOCK": 16, "BUG": 2}), triton.Config({"BLOCK": 32, "BUG": 2}),
               triton.Config({"BLOCK": 64, "BUG": 0})]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuner = scale_tuner(configs, Bench(), check=True)
        x, out = run_scale(tuner)
    assert tuner.best_config is configs[2] and torch.allclose(out, 2 * x)
    assert len(tuner.rejected) == 2 and all("NaN" in v for v in tuner.rejected.values())


@triton.jit
def _masked_lse(x, out, n, BLOCK: tl.constexpr, BUG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    v = tl.where(offs % 2 == 0, -float("inf"), v)  # masked entries: -inf, as they should be
    if BUG == 1:
        v = tl.where(v == -float("inf"), 0.0, v)  # finite, and wrong
    tl.store(out + offs, v, mask=offs < n)


def test_an_inf_the_majority_agrees_on_is_right():
    """-inf can be a right answer (a masked row's log-sum-exp): three configs agreeing on it
    out-vote the one finite, wrong config (NaN alone is wrong before any vote)."""
    configs = [triton.Config({"BLOCK": 16, "BUG": 1})] + [
        triton.Config({"BLOCK": b, "BUG": 0}) for b in (32, 64, 128)]
    tuner = costtune.autotune(configs, key=["n"], do_bench=Bench(), check=True)(_masked_lse)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = torch.randn(100)
        out = torch.empty_like(x)
        tuner[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, out, 100)
    assert tuner.best_config is not configs[0]
    assert list(tuner.rejected) == [Config.from_triton(configs[0]).key]


def test_a_reference_of_another_shape_is_an_error():
    for reference in (lambda args: args["x"][:10], lambda args: {"out": args["x"][:10]}):
        tuner = scale_tuner(SCALE, Bench(), check={"outputs": ["out"], "reference": reference})
        shapes = r"shape \(10,\).*\(100,\)"
        with warnings.catch_warnings(), pytest.raises(ValueError, match=shapes):
            warnings.simplefilter("ignore")
            run_scale(tuner)
    tuner = scale_tuner(SCALE, Bench(), check={"reference": lambda args: args["x"][:10]})
    with warnings.catch_warnings(), pytest.raises(ValueError, match="kernel's out has shape"):
        warnings.simplefilter("ignore")
        run_scale(tuner)


@triton.jit
def _add_one_in_place(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x + offs, tl.load(x + offs, mask=mask) + 1.0, mask=mask)


def test_check_restores_inputs_for_in_place_kernels():
    """Each check launch sees the call's inputs (the benchmark ran the kernel many times on
    them), so correct in-place configs agree; the user's tensor ends as one launch leaves it."""
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    tuner, x, before = tune_in_place(_add_one_in_place, configs, check=True)
    assert tuner.rejected == {} and torch.equal(x, before + 1)


def tune_in_place(kernel, configs, *, check):
    """Tune an in-place kernel of x with restore_value=["x"]: (tuner, x after, x before)."""
    tuner = costtune.autotune(configs, key=["n"], do_bench=Bench(), check=check,
                              restore_value=["x"])(kernel)
    x = torch.randn(100)
    before = x.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuner[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, 100)
    return tuner, x, before


@triton.jit
def _scale_in_place(x, n, BLOCK: tl.constexpr, BUG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask) * 2.0
    if BUG == 1:
        v = v + 0.5
    tl.store(x + offs, v, mask=mask)


@pytest.mark.parametrize("check", [True, {"reference": lambda args: 2 * args["x"]}])
def test_check_sees_in_place_outputs_that_restore_value_puts_back(check):
    """restore_value's post_hook puts x back after every launch: the check reads the outputs
    before it (it saw none, so a wrong in-place config, benchmarked fastest, won)."""
    configs = [triton.Config({"BLOCK": 16, "BUG": 1})] + [
        triton.Config({"BLOCK": b, "BUG": 0}) for b in (32, 64)]
    tuner, x, before = tune_in_place(_scale_in_place, configs, check=check)
    assert tuner.best_config is not configs[0] and torch.allclose(x, 2 * before)
    assert list(tuner.rejected) == [Config.from_triton(configs[0]).key]


def test_warnings_never_raise_into_the_call(caplog):
    """Under a filter that turns warnings into errors (python -W error), tuning still works:
    the fallbacks happen and the messages go to the costtune logger."""
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="costtune"):
        warnings.simplefilter("error")
        tuner = scale_tuner(SCALE, Bench(), check=True)
        x, out = run_scale(tuner)
    assert tuner.best_config is SCALE[1] and torch.allclose(out, 2 * x)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "cannot tell the kernel family" in logged and "check= rejected" in logged


def test_check_options_are_checked():
    assert check_spec(None) is None and check_spec(False) is None
    assert check_spec(True).outputs is None
    for bad, word in [({"output": ["c"]}, "unknown check key"), ({"rtol": -1}, "rtol"),
                      ({"outputs": []}, "argument names"), ({"reference": 3}, "callable"),
                      ("yes", "check must be")]:
        with pytest.raises(ValueError, match=word):
            check_spec(bad)
    tuner = scale_tuner(SCALE, Bench(), check={"outputs": ["nope"]})
    with warnings.catch_warnings(), pytest.raises(ValueError, match="not tensor arguments"):
        warnings.simplefilter("ignore")
        run_scale(tuner)


def test_decision_records_what_was_replaced(model):
    ranked = ranked_configs(model, 1)
    bad = ranked[0].kwargs["BN"]
    tuner = matmul_tuner(model, Bench(), top_k=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_matmul(tuner, bad)
    last = tuner.early_config_prune.last
    assert set(last.replaced) == set(tuner.rejected) and last.replaced
    assert pd.Series(list(last.replaced)).str.contains(f"BN={bad}").all()
    # kept: what was benchmarked and stood (the replacement), as under the plain hook.
    assert last.k == 1 and len(last.kept) == 1 and last.kept[0] not in last.replaced
    assert f"BN={bad}," not in last.kept[0]
    assert last.kept[0] == config_key(tuner.best_config)


@pytest.mark.gpu
def test_configs_that_do_not_fit_are_replaced_on_gpu():
    """On the GPU, with unaligned rows (K=4097: the floor claims a single A buffer): configs
    whose compile needs more shared memory than the GPU has are found by the parallel
    precompile (or at launch) and replaced; every kept config either ran or is named."""
    from costtune.kernels import gemm

    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 128, "SPLIT_K": 1},
                             num_warps=8, num_stages=s)
               for m, n, s in [(256, 256, 5), (256, 256, 4), (128, 256, 5), (128, 128, 3),
                               (64, 128, 3), (128, 64, 3)]]
    tuner = costtune.autotune(configs, key=["M", "N", "K"], top_k=6, family="gemm")(
        gemm._gemm_kernel)
    m, n, k = 4096, 4096, 4097
    x = gemm.make_inputs({"M": m, "N": n, "K": k}, "float16", device="cuda")
    c = torch.empty(m, n, dtype=torch.float16, device="cuda")
    a, b = x["a"], x["b"]
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]), 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuner[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), GROUP_M=8,
                    UPCAST_DOT=False)
    ran = {Config.from_triton(cf).key for cf in tuner.configs_timings}
    kept = set(tuner.early_config_prune.last.kept)
    assert ran and kept <= ran | set(tuner.rejected)
    assert tuner.best_config in tuner.configs_timings
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)


def test_bench_time_counts_the_benchmarks_costtune_ran():
    """Triton's bench_time (its autotuning log line, a harvest's bench_s) timed only the read-
    back of the times costtune had measured: ~0 s for a tuning that benchmarked for seconds."""
    import time

    class Slow(Bench):
        def __call__(self, fn, quantiles=None):
            time.sleep(0.05)
            return super().__call__(fn, quantiles)

    bench = Slow()
    tuner = scale_tuner(SCALE[1:], bench)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_scale(tuner)
    assert bench.calls == 3 and tuner.bench_time >= 0.15


@triton.jit
def _split_partials(x, ws, n, BLOCK: tl.constexpr, SPLITS: tl.constexpr):
    # One stage of a pipeline: each of SPLITS slices of the workspace gets x / SPLITS (a later
    # kernel would sum them); the slices past SPLITS are left as they were.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask) / SPLITS
    for s in tl.static_range(SPLITS):
        tl.store(ws + s * n + offs, v, mask=mask)


def test_check_does_not_count_nan_a_config_left_unwritten():
    """A workspace that starts as NaN and is written in part (fewer splits) is no NaN of
    that config's making: before, every config but the one writing every slice was rejected
    ("NaN where other configs have none") and the choice was forced."""
    configs = [triton.Config({"BLOCK": 32, "SPLITS": s}) for s in (1, 2, 4)]
    n = 64
    x = torch.randn(n)
    ws = torch.full((4 * n,), float("nan"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuner = costtune.autotune(configs, key=["n"], do_bench=Bench(), check=True)(
            _split_partials)
        tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, ws, n)
    assert tuner.rejected == {}
    assert any("could not tell right outputs from wrong" in m for m in ours(caught))
    # (NaN a config writes where the workspace held a number stays its own: the tests
    # above, whose outputs start uninitialised.)
