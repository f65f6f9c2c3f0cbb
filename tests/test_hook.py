"""The autotune pruning hook, on CPU: Triton's interpreter runs the kernels and a do_bench that
counts its calls shows what Triton benchmarked. Models are small XGBoost models trained here on
a few real H200 GEMM workloads (datasets/h200), so every test runs without a GPU."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import triton
import triton.language as tl
from helpers import Bench, launch_suite_gemm, launch_tile_matmul, masked_tile_matmul, ours

import costtune
from costtune.kernels import gemm, relative_error
from costtune.model.features import config_rows
from costtune.model.xgb import CostModel
from costtune.tune.decision import config_key
from costtune.tune.precompile import precompiler
from costtune.tune.pruner import keep_count
from costtune.types import Config

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "h200"
# Training sizes span M 1..1000, N 256..11008, K 512..32768: SHAPE is inside (with the hook's
# one-octave margin) and small enough for the interpreter.
TRAIN = ["gemm_M512_N512_K512_float16", "gemm_M1000_N1000_K1000_float16",
         "gemm_M1_N1000_K3001_float16", "gemm_M128_N256_K32768_float16",
         "gemm_M4_N11008_K4096_float16"]
SHAPE = {"M": 16, "N": 128, "K": 256}
SMALL = [triton.Config({"BLOCK_M": 32, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sk},
                       num_warps=4, num_stages=2)
         for bn, bk, sk in itertools.product((64, 128), (64, 128), (1, 2))]


@pytest.fixture(scope="module")
def train_rows() -> pd.DataFrame:
    df = costtune.load_dataset(DATASET, kernel="gemm")
    return df[df["workload"].isin(TRAIN)].reset_index(drop=True)


@pytest.fixture(scope="module")
def model(train_rows) -> CostModel:
    return CostModel(n_estimators=20, max_depth=4, family="gemm").fit(train_rows)


@pytest.fixture(scope="module")
def model_path(model, tmp_path_factory) -> Path:
    return model.save(tmp_path_factory.mktemp("models") / "gemm_small")


def gemm_tuner(configs, bench, **prune_options):
    prune = costtune.prune_configs_by(**prune_options)
    tuner = triton.autotune(configs, key=["M", "N", "K"], prune_configs_by=prune,
                            reset_to_zero=["c_ptr"], do_bench=bench)(gemm._gemm_kernel)
    return tuner, prune["early_config_prune"]


def run_gemm(tuner, shape):
    """costtune's GEMM kernel through the tuner, into a zeroed fp32 C (split-K adds into it)."""
    x = gemm.make_inputs(shape, "float16")
    a, b = x["a"], x["b"]
    m, n, k = shape["M"], shape["N"], shape["K"]
    c = torch.zeros(m, n, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),
                         meta["SPLIT_K"])
    tuner[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), GROUP_M=8,
                UPCAST_DOT=False)
    assert relative_error(c, gemm.reference(x)) < 1e-3
    return c


def test_benchmarks_only_the_models_top_k(model, record):
    configs = gemm.config_space(SHAPE).to_triton()
    bench = Bench()
    tuner, pruner = gemm_tuner(configs, bench, model=model, top_k=3, family="gemm")
    run_gemm(tuner, SHAPE)
    assert bench.calls == 3 and len(tuner.configs_timings) == 3
    expected = [c.key for c in model.top_k("gemm", SHAPE, "float16", configs, 3)]
    assert pruner.last.kept == expected
    assert Config.from_triton(tuner.best_config).key in expected
    # a second shape is a new tuning key: pruned again, still 3 benchmarks
    run_gemm(tuner, {"M": 32, "N": 256, "K": 512})
    assert bench.calls == 6 and pruner.last.problem == {"M": 32, "N": 256, "K": 512}
    assert ours(record) == []


@pytest.mark.parametrize("top_k, kept", [(0, 1), (0.01, 1), (0.5, 4), (1.0, 8), (50, 8)])
def test_never_empty_and_fractions(model, top_k, kept):
    pruner = costtune.prune_configs_by(model, top_k, family="gemm")["early_config_prune"]
    assert len(pruner(SMALL, {**SHAPE, "a": torch.empty(1, dtype=torch.float16)})) == kept


def test_top_k_zero_benchmarks_one(model):
    bench = Bench()
    tuner, _ = gemm_tuner(SMALL, bench, model=model, top_k=0)
    run_gemm(tuner, SHAPE)
    assert bench.calls == 1
    assert keep_count(0.0, 3) == 1 and keep_count(0.34, 3) == 2


def test_ties_broken_by_config_values(model):
    # GROUP_SIZE_M means nothing to the GEMM model: these configs score exactly alike, and
    # are kept by their values (numbers ascending, not as text: 2 before 16) in any list order.
    tied = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_SIZE_M": g})
            for g in (16, 1, 32, 2, 4, 8)]
    args = {**SHAPE, "a": torch.empty(1, dtype=torch.float16)}
    pruner = costtune.prune_configs_by(model, 3, family="gemm")["early_config_prune"]
    first = [c.kwargs["GROUP_SIZE_M"] for c in pruner(tied, args)]
    again = [c.kwargs["GROUP_SIZE_M"] for c in pruner(tied[::-1], args)]
    assert first == again == [1, 2, 4]


@pytest.mark.parametrize("case", ["missing_model", "other_gpu", "out_of_range",
                                  "unknown_family"])
def test_fallbacks_warn_once_and_keep_tuning(case, model, model_path, tmp_path, monkeypatch,
                                             record):
    options = {"model": model_path, "top_k": 1, "family": "gemm"}
    shapes = [SHAPE, {"M": 32, "N": 256, "K": 512}]
    expect = 4  # widen=4 x top_k=1
    if case == "missing_model":
        options["model"], expect = tmp_path / "absent", len(SMALL)
    elif case == "other_gpu":
        monkeypatch.setattr("costtune.tune.ranking.current_gpu", lambda: "NVIDIA A100-SXM4-80GB")
    elif case == "out_of_range":
        shapes = [{"M": 16, "N": 32, "K": 32}, {"M": 16, "N": 16, "K": 64}]
    else:
        # Read as gemm (the kernel's name), a kind the gemm model has not seen: widened (#17)
        options["family"] = "conv"
    bench = Bench()
    tuner, pruner = gemm_tuner(SMALL, bench, **options)
    for shape in shapes:
        run_gemm(tuner, shape)
    assert bench.calls == 2 * expect
    messages = ours(record)
    assert len(messages) == 1, messages
    word = {"missing_model": "no usable cost model", "other_gpu": "NVIDIA A100",
            "out_of_range": "outside the trained range", "unknown_family": "'conv'"}[case]
    assert word in messages[0] and f"benchmarking {expect} of 8" in messages[0]


@pytest.mark.parametrize("case, kept, word", [
    ("triton", 4, "triton 3.0.0"), ("schema", 8, "feature schema"),
    ("dtype", 4, "no float32"), ("grid", 4, "launch grid"), ("compiled", 4, "two_stage"),
    ("grid_unchecked", 4, "could not be evaluated")])
def test_model_doubts_widen_or_keep_all(case, kept, word, model, train_rows, record):
    """More reasons not to trust the ranking, checked on direct hook calls."""
    import copy

    args = {**SHAPE, "a": torch.empty(1, dtype=torch.float16)}
    kwargs = {}
    if case == "compiled":
        model = CostModel(features="static+compiled", family="gemm", n_estimators=5).fit(
            train_rows, compiled=fake_compiled(train_rows))
    else:
        model = copy.deepcopy(model)
    if case == "triton":
        model.triton_version_ = "3.0.0"
    elif case == "schema":  # a feature this code no longer computes
        model.feature_names_ = [*model.feature_names_[:-1], "retired_feature"]
    elif case == "dtype":
        args["a"] = torch.empty(1, dtype=torch.float32)
    elif case == "grid":
        kwargs["grid"] = (132,)  # a persistent kernel: not the family's tiling
    elif case == "grid_unchecked":  # a grid that needs what the call does not pass
        kwargs["grid"] = lambda meta: (meta["NOT_AN_ARG"],)
    pruner = costtune.prune_configs_by(model, 1, family="gemm")["early_config_prune"]
    assert len(pruner(SMALL, args, **kwargs)) == kept
    assert len(pruner(SMALL, args, **kwargs)) == kept
    messages = ours(record)
    assert len(messages) == 1 and word in messages[0], messages


@triton.jit
def _tiny_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    masked_tile_matmul(x, y, out, m, n, k, BM, BN, BK)


USER = [triton.Config({"BM": 32, "BN": bn, "BK": bk}, num_warps=w, num_stages=2)
        for bn, bk, w in itertools.product((32, 64, 128), (32, 64), (4, 8))]
USER_PARAMS = {"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"}


def tiny_matmul_tuner(model_path, bench, **options):
    return costtune.autotune(USER, key=["m", "n", "k"], top_k=2, model=model_path,
                             family="gemm", problem={"M": "m", "N": ("y", 1), "K": "k"},
                             params=USER_PARAMS, do_bench=bench, **options)(_tiny_matmul)


def run_tiny_matmul(tuner, m, n, k):
    x, y = (torch.randn(s, dtype=torch.float32).to(torch.float16) for s in ((m, k), (k, n)))
    out = torch.empty(m, n, dtype=torch.float32)
    tuner[lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))](
        x, y, out, m, n, k)
    assert relative_error(out, x.float() @ y.float()) < 1e-3


def test_user_kernel_with_mapping_and_neutral_split_k(model, model_path, record):
    bench = Bench()
    tuner = tiny_matmul_tuner(model_path, bench)
    run_tiny_matmul(tuner, 16, 128, 256)
    pruner = tuner.early_config_prune
    assert bench.calls == 2 and ours(record) == []
    assert pruner.last.family == "gemm" and pruner.last.problem == SHAPE
    assert pruner.last.precompiled is None  # the interpreter compiles nothing
    # Scored exactly as the family's configs with the neutral SPLIT_K=1
    as_family = [Config({"BLOCK_M": c.kwargs["BM"], "BLOCK_N": c.kwargs["BN"],
                         "BLOCK_K": c.kwargs["BK"], "SPLIT_K": 1}, num_warps=c.num_warps,
                        num_stages=c.num_stages) for c in USER]
    expected = model.predict(config_rows("gemm", SHAPE, "float16", as_family))
    np.testing.assert_allclose(pruner.last.scores, expected, rtol=1e-6)
    best = [USER[as_family.index(c)] for c in model.top_k("gemm", SHAPE, "float16",
                                                           as_family, 2)]
    assert tuner.best_config in best


def test_precompile_compiles_survivors_in_threads(model_path, monkeypatch):
    """The GPU-only precompile, against a stand-in kernel: each survivor is warmed up with the
    benchmark's own launch (every positional arg in order, the call's kwargs, the config's,
    warmup=True), its compile goes to Triton's AsyncCompileMode thread pool, a failing compile
    is left to the benchmark loop, and costtune.autotune wires it in."""
    import threading

    from triton.runtime._async_compile import active_mode

    from costtune.tune.precompile import precompile

    calls, compiled_in = [], []

    class Kernel:  # what tuner.fn.run does with warmup=True under AsyncCompileMode
        def run(self, *args, warmup, **kw):
            calls.append((args, warmup, kw))

            def compile_():
                compiled_in.append(threading.current_thread().name)
                if kw["BM"] == 64:
                    raise RuntimeError("ptxas failed")
                return f"kernel BM={kw['BM']}"

            return active_mode.get().submit(("k", kw["BM"]), compile_, lambda kernel: None)

    class Tuner:
        fn = Kernel()

    monkeypatch.setattr("costtune.tune.precompile.can_precompile", lambda: True)
    monkeypatch.setattr("costtune.tune.precompile._compiles_directly", lambda tuner: True)
    configs = [triton.Config({"BM": bm, "BN": 32}, num_warps=4, num_stages=2)
               for bm in (16, 32, 64)]
    named = {"x": "tensor x", "m": 16}
    out = precompile(Tuner(), configs, named_args=named, kwargs={"grid": "g", "warmup": False},
                     threads=2)
    assert out == (2, 3)  # the failing compile is not counted and raises nothing
    assert [c[0] for c in calls] == [("tensor x", 16)] * 3 and all(c[1] for c in calls)
    assert [c[2] for c in calls] == [{"grid": "g", **c.all_kwargs()} for c in configs]
    assert len(compiled_in) == 3 and all(n.startswith("costtune-compile") for n in compiled_in)
    assert precompile(Tuner(), configs[:1], named_args=named, kwargs={}) is None  # one config
    # A config with a pre_hook is compiled with the arguments its hook sets (the hook sees
    # the config's values); one whose hook raises is left to the benchmark loop.
    calls.clear()

    def hook(nargs):
        nargs["m"] = nargs["BM"] * 2

    def broken(nargs):
        raise KeyError("desc")

    hooked = [configs[0], triton.Config({"BM": 32, "BN": 32}, pre_hook=hook),
              triton.Config({"BM": 16, "BN": 64}, pre_hook=broken)]
    assert precompile(Tuner(), hooked, named_args=named, kwargs={}) == (2, 3)
    assert [c[0] for c in calls] == [("tensor x", 16), ("tensor x", 64)]
    # Finishing the mode raises (a post-compile hook): the mode does not stay active, or
    # every later compile in this thread would go to a closed pool.
    class Failing(Kernel):
        def run(self, *args, warmup, **kw):
            return active_mode.get().submit(("f", kw["BM"]), lambda: "kernel",
                                            lambda kernel: 1 / 0)

    class FailingTuner:
        fn = Failing()

    with pytest.raises(ZeroDivisionError):
        precompile(FailingTuner(), configs, named_args=named, kwargs={})
    assert active_mode.get() is None
    with pytest.raises(ValueError, match="precompile"):
        tiny_matmul_tuner(model_path, Bench(), precompile=0)
    # Only a JIT function (maybe under heuristics) is warmed up: a nested autotuner would
    # benchmark its own configs.
    from types import SimpleNamespace

    from triton.runtime.autotuner import Heuristics
    from triton.runtime.jit import JITFunction

    jit = JITFunction(_row_add.fn if hasattr(_row_add, "fn") else _row_add)
    monkeypatch.undo()
    from costtune.tune.precompile import _compiles_directly

    assert _compiles_directly(SimpleNamespace(fn=jit))
    assert _compiles_directly(SimpleNamespace(fn=Heuristics(jit, jit.arg_names,
                                                            {"BLOCK": lambda a: 16})))
    assert not _compiles_directly(SimpleNamespace(fn=SimpleNamespace(fn=jit)))
    monkeypatch.setattr("costtune.tune.precompile.can_precompile", lambda: True)
    # costtune.autotune starts it after pruning, with the survivors and the call's
    # arguments, and benchmarks each config as its compile finishes (here: the second first)
    seen, benched = [], []
    from costtune.tune.precompile import Batch

    class Done:
        def shutdown(self, wait=True):
            pass

    class Reversed(Batch):
        def __iter__(self):
            for i in reversed(range(len(self.kernels))):
                self.compiled += 1
                yield i, "ok"

    def start_batch(tuner, kept, **kw):
        seen.append((tuner, kept, kw))
        return Reversed(list(kept), Done(), 0.25)

    monkeypatch.setattr("costtune.tune.precompile.start_batch", start_batch)
    from triton.runtime.autotuner import Autotuner

    plain = Autotuner._bench
    monkeypatch.setattr(Autotuner, "_bench", lambda self, *a, config, **kw: benched.append(
        config) or plain(self, *a, config=config, **kw))
    tuner = tiny_matmul_tuner(model_path, Bench(), precompile=3)
    run_tiny_matmul(tuner, 16, 128, 256)
    last = tuner.early_config_prune.last
    assert last.precompiled == (2, 2) and last.precompile_ms == 250
    assert benched == list(reversed(seen[0][1]))
    (got, kept, kw), = seen
    assert got is tuner and kw["threads"] == 3 and kw["mode"] == "threads"
    assert list(kw["named_args"]) == tuner.arg_names[:6]
    assert set(kept) == set(tuner.configs_timings)


@triton.jit
def _row_add(x, y, out, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    offs = tl.program_id(0) * n_cols + cols
    mask = cols < n_cols
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@pytest.mark.parametrize("options, word", [
    ({}, "cannot tell the kernel family"),
    ({"family": "softmax", "params": {"BLOCK": "BLOCK_N"},
      "problem": {"rows": ("x", 0), "cols": "n_cols"}}, "not softmax"),
])
def test_unknown_kernel_keeps_all_configs(model, options, word, record):
    configs = [triton.Config({"BLOCK": b}) for b in (128, 256, 512)]
    bench = Bench()
    tuner = costtune.autotune(configs, key=["n_cols"], top_k=1, model=model, do_bench=bench,
                              **options)(_row_add)
    x, y = torch.randn(4, 100), torch.randn(4, 100)
    for _ in range(2):
        out = torch.empty_like(x)
        tuner[(4,)](x, y, out, 100)
        assert torch.equal(out, x + y)
    assert bench.calls == 3  # the second call hits Triton's tuning cache
    messages = ours(record)
    assert len(messages) == 1 and word in messages[0]


def test_two_stage_needs_compiled_features(model, record):
    pruner = costtune.prune_configs_by(model, 2, family="gemm", two_stage=True)[
        "early_config_prune"]
    args = {**SHAPE, "a": torch.empty(1, dtype=torch.float16)}
    assert len(pruner(SMALL, args)) == 2 and len(pruner(SMALL, args)) == 2
    assert not pruner.last.stage2
    messages = ours(record)
    assert len(messages) == 1 and "compiled features" in messages[0]


def fake_compiled(rows: pd.DataFrame, ir: bool = False, **_) -> pd.DataFrame:
    """Stand-in for the AOT compile (tens of seconds here): registers grow with the tile,
    and BLOCK_N=64 with BLOCK_K=64 'fails' to compile; ``ir``: with the IR counts too, as the
    hook asks for them (``fake_ir``'s)."""
    from costtune.features.compiled import COMPILED_FEATURES

    keys = rows.drop_duplicates(["workload", "config"]).reset_index(drop=True)
    table = pd.DataFrame(0.0, index=keys.index, columns=COMPILED_FEATURES)
    table["n_regs"] = keys["BLOCK_M"] * keys["BLOCK_N"] / keys["num_warps"]
    if ir:
        counts = fake_ir(rows)
        table = pd.concat([table, counts.drop(columns=["workload", "config", "ir_status"])],
                          axis=1).assign(ir_ok=1.0)
    bad = (keys["BLOCK_N"] == 64) & (keys["BLOCK_K"] == 64)
    table.insert(0, "compile_status", np.where(bad, "out_of_resources", "ok"))
    table.insert(0, "config", keys["config"])
    table.insert(0, "workload", keys["workload"])
    return table


def fake_ir(rows: pd.DataFrame) -> pd.DataFrame:
    """Stand-in for the IR compile: one dot, and shared buffers that grow with the tile."""
    from costtune.build.ir import IR_FEATURES

    keys = rows.drop_duplicates(["workload", "config"]).reset_index(drop=True)
    table = pd.DataFrame(0.0, index=keys.index, columns=IR_FEATURES)
    table["ir_dot"] = 1.0
    table["ttgir_local_alloc_bytes"] = (keys["BLOCK_M"] + keys["BLOCK_N"]) * keys["BLOCK_K"] * 2
    table.insert(0, "ir_status", "ok")
    table.insert(0, "config", keys["config"])
    table.insert(0, "workload", keys["workload"])
    return table


def test_two_stage_reranks_the_shortlist(train_rows, monkeypatch, record):
    compiled = CostModel(features="static+compiled", family="gemm", n_estimators=10,
                         max_depth=3).fit(train_rows, compiled=fake_compiled(train_rows))
    calls = []
    monkeypatch.setattr("costtune.features.compiled.compiled_features",
                        lambda rows, **kw: calls.append(len(rows)) or fake_compiled(rows))
    pruner = costtune.prune_configs_by(compiled, 2, family="gemm", two_stage=True,
                                       shortlist=8)["early_config_prune"]
    args = {**SHAPE, "a": torch.empty(1, dtype=torch.float16)}
    kept = pruner(SMALL, args)
    assert pruner.last.stage2 and calls == [8] and ours(record) == []
    assert all(not (c.kwargs["BLOCK_N"] == 64 and c.kwargs["BLOCK_K"] == 64) for c in kept)
    pruner(SMALL, args)
    assert calls == [8]  # compiled features are remembered


def test_harvest_writes_rows_that_load_back(model, model_path, tmp_path):
    from triton.runtime.autotuner import Autotuner

    original = Autotuner.run
    store = tmp_path / "harvest"
    with costtune.harvest(store) as h:
        run_tiny_matmul(tiny_matmul_tuner(model_path, Bench()), 16, 128, 256)
        run_tiny_matmul(tiny_matmul_tuner(model_path, Bench()), 16, 128, 256)  # stored once
        tuner, _ = gemm_tuner(SMALL, Bench(), model=model, top_k=2)
        run_gemm(tuner, SHAPE)
    assert Autotuner.run is original and h.rows == 4 and h.errors == []
    df = costtune.load_dataset(store)
    assert set(df["kernel"]) == {"_tiny_matmul", "gemm"} and (df["status"] == "ok").all()
    assert (df["time_ms"] > 0).all() and set(df["family"]) == {"gemm"}
    user = df[df["kernel"] == "_tiny_matmul"]
    assert (user[["M", "N", "K"]].to_numpy() == [16, 128, 256]).all()
    assert (user["SPLIT_K"] == 1).all() and user["BLOCK_N"].notna().all()
    assert costtune.Store(store).part_meta(costtune.Store(store).parts("gemm")[0])["gpu"]


def test_options_are_checked():
    with pytest.raises(ValueError, match="unknown option"):
        costtune.autotune(SMALL, ["M"], bogus=1)
    with pytest.raises(ValueError, match="gemm sizes"):
        costtune.prune_configs_by(family="gemm", problem={"X": "m"})
    with pytest.raises(ValueError, match="gemm parameters"):
        costtune.prune_configs_by(family="gemm", params={"BM": "BLOCK_Q"})
    with pytest.raises(ValueError, match="top_k"):
        costtune.prune_configs_by(top_k=-1)
    with pytest.raises(ValueError, match="top_k above 1 must be a whole count"):
        costtune.autotune(SMALL, ["M"], top_k=2.5)
    assert costtune.prune_configs_by(top_k=3.0)  # a whole float is a count
    # dtype: a torch dtype or its name (aliases too), checked when decorating.
    for given in (torch.float16, "float16", "half", "fp16", "torch.float16"):
        hook = costtune.prune_configs_by(dtype=given)["early_config_prune"]
        assert hook.spec.dtype == "float16", given
    for bad in ("fp17", 16, ""):
        with pytest.raises(ValueError, match="dtype must be a torch dtype or its name"):
            costtune.autotune(SMALL, ["M"], dtype=bad)


def test_bench_choice_sets_tritons_do_bench(model):
    from costtune.measure.bench import graph_bench

    def kernel_of(**options):
        return costtune.autotune(SMALL, ["M", "N", "K"], model=model, **options)(
            gemm._gemm_kernel)

    assert kernel_of()._do_bench is graph_bench  # the dataset's timing by default
    assert costtune.graph_bench is graph_bench  # for plain triton.autotune(do_bench=...)
    assert kernel_of(bench="triton")._do_bench is None  # Triton's own benchmarker
    mine = Bench()
    assert kernel_of(do_bench=mine)._do_bench is mine
    assert kernel_of(bench="graph", do_bench=mine)._do_bench is mine
    with pytest.warns(DeprecationWarning):  # Triton's old timing arguments: Triton's timing
        assert kernel_of(warmup=5, rep=20)._do_bench is not graph_bench
    with pytest.raises(ValueError, match="unknown bench 'fast'"):
        kernel_of(bench="fast")


def test_graph_bench_summaries_and_cpu_fallback(monkeypatch):
    import triton.runtime

    from costtune.measure.bench import HOST_REPS, graph_bench, summarize

    assert summarize([5.0, 1.0, 3.0, 2.0, 4.0], (0.5, 0.2, 0.8)) == pytest.approx([3, 1.8, 4.2])
    assert summarize([2.0, 1.0, 9.0], None) == 2.0
    with pytest.raises(ValueError, match="no times"):
        summarize([], None)
    runs = []
    # Triton's interpreter on CPU has no active driver to time with (no GPU): the host clock
    # times a warm-up and HOST_REPS runs.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(triton.runtime.driver, "_active", None)
    got = graph_bench(lambda: runs.append(1), quantiles=(0.5, 0.2, 0.8))
    assert len(got) == 3 and all(t >= 0 for t in got) and got[1] <= got[0] <= got[2]
    assert len(runs) == 1 + HOST_REPS and graph_bench(lambda: None) >= 0


@pytest.mark.gpu
def test_graph_bench_agrees_with_triton_on_gpu():
    """The dataset's timing and Triton's do_bench time one GEMM alike (within 2x: Triton's
    includes launch overhead, ours not), and the quantiles come in order."""
    from costtune.measure.bench import graph_bench

    x = gemm.make_inputs({"M": 2048, "N": 2048, "K": 2048}, "float16", device="cuda")
    fn = lambda: x["a"] @ x["b"]  # noqa: E731
    med, p20, p80 = graph_bench(fn, quantiles=(0.5, 0.2, 0.8))
    theirs = triton.testing.do_bench(fn, quantiles=(0.5,))
    theirs = theirs[0] if isinstance(theirs, list) else theirs
    assert 0 < p20 <= med <= p80 and 0.5 < theirs / med < 2.0


@pytest.mark.gpu
def test_two_stage_and_precompile_on_gpu(train_rows, tmp_path):
    """On the GPU: real AOT compiled features of the shortlist and the parallel precompile of
    the survivors (the model itself learns from stand-in compiled features)."""
    compiled = CostModel(features="static+compiled", family="gemm", n_estimators=10).fit(
        train_rows, compiled=fake_compiled(train_rows))
    # Made on this GPU: on another than the rows' H200 the hook would benchmark every config
    # (the "gpu" concern) and stage 2 would have nothing to order.
    compiled.gpu_ = torch.cuda.get_device_name()
    tuner = costtune.autotune(SMALL, ["M", "N", "K"], top_k=2, model=compiled, two_stage=True,
                              shortlist=4, cache_dir=tmp_path, reset_to_zero=["c_ptr"],
                              precompile=2)(
        gemm._gemm_kernel)
    launch_suite_gemm(tuner, 512, 512, 512)
    last = tuner.early_config_prune.last
    assert last.stage2 and last.precompiled == (2, 2) and last.fallbacks == []


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["processes", "threads"])
def test_precompile_executors_on_gpu(mode, tmp_path, monkeypatch):
    """On the GPU, both executors precompile every kept config before the benchmark loop;
    with processes this process compiles nothing itself (every compile here is a hit in
    Triton's disk cache, filled by the forked children), and the tuned GEMM is right."""
    from triton import knobs

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    hits = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda **kw: hits.append(kw["cache_hit"]))
    from triton.runtime.jit import JITFunction

    fresh = JITFunction(gemm._gemm_kernel.fn)  # an empty in-memory cache: every config compiles
    tuner = costtune.autotune(SMALL, ["M", "N", "K"], top_k=3, family="gemm",
                              reset_to_zero=["c_ptr"], precompile=mode)(fresh)
    launch_suite_gemm(tuner, 384, 640, 512)
    last = tuner.early_config_prune.last
    assert last.precompiled == (last.k, last.k) and last.k >= 2
    assert len(hits) >= last.k and all(hits) == (mode == "processes")


def test_prune_vs_exhaustive_plans_on_cpu(capsys, tmp_path):
    """The GPU experiment's argument parsing, plan and resume log (its runs need the H200)."""
    import importlib
    import json
    import sys
    from dataclasses import asdict

    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    plan = importlib.import_module("experiments.prune_vs_exhaustive.plan")
    tuning = importlib.import_module("experiments.prune_vs_exhaustive.tuning")
    assert plan.main(["--budget-s", "120", "--ks", "1,8"]) == 0
    out = capsys.readouterr().out
    assert "plan:" in out and "exhaustive" in out and "over the time budget" in out
    runs, _ = plan.plan(["gemm"], 1, ks=[8], methods=["exhaustive", "costtune", "tutorial"],
                        two_stage_ok=False, cores=16)
    assert [r.label for r in runs] == ["exhaustive", "costtune k=8", "tutorial"]
    assert runs[0].n_space == len(gemm.config_space(plan.SHAPES["gemm"][0]))
    both, _ = plan.plan(["gemm", "softmax"], 1, ks=[8], methods=["exhaustive", "costtune"],
                        two_stage_ok=False, cores=16)  # every family's reference first
    assert [(r.method, r.family) for r in both] == [
        ("exhaustive", "gemm"), ("exhaustive", "softmax"), ("costtune", "gemm"),
        ("costtune", "softmax")]
    log = tmp_path / "runs.jsonl"  # what --resume reads back
    log.write_text("".join(json.dumps({"run": asdict(r), "result": {"status": "ok"}}) + "\n"
                           for r in both[:2]))
    assert [(r, res["status"]) for r, res in plan.load_log(log)] == [
        (both[0], "ok"), (both[1], "ok")]
    assert len({plan.run_id(r) for r in both}) == 4
    with pytest.raises(SystemExit):
        plan.main(["--families", "conv"])

    # One run's tuning, on CPU tensors under the interpreter: the kernel is decorated before
    # any input exists, then tuned through the family's launch; it benchmarks k configs
    # (exhaustive: all of them).
    for family, problem in (("softmax", {"rows": 64, "cols": 1024}),
                            ("gemm", {"M": 16, "N": 128, "K": 256})):
        fam = costtune.get_family(family)
        survivors = None
        for method, k in (("costtune", 2), ("exhaustive", None)):
            run = plan.Run(family, problem, method, k, 0, 0.0)
            # exhaustive over costtune's survivors only: the interpreter is slow
            configs = survivors or tuning.method_configs(fam, run)
            bench = Bench()
            tuner = tuning.make_tuner(tuning.kernel_fn(fam, run, configs), configs=configs,
                                      run=run, do_bench=bench, options={})
            inputs = fam.make_inputs(problem, "float16")
            tuning.tuned_launch(fam, inputs, tuner, configs=configs, run=run)()
            assert bench.calls == (k or len(configs)) and tuner.best_config in configs
            if method == "costtune":
                assert tuner.early_config_prune.last.fallbacks == []
                survivors = list(tuner.configs_timings)


def test_shipped_set_serves_each_family_and_has_a_stage2(train_rows, monkeypatch, record):
    """The shipped `h200` resolves per family like `costtune eval` scores it, and two_stage
    without a stage2_model uses the shipped compiled-feature sibling `h200_compiled` (or the
    family's own `h200_compiled_<family>`) of the kind loio chose (stage2_h200.json)."""
    import json

    models_dir = Path(costtune.__file__).parent / "models"
    chosen = json.loads((models_dir / "stage2_h200.json").read_text())["families"]
    for family in ("gemm", "softmax", "attention"):
        model, note = CostModel.load_for("h200", family)
        # The shipped softmax model reads the kernel's source too (issue 18).
        expect = "static+src" if family == "softmax" else "static"
        assert note is None and family in model.families_ and model.features == expect
        own = (models_dir / f"h200_{family}.json").exists()
        assert model.family == (family if own else "all")
        stage2, _ = CostModel.load_for("h200_compiled", family)
        features, scope = chosen[family]["stage2"].split("/")
        assert stage2.features == features and family in stage2.families_
        assert stage2.family == ("all" if scope == "all" else family)
    monkeypatch.setattr("costtune.features.compiled.compiled_features",
                        lambda rows, **kw: fake_compiled(rows))
    pruner = costtune.prune_configs_by("h200", 2, family="gemm", two_stage=True,
                                       shortlist=8)["early_config_prune"]
    args = {**SHAPE, "a": torch.empty(1, dtype=torch.float16)}
    assert len(pruner(SMALL, args)) == 2 and pruner.last.stage2 and ours(record) == []


def test_load_for_a_path_and_a_missing_name(model, model_path):
    loaded, note = CostModel.load_for(model_path, "softmax")  # a path loads as is
    assert note is None and loaded.family == "gemm"
    with pytest.raises(FileNotFoundError, match="no shipped model named 'nosuch'"):
        CostModel.load_for("nosuch", "gemm")


def test_preload_loads_the_model_before_the_first_call(model, monkeypatch, tmp_path):
    """Decorating starts loading the model in a background thread; the first tuning call then
    finds it in memory (one load in all). preload=False and in-memory models start nothing;
    a model that cannot load is left for the call, which warns as before."""
    import threading

    from costtune.model import registry
    from costtune.model.compact import CompactModel
    from costtune.model.xgb import CostModel
    from costtune.tune import preload as hook_preload

    path = str(model.save(tmp_path / "preloaded"))  # no other test has loaded this path
    loads = []
    real = CostModel.load_for.__func__
    real_compact = CompactModel.load_for.__func__  # the hook's loader (the model has a forest)

    def counted(cls, name, family):
        loads.append((str(name), family, threading.current_thread().name))
        return (real_compact if cls is CompactModel else real)(cls, name, family)

    def join_preloads():
        for thread in threading.enumerate():
            if thread.name == "costtune-preload":
                thread.join(timeout=120)

    monkeypatch.setattr(CostModel, "load_for", classmethod(counted))
    monkeypatch.setattr(CompactModel, "load_for", classmethod(counted))
    tuner = tiny_matmul_tuner(path, Bench())
    join_preloads()
    assert registry.is_loaded(path, "gemm")
    run_tiny_matmul(tuner, 16, 128, 256)
    assert tuner.early_config_prune.last.k == 2  # pruned with the preloaded model
    # (loads of other paths: other tests' preloads may still be finishing)
    assert [ld for ld in loads if ld[0] == path] == [(path, "gemm", "costtune-preload")]
    # Nothing to do: the same model again, a model object; preload=False starts no thread.
    assert hook_preload.preload(path, "gemm") is None
    assert hook_preload.preload(CostModel(), "gemm") is None
    import multiprocessing

    with monkeypatch.context() as m:  # a worker process that imports the kernel's module
        m.setattr(multiprocessing, "parent_process", lambda: object())
        assert hook_preload.preload(str(tmp_path / "in_a_worker"), "gemm") is None
    other = str(model.save(tmp_path / "not_preloaded"))
    costtune.prune_configs_by(other, family="gemm", preload=False)
    join_preloads()
    assert not registry.is_loaded(other, "gemm")
    # A model that cannot load: the preload fails quietly, the call warns and keeps all.
    with pytest.warns(costtune.CosttuneWarning, match="no usable cost model"):
        tuner = tiny_matmul_tuner(str(tmp_path / "nosuch"), Bench())
        join_preloads()
        run_tiny_matmul(tuner, 16, 128, 256)
    assert tuner.early_config_prune.last.k == len(USER)


@pytest.mark.parametrize("option", [True, 3, False, "threads", "processes"])
def test_plain_autotune_hook_precompiles_what_it_keeps(option, monkeypatch):
    """Under plain triton.autotune the pruner hands the kept configs (and only those) to the
    parallel precompile before Triton benchmarks them, with the executor and worker count
    asked for (True: forked processes); precompile=False leaves compiling to Triton;
    costtune.autotune's own tuner is skipped."""
    import costtune.tune.precompile as module

    calls = []
    monkeypatch.setattr(module, "precompile", lambda tuner, kept, **kw: calls.append(
        (tuner, [str(c) for c in kept], kw["threads"], kw["mode"])) or (len(kept), len(kept)))

    @triton.jit
    def hooked_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr):
        masked_tile_matmul(x, y, out, m, n, k, BM, BN, BK)

    configs = [triton.Config({"BM": 32, "BN": bn, "BK": 32}, num_warps=4, num_stages=2)
               for bn in (32, 64, 128)]
    hook = costtune.prune_configs_by("h200", 2, family="gemm", precompile=option,
                                     params={"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"})
    tuner = triton.autotune(configs, key=["m", "n", "k"], prune_configs_by=hook,
                            do_bench=Bench())(hooked_matmul)
    launch_tile_matmul(tuner, 16, 128, 64)
    last = tuner.early_config_prune.last
    if option is False:
        assert calls == [] and last.precompiled is None
        return
    assert len(calls) == 1 and calls[0][0] is tuner
    assert sorted(calls[0][1]) == sorted(str(c) for c in configs
                                         if config_key(c) in last.kept)  # in rank order
    assert len(calls[0][1]) == last.k and calls[0][2] == (3 if option == 3 else None)
    assert calls[0][3] == {True: "processes", 3: "threads"}.get(option, option)
    assert last.precompiled == (last.k, last.k)
    assert precompiler(object(), True) is not None and precompiler(None, True) is None
    assert precompiler(SimpleNamespace(precompile_threads=True), True) is None
    for bad in (0, "fork", 2.5, None):
        with pytest.raises(ValueError, match="precompile must be True, False, 'processes'"):
            costtune.prune_configs_by("h200", 2, precompile=bad)
        with pytest.raises(ValueError, match="precompile must be"):
            costtune.autotune(configs, ["m"], precompile=bad)


def test_precompile_runs_a_configs_pre_hook_on_copied_descriptors():
    """A tutorial-06 style pre_hook sets the host descriptors' block shapes: the precompile
    compiles for those shapes, on copies, leaving the caller's descriptors as they were."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    from costtune.tune.precompile import _hooked

    t = torch.empty(64, 32, dtype=torch.float16)
    desc = TensorDescriptor(t, shape=[64, 32], strides=[32, 1], block_shape=[1, 1])

    def hook(nargs):
        nargs["desc"].block_shape = [nargs["BLOCK_M"], 32]

    configs = [triton.Config({"BLOCK_M": bm}, pre_hook=hook) for bm in (16, 64)]
    calls = [_hooked({"desc": desc, "n": 64}, {"grid": (1,)}, c) for c in configs]
    assert [c[0].block_shape for c in calls] == [[16, 32], [64, 32]]
    assert calls[0][1] == 64 and calls[0][0].base is t
    assert desc.block_shape == [1, 1]


def test_blend_order_weights_the_two_rankings():
    from costtune.evaluate.metrics import rank_positions
    from costtune.tune.ranking import blend_order

    keys = np.array(list("abcde"))
    s1 = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    s2 = np.array([1.0, 2.0, 3.0, 5.0, 4.0])
    assert blend_order(s1, s2, keys, weight=0.0).tolist() == rank_positions(s2, keys).tolist()
    assert blend_order(s1, s2, keys, weight=1.0).tolist() == [0, 1, 2, 3, 4]
    # Half and half: percentiles a .6, b .7, c .6, d .7, e .5; ties go to the stage-2 score.
    assert blend_order(s1, s2, keys, weight=0.5).tolist() == [3, 1, 2, 0, 4]
    # A NaN score ranks last in its stage.
    s2_nan = np.array([np.nan, 2.0, 3.0, 5.0, 4.0])
    assert blend_order(s1, s2_nan, keys, weight=0.0).tolist()[-1] == 0


@pytest.mark.parametrize("bad", [-0.1, 1.5, True, "half", float("nan")])
def test_stage1_weight_is_checked(bad):
    with pytest.raises(ValueError, match=r"^stage1_weight must be a number in \[0, 1\]"):
        costtune.prune_configs_by(family="gemm", two_stage=True, stage1_weight=bad)


def test_stage1_weight_defaults():
    from costtune.tune.ranking import STAGE2_FILE, stage1_weight

    assert stage1_weight("h200_compiled", "gemm", 0.25) == 0.25  # given: used as is
    assert stage1_weight("/some/model.json", "gemm") == 0.0  # not shipped: stage 2 alone
    shipped = json.loads((Path(costtune.__file__).parent / "models" / STAGE2_FILE).read_text())
    assert shipped["model"] == "h200_compiled"
    for family in ("gemm", "softmax", "attention"):
        w = shipped["families"][family]["stage1_weight"]
        assert 0.0 <= w <= 1.0 and stage1_weight("h200_compiled", family) == w


def test_two_stage_at_weight_one_keeps_stage_one_order(model, train_rows, monkeypatch,
                                                       record):
    """w=1: stage 2 moves only the configs the AOT compile rejected; w=0 follows the
    compiled booster."""
    from costtune.evaluate.metrics import rank_positions

    compiled = CostModel(features="static+compiled", family="gemm", n_estimators=10,
                         max_depth=3).fit(train_rows, compiled=fake_compiled(train_rows))
    monkeypatch.setattr("costtune.features.compiled.compiled_features",
                        lambda rows, **kw: fake_compiled(rows))
    args = {**SHAPE, "a": torch.empty(1, dtype=torch.float16)}

    def kept(**options):
        pruner = costtune.prune_configs_by(model, 3, family="gemm", shortlist=len(SMALL),
                                           widen=None, **options)["early_config_prune"]
        return [config_key(c) for c in pruner(SMALL, args)], pruner.last

    alone, _ = kept()
    at_one, last = kept(two_stage=True, stage2_model=compiled, stage1_weight=1.0)
    bad = {config_key(c) for c in SMALL if c.kwargs["BLOCK_N"] == 64 and c.kwargs["BLOCK_K"] == 64}
    keys = [config_key(c) for c in SMALL]
    order = [keys[i] for i in rank_positions(last.scores, keys)]
    assert last.stage2 and at_one == [k for k in order if k not in bad][:3]
    at_zero, _ = kept(two_stage=True, stage2_model=compiled, stage1_weight=0.0)
    assert not set(at_zero) & bad and ours(record) == []
    assert alone == order[:3]


USER_STAGE2 = """
import json, sys
import torch, triton
import triton.language as tl
import costtune
from costtune.model.xgb import CostModel
from costtune.tune.ranking import kernel_compiled_table

sys.path.insert(0, sys.argv[3])  # the tests' helpers: outside the interpreter, a JIT kernel
from helpers import masked_tile_matmul as tile_matmul


m, n, k = 64, 128, 256
args = {"x": torch.zeros(m, k, dtype=torch.float16), "y": torch.zeros(k, n, dtype=torch.float16),
        "out": torch.empty(m, n), "m": m, "n": n, "k": k}
configs = [triton.Config({"BM": 64, "BN": 64, "BK": 32}, num_warps=4, num_stages=2),
           triton.Config({"BM": 64, "BN": 128, "BK": 64}, num_warps=8, num_stages=3),
           triton.Config({"BM": 256, "BN": 256, "BK": 128}, num_warps=4, num_stages=5)]
memo = {}
table = kernel_compiled_table(tile_matmul, args, configs, cache_dir=sys.argv[2], workers=2,
                              memo=memo, arch=90)
out = {"status": table["compile_status"].tolist(), "n_regs": table["n_regs"].tolist(),
       "shared": table["shared_bytes"].tolist(), "launches": table["n_launches"].tolist(),
       "memo": len(memo), "ir_dot": table["ir_dot"].tolist(), "ir_ok": table["ir_ok"].tolist(),
       "ir_loop_loads": table["ir_load_in_loop"].tolist()}


@triton.jit
def tile_copy(desc, out, n, BM: tl.constexpr, BN: tl.constexpr):
    tile = desc.load([tl.program_id(0) * BM, 0])
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    tl.store(out + rm[:, None] * n + tl.arange(0, BN)[None, :], tile)


def set_block(nargs):  # Triton's tutorials set descriptor block shapes in a pre_hook
    nargs["desc"].block_shape = [nargs["BM"], nargs["BN"]]


from triton.tools.tensor_descriptor import TensorDescriptor
x = torch.zeros(256, 64, dtype=torch.float16)
hooked = [triton.Config({"BM": bm, "BN": 64}, num_warps=4, num_stages=1, pre_hook=set_block)
          for bm in (32, 128)]
desc = TensorDescriptor.from_tensor(x, [8, 8])  # what the caller passed: the hook fixes it
copy_table = kernel_compiled_table(tile_copy, {"desc": desc, "out": torch.empty(256, 64),
                                               "n": 64}, hooked, cache_dir=sys.argv[2],
                                   workers=2, memo={}, arch=90)
out["hooked_status"] = copy_table["compile_status"].tolist()
out["hooked_shared"] = copy_table["shared_bytes"].tolist()
out["caller_block"] = list(desc.block_shape)


@triton.heuristics({"EVEN_K": lambda a: a["k"] % a["BK"] == 0})
@triton.jit
def even_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                EVEN_K: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, k, BK):
        kk = k0 + tl.arange(0, BK)
        if EVEN_K:
            a = tl.load(x + rm[:, None] * k + kk[None, :])
        else:
            a = tl.load(x + rm[:, None] * k + kk[None, :], mask=kk[None, :] < k, other=0.0)
        acc += tl.dot(a, tl.load(y + kk[:, None] * n + rn[None, :]))
    tl.store(out + rm[:, None] * n + rn[None, :], acc)


even = kernel_compiled_table(even_matmul, args, configs[:2], cache_dir=sys.argv[2], workers=2,
                             memo={}, arch=90)
out["heuristics_status"] = even["compile_status"].tolist()
# A rule may set a launch option from the config's own (Triton passes them to rules).
doubled = triton.heuristics({"num_warps": lambda a: 2 * a["num_warps"]})(even_matmul)
twice = kernel_compiled_table(doubled, args, configs[:1], cache_dir=sys.argv[2], workers=2,
                              memo={}, arch=90)
at8 = kernel_compiled_table(even_matmul, args, [triton.Config(dict(configs[0].kwargs),
                                                              num_warps=8, num_stages=2)],
                            cache_dir=sys.argv[2], workers=2, memo={}, arch=90)
out["rule_warps"] = [twice["compile_status"][0], twice["compile_key"][0] == at8["compile_key"][0]]
model = CostModel.load(sys.argv[1])
pruner = costtune.prune_configs_by(
    model, 1, family="gemm", problem={"M": "m", "N": "n", "K": "k"},
    params={"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"}, two_stage=True, shortlist=3,
    stage2_model=model, cache_dir=sys.argv[2], precompile=False)["early_config_prune"]
pruner.kernel = tile_matmul
out["kept"] = len(pruner(configs, args))
out["stage2"], out["stage2_kernel"] = pruner.last.stage2, pruner.last.stage2_kernel
ir_pruner = costtune.prune_configs_by(  # a stage-2 model on IR counts too: the same compile
    model, 1, family="gemm", problem={"M": "m", "N": "n", "K": "k"},
    params={"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"}, two_stage=True, shortlist=3,
    stage2_model=CostModel.load(sys.argv[4]), cache_dir=sys.argv[2],
    precompile=False)["early_config_prune"]
ir_pruner.kernel = tile_matmul
out["ir_kept"] = len(ir_pruner(configs, args))
out["ir_stage2"] = [ir_pruner.last.stage2, ir_pruner.last.stage2_kernel,
                    dict(ir_pruner.last.notes)]
print(json.dumps(out))
"""


def test_stage2_compiles_the_users_own_kernel(train_rows, tmp_path):
    """Outside the interpreter (a child process: the tests run in it, and nothing compiles
    there), ``kernel_compiled_table`` compiles the user's kernel at each config, specialized
    on the call's arguments (a config too big for the GPU gets its status, not an exception),
    and the hook's stage 2 ranks with those features."""
    import json
    import os
    import subprocess
    import sys

    compiled = CostModel(features="static+compiled", family="gemm", n_estimators=10,
                         max_depth=3).fit(train_rows, compiled=fake_compiled(train_rows))
    path = compiled.save(tmp_path / "stage2")
    with_ir = CostModel(features="static+ir+compiled", family="gemm", n_estimators=10,
                        max_depth=3).fit(train_rows, compiled=fake_compiled(train_rows),
                                         ir=fake_ir(train_rows))
    ir_path = with_ir.save(tmp_path / "stage2_ir")
    script = tmp_path / "user_stage2.py"
    script.write_text(USER_STAGE2)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(script), str(path), str(tmp_path / "cache"),
                          str(Path(__file__).parent), str(ir_path)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["status"] == ["ok", "ok", "out_of_resources"] and out["memo"] == 3
    assert min(out["n_regs"][:2]) > 0 and out["launches"][:2] == [1, 1]
    assert out["shared"][1] > out["shared"][0] > 0
    assert out["kept"] == 1 and out["stage2"] and out["stage2_kernel"] == "yours"
    # The same compile's TTIR/TTGIR counts: one dot inside the K loop, its loads in the loop
    # too; a config over the shared-memory limit still compiled that far.
    assert out["ir_dot"] == [1, 1, 1] and out["ir_ok"] == [1.0, 1.0, 1.0]
    assert min(out["ir_loop_loads"]) >= 2
    assert out["ir_kept"] == 1 and out["ir_stage2"][:2] == [True, "yours"], out["ir_stage2"]
    # Each config compiled with the block shape its pre_hook sets, on a copy of the caller's
    # descriptor.
    assert out["hooked_status"] == ["ok", "ok"] and out["caller_block"] == [8, 8]
    assert out["hooked_shared"][1] > out["hooked_shared"][0] > 0
    assert out["heuristics_status"] == ["ok", "ok"]  # EVEN_K from its @triton.heuristics
    assert out["rule_warps"] == ["ok", True]  # compiled at the 8 warps the rule sets


def test_two_stage_falls_back_to_our_kernel(train_rows, monkeypatch, tmp_path):
    """Under the interpreter (no JIT function, nothing compiles) stage 2 describes the configs
    with costtune's own kernel of the family, and the decision says so."""
    compiled = CostModel(features="static+compiled", family="gemm", n_estimators=10,
                         max_depth=3).fit(train_rows, compiled=fake_compiled(train_rows))
    configs = [triton.Config({"BM": bm, "BN": bn, "BK": 32}, num_warps=4, num_stages=2)
               for bm, bn in ((32, 64), (64, 64), (64, 128))]
    ours_compiled = []
    monkeypatch.setattr("costtune.features.compiled.compiled_features",
                        lambda rows, **kw: ours_compiled.append(len(rows))
                        or fake_compiled(rows))
    pruner = costtune.prune_configs_by(
        compiled, 1, family="gemm", problem={"M": "m", "N": "n", "K": "k"},
        params={"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"}, two_stage=True,
        shortlist=3, stage2_model=compiled, cache_dir=tmp_path)["early_config_prune"]
    pruner.kernel = masked_tile_matmul
    m, n, k = 64, 128, 256
    args = {"x": torch.zeros(m, k, dtype=torch.float16),
            "y": torch.zeros(k, n, dtype=torch.float16), "out": torch.empty(m, n),
            "m": m, "n": n, "k": k}
    assert len(pruner(configs, args)) == 1
    assert pruner.last.stage2 and ours_compiled == [3]
    assert pruner.last.stage2_kernel.startswith("costtune's gemm (yours could not be compiled")


def test_plain_hook_replaces_kept_configs_that_cannot_launch(monkeypatch):
    """Under plain triton.autotune Triton launches a single kept config without benchmarking
    it: a config whose precompile says it does not fit in shared memory (or fails to compile)
    is replaced by the next one in ranked order, compiled in turn, so top_k=1 never hands
    Triton a config that raises where exhaustive autotune works."""
    import costtune.tune.precompile as module

    calls = []

    def fake_precompile(tuner, kept, *, outcomes=None, min_configs=2, **kw):
        calls.append([config_key(c) for c in kept])
        if outcomes is not None:  # the first config ranked does not fit
            outcomes.extend("too_big" if len(calls) == 1 else "ok" for _ in kept)
        return len(kept), len(kept)

    monkeypatch.setattr(module, "precompile", fake_precompile)

    @triton.jit
    def oversized_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr,
                         BK: tl.constexpr):
        masked_tile_matmul(x, y, out, m, n, k, BM, BN, BK)

    configs = [triton.Config({"BM": 32, "BN": bn, "BK": 32}, num_warps=4, num_stages=2)
               for bn in (32, 64, 128)]
    hook = costtune.prune_configs_by("h200", 1, family="gemm",
                                     params={"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"})
    tuner = triton.autotune(configs, key=["m", "n", "k"], prune_configs_by=hook,
                            do_bench=Bench())(oversized_matmul)
    used = launch_tile_matmul(tuner, 16, 128, 256)  # checked against torch
    last = tuner.early_config_prune.last
    first, second = last.ranked[:2]
    assert calls == [[config_key(configs[first])], [config_key(configs[second])]]
    assert last.kept == [config_key(configs[second])] and last.precompiled == (2, 2)
    assert list(last.replaced.values()) == ["does not fit in shared memory"]
    assert used == str(configs[second])


def test_explain_says_which_kernel_stage_two_compiled(train_rows, monkeypatch, tmp_path):
    from costtune.tune.explain import explain_call

    compiled = CostModel(features="static+compiled", family="gemm", n_estimators=10,
                         max_depth=3).fit(train_rows, compiled=fake_compiled(train_rows))
    monkeypatch.setattr("costtune.features.compiled.compiled_features",
                        lambda rows, **kw: fake_compiled(rows))
    configs = [triton.Config({"BM": bm, "BN": bn, "BK": 32}, num_warps=4, num_stages=2)
               for bm, bn in ((32, 64), (64, 64), (64, 128))]
    tuner = costtune.autotune(configs, key=["m", "n", "k"], model=compiled, top_k=1,
                              family="gemm", problem={"M": "m", "N": "n", "K": "k"},
                              params={"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"},
                              two_stage=True, shortlist=3, stage2_model=compiled,
                              cache_dir=tmp_path)(masked_tile_matmul)
    m, n, k = 64, 128, 256
    args = (torch.zeros(m, k, dtype=torch.float16), torch.zeros(k, n, dtype=torch.float16),
            torch.empty(m, n), m, n, k)
    report = explain_call(tuner, args, {"grid": (1, 1)})
    assert any(note.startswith("stage 2 compiled costtune's gemm kernel (yours could not")
               for note in report.info), report.info
