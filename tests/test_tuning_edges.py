"""Tuning calls at the edges a user meets (twenty-third session's review): the adaptive budget
with check= and with knobs the model does not know, its options and its warning; an error
every config shares; one prune_configs_by dict over several kernels; a family parameter left
at its default; the source Triton compiles rather than the file as it is now; an empty config
list. Under the interpreter, with stand-in timings."""

from __future__ import annotations

import importlib.util
import sys
import warnings

import pytest
import torch
import triton
import triton.language as tl
from helpers import Bench, masked_tile_matmul, store_tile, tile_product
from learning_helpers import StepBench
from triton.runtime.jit import JITFunction

import costtune
from costtune.tune.adaptive import Adaptive
from costtune.tune.kind import read_kind, source_constants
from costtune.tune.trying import ALIKE_ERROR_STOP
from costtune.types import CosttuneWarning

PARAMS = {"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"}
PROBLEM = {"M": "m", "N": ("y", 1), "K": "k"}


@triton.jit
def doubled_unless_small(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr,
                         BK: tl.constexpr):
    """A matmul whose configs with a 64-wide tile are wrong (they write 2 x @ y)."""
    acc = tile_product(x, y, m, n, k, BM, BN, BK)
    if BM == 64 or BN == 64:
        acc = acc * 2.0
    store_tile(out, acc, m, n, BM, BN)


@triton.jit
def knob_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                   GROUP: tl.constexpr):
    masked_tile_matmul(x, y, out, m, n, k, BM, BN, BK)


@triton.jit
def other_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 GROUP: tl.constexpr):
    masked_tile_matmul(x, y, out, m, n, k, BM, BN, BK)


def _configs(**extra):
    return [triton.Config({"BM": bm, "BN": bn, "BK": 32, **extra}, num_warps=w, num_stages=2)
            for bm in (32, 64) for bn in (32, 64) for w in (4, 8)]


def _launch(tuned, m=32, n=64, k=64, dtype=torch.float16):
    torch.manual_seed(0)
    x, y = (torch.randn(s).to(dtype) for s in ((m, k), (k, n)))
    out = torch.empty(m, n, dtype=torch.float32)
    tuned[lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))](
        x, y, out, m, n, k)
    return x, y, out


def test_adaptive_with_check_counts_a_wrong_output_as_a_failure():
    def reference(args):
        return args["x"].float() @ args["y"].float()

    tuned = costtune.autotune(_configs(), key=["m", "n", "k"], family="gemm", problem=PROBLEM,
                              params=PARAMS, range_margin=None, do_bench=StepBench(),
                              precompile=False, check={"outputs": ["out"], "reference": reference},
                              budget=Adaptive(max_configs=2, margin=100.0))(doubled_unless_small)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CosttuneWarning)
        x, y, out = _launch(tuned)
    torch.testing.assert_close(out, x.float() @ y.float(), rtol=1e-3, atol=1e-3)
    best = tuned.best_config.kwargs
    assert (best["BM"], best["BN"]) == (32, 32)
    # Six of eight configs are wrong: the two right ones are what ran, the wrong ones were
    # replaced (not counted against the cap of 2).
    assert len(tuned.adaptive.measured) == 2 and tuned.adaptive.failed
    assert all((c.kwargs["BM"], c.kwargs["BN"]) == (32, 32) for c in tuned.configs_timings)
    assert tuned.early_config_prune.last.k == 2


def test_adaptive_never_spends_its_slots_on_configs_the_model_cannot_tell_apart():
    configs = [triton.Config({**c.kwargs, "GROUP": g}, num_warps=c.num_warps, num_stages=2)
               for c in _configs() for g in (1, 8)]
    bench = StepBench()
    tuned = costtune.autotune(configs, key=["m", "n", "k"], family="gemm", problem=PROBLEM,
                              params=PARAMS, range_margin=None, do_bench=bench,
                              precompile=False, budget=Adaptive(max_configs=8, margin=100.0)
                              )(knob_matmul)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CosttuneWarning)
        _launch(tuned)
    ran = [(c.kwargs["BM"], c.kwargs["BN"], c.num_warps) for c in tuned.configs_timings]
    assert bench.calls == 8 and len(set(ran)) == 8, ran  # every distinct config once
    assert {c.kwargs["GROUP"] for c in tuned.configs_timings} == {1, 8}  # both still explored
    text = [str(w.message) for w in caught if issubclass(w.category, CosttuneWarning)]
    assert len(text) == 1 and "GROUP" in text[0] and "benchmarking up to 8 of 16" in text[0]


@pytest.mark.parametrize("options, message", [
    ({"max_configs": 1.0}, "max_configs must be a whole number"),
    ({"max_configs": 2.5}, "max_configs must be a whole number"),
    ({"min_configs": 2.7}, "min_configs must be a whole number"),
    ({"max_configs": True}, "max_configs must be a whole number"),
    ({"neighbours": "no"}, "neighbours must be True or False"),
    ({"margin": "1"}, "margin must be a number"),
    ({"margin": float("nan")}, "margin must be a number"),
    ({"max_configs": 0}, "max_configs must be >= 1"),
    ({"max_configs": 4, "min_configs": 5}, "min_configs must be between 1 and max_configs"),
])
def test_adaptive_options_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        Adaptive(**options)


def test_a_cap_of_one_needs_no_min_configs():
    assert Adaptive(max_configs=1).min_configs == 1 and Adaptive().min_configs == 2


def test_an_error_configs_across_the_list_share_reaches_the_user():
    bench = Bench()
    tuned = costtune.autotune(_configs(), key=["m", "n", "k"], top_k=2, family="gemm",
                              problem=PROBLEM, params=PARAMS, range_margin=None,
                              do_bench=bench, precompile=False)(knob_matmul)
    x = torch.randn(32, 64).half()
    y = torch.randn(64, 64).half()
    out = torch.empty(32, 64)
    with pytest.raises(Exception, match="float"):  # k given as a float: the call's bug
        tuned[lambda meta: (1, 1)](x, y, out, 32, 64, 64.0, GROUP=1)
    # Not all 8: it stops once configs with each value of BM, BN and num_warps failed alike
    # (exhaustive tuning stops at the first).
    assert 3 <= bench.calls < 8


@triton.jit
def misshapen_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr,
                     BK: tl.constexpr):
    """Every config's bug, but its message names the config's tile ("... 32 and 16")."""
    first_col = tl.load(x + tl.arange(0, 16) * k)  # bug: 16 rows where BM are meant
    acc = tile_product(x, y, m, n, k, BM, BN, BK) + first_col[:, None]
    store_tile(out, acc, m, n, BM, BN)


def test_an_error_naming_each_configs_tile_is_still_one_error():
    configs = [triton.Config({"BM": bm, "BN": bn, "BK": 32}, num_warps=w, num_stages=s)
               for bm in (32, 64) for bn in (32, 64) for w in (4, 8) for s in (2, 3, 4)]
    bench = Bench()
    tuned = costtune.autotune(configs, key=["m", "n", "k"], top_k=2, family="gemm",
                              problem=PROBLEM, params=PARAMS, range_margin=None,
                              do_bench=bench, precompile=False)(misshapen_matmul)
    with pytest.raises(Exception, match="incompatible dimensions"):
        _launch(tuned)
    # As one error once ALIKE_ERROR_STOP configs failed alike: not every config tried.
    assert ALIKE_ERROR_STOP <= bench.calls < len(configs)


def test_messages_alike_but_for_values_confined_to_some_values_are_replaced():
    """A check failing only for split-K configs, its message naming a product of two values
    that equals a third ("SPLIT_K*BK=64" beside BM=64): few such failures do not make it the
    kernel's error; the unsplit configs that follow run."""
    from costtune.tune.trying import error_keys, kernel_error

    pool = [triton.Config({"BM": bm, "BN": bn, "SPLIT_K": sk}, num_warps=w, num_stages=3)
            for bm in (64, 128) for bn in (64, 128) for sk in (1, 2, 4) for w in (4, 8)]
    failing = [c for c in pool if c.kwargs["SPLIT_K"] > 1][:3]
    groups: dict = {}
    for c in failing:
        error = ValueError(f"K=1000 is not a multiple of SPLIT_K*BK={c.kwargs['SPLIT_K'] * 32}")
        for key, least in error_keys(error, c):
            groups.setdefault(key, ([], least))[0].append(c)
    assert not any(kernel_error(f, pool, least=n) for f, n in groups.values())


@triton.jit
def narrow_k_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    tl.static_assert(BK < 64)  # one config's limit, not the kernel's bug
    masked_tile_matmul(x, y, out, m, n, k, BM, BN, BK)


def test_a_per_config_assertion_many_configs_share_is_still_replaced():
    configs = [triton.Config({"BM": bm, "BN": bn, "BK": 64}, num_warps=4, num_stages=2)
               for bm in (32, 64) for bn in (32, 64)]
    configs.append(triton.Config({"BM": 32, "BN": 32, "BK": 32}, num_warps=4, num_stages=2))
    tuned = costtune.autotune(configs, key=["m", "n", "k"], top_k=1, family="gemm",
                              problem=PROBLEM, params=PARAMS, range_margin=None,
                              do_bench=Bench(), precompile=False)(narrow_k_matmul)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CosttuneWarning)
        x, y, out = _launch(tuned)
    torch.testing.assert_close(out, x.float() @ y.float(), rtol=1e-3, atol=1e-3)
    assert tuned.best_config.kwargs["BK"] == 32 and len(tuned.rejected) == 4


def test_one_prune_dict_warns_for_each_kernel_it_serves():
    prune = costtune.prune_configs_by("h200", top_k=2, family="gemm", problem=PROBLEM,
                                      params=PARAMS, range_margin=None)
    kernels = [triton.autotune(_configs(GROUP=1), key=["m", "n", "k"], do_bench=Bench(),
                               prune_configs_by=prune)(fn)
               for fn in (knob_matmul, other_matmul)]
    said = []
    for tuned in kernels:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CosttuneWarning)
            _launch(tuned, dtype=torch.float32)  # fp32: a dtype the model never saw
        said.append([str(w.message) for w in caught if issubclass(w.category, CosttuneWarning)])
        assert prune["early_config_prune"].last.warnings == said[-1]
    assert all(len(s) == 1 and "float32" in s[0] for s in said), said


@triton.jit
def default_block_softmax(out, x, n_rows, n_cols, BLOCK_SIZE: tl.constexpr = 256):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    v = tl.load(x + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(v - tl.max(v, 0))
    tl.store(out + row * n_cols + cols, e / tl.sum(e, 0), mask=cols < n_cols)


def test_a_family_parameter_left_at_its_default_is_read():
    configs = [triton.Config({}, num_warps=w, num_stages=s) for w in (1, 2, 4, 8)
               for s in (1, 2, 3)]
    bench = Bench()
    tuned = costtune.autotune(configs, key=["n_rows", "n_cols"], top_k=2, family="softmax",
                              range_margin=None, do_bench=bench)(default_block_softmax)
    x = torch.randn(64, 256)
    out = torch.empty_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CosttuneWarning)
        tuned[(64,)](out, x, 64, 256)
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))
    assert not [w for w in caught if issubclass(w.category, CosttuneWarning)]
    assert bench.calls == 2 and tuned.early_config_prune.last.k == 2
    assert source_constants(tuned) == {"BLOCK_SIZE": 256}


SOFTMAX = '''import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out, x, n_cols, BLOCK_SIZE: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    v = tl.load(x + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(v - tl.max(v, 0))
    tl.store(out + cols, e / tl.sum(e, 0), mask=cols < n_cols)
'''
NORM = '''

@triton.jit
def _norm(x, n, eps):
    mean = tl.sum(x, 0) / n
    return (x - mean) * tl.rsqrt(tl.sum((x - mean) * (x - mean), 0) / n + eps)
'''


def test_the_source_triton_compiles_is_read_not_the_file_as_edited_since(tmp_path,
                                                                        monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # a JITFunction, as on a GPU
    path = tmp_path / "edited_kernels.py"
    path.write_text(SOFTMAX)
    spec = importlib.util.spec_from_file_location("edited_kernels", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "edited_kernels", module)
    spec.loader.exec_module(module)
    kernel = module.softmax_kernel
    assert isinstance(kernel, JITFunction)
    # The user inserts a layer norm above the kernel and saves, without reloading.
    lines = SOFTMAX.splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + NORM + "".join(lines[3:]))
    tuner = triton.autotune([triton.Config({"BLOCK_SIZE": 256})], key=["n_cols"])(kernel)
    kind = read_kind(tuner)
    assert kind.family == "softmax", kind


def test_an_empty_config_list_runs_tritons_default_config():
    tuned = costtune.autotune([], key=["n_rows", "n_cols"])(default_block_softmax)
    x = torch.randn(8, 256)
    out = torch.empty_like(x)
    tuned[(8,)](out, x, 8, 256)
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))
    assert [c.kwargs for c in tuned.configs] == [{}]


class _FakePrecompile:
    """The plain hook's precompiler as ``launchable`` calls it: every config fails to
    compile, with one error for all (``same``) or one of its own; counts the batches."""

    def __init__(self, same: bool) -> None:
        self.same, self.batches = same, []

    def __call__(self, batch, named_args, kwargs, family, outcomes=None, errors=None):
        self.batches.append(len(batch))
        outcomes.extend(["failed"] * len(batch))
        for i, _ in enumerate(batch):  # of its own: a message not only numbers apart
            self.n = getattr(self, "n", 0) + 1
            errors[i] = TypeError("K is a float" if self.same else f"pass {'x' * self.n} failed")
        return 0, len(batch)


# In ranked order the first four share BM = 32: one value's failure, maybe; the next four
# give BM both values, so an error all eight share is the kernel's.
@pytest.mark.parametrize("same, batches", [(True, [4, 4]), (False, [4, 4, 4, 4])])
def test_the_plain_hook_stops_replacing_on_an_error_every_compile_shares(same, batches):
    from costtune.tune.decision import PruneDecision
    from costtune.tune.launchable import launchable

    configs = _configs() * 2
    decision = PruneDecision(len(configs), 4, [], "gemm", {}, "float16", None)
    run = _FakePrecompile(same)
    kept = launchable(run, configs, list(range(16)), configs[:4], decision, {}, {},
                      keys=list(range(16)))
    # The kernel's own error: the kept list goes back as it was and Triton raises it at the
    # first, as exhaustive tuning would; one config's failures: every config is tried.
    assert run.batches == batches and kept == configs[:4]


@triton.jit
def fails_when_wide(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    if BN == 64:  # a compiler pass failing on one value, with a message naming no config
        raise RuntimeError("PassManager::run failed")
    masked_tile_matmul(x, y, out, m, n, k, BM, BN, BK)


def test_an_error_confined_to_one_value_is_replaced_however_often_it_comes():
    tuned = costtune.autotune(_configs(), key=["m", "n", "k"], top_k=2, family="gemm",
                              problem=PROBLEM, params=PARAMS, range_margin=None,
                              do_bench=Bench(), precompile=False)(fails_when_wide)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CosttuneWarning)
        x, y, out = _launch(tuned, n=128)
    torch.testing.assert_close(out, x.float() @ y.float(), rtol=1e-3, atol=1e-3)
    assert tuned.best_config.kwargs["BN"] == 32
    assert all("BN=64" in text for text in tuned.rejected)


@triton.jit
def doubled_at(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               WM: tl.constexpr, WN: tl.constexpr):
    """A matmul whose WM x WN config is wrong (it writes 2 x @ y)."""
    acc = tile_product(x, y, m, n, k, BM, BN, BK)
    if BM == WM and BN == WN:
        acc = acc * 2.0
    store_tile(out, acc, m, n, BM, BN)


def test_adaptive_check_finds_voters_when_its_cap_holds_every_config():
    """Every config benchmarked (4 configs, a cap of 16), the first benchmarked fastest: the
    model's first pick, made wrong here, is caught by the others' outputs."""
    configs = [c for c in _configs() if c.num_warps == 4]

    def tuner(check):
        return costtune.autotune(configs, key=["m", "n", "k"], family="gemm", problem=PROBLEM,
                                 params=PARAMS, range_margin=None, do_bench=StepBench(),
                                 precompile=False, check=check,
                                 budget=Adaptive(max_configs=16, margin=0.0))(doubled_at)

    def launch(tuned, wrong):
        torch.manual_seed(0)
        x, y = (torch.randn(s).to(torch.float16) for s in ((64, 64), (64, 128)))
        out = torch.empty(64, 128, dtype=torch.float32)
        tuned[lambda meta: (triton.cdiv(64, meta["BM"]), triton.cdiv(128, meta["BN"]))](
            x, y, out, 64, 128, 64, WM=wrong[0], WN=wrong[1])
        return x, y, out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CosttuneWarning)
        plain = tuner(check=False)
        launch(plain, (0, 0))  # none wrong: the model's first pick is benchmarked fastest
        first = (plain.best_config.kwargs["BM"], plain.best_config.kwargs["BN"])
        tuned = tuner(check=True)
        x, y, out = launch(tuned, first)
    torch.testing.assert_close(out, x.float() @ y.float(), rtol=1e-3, atol=1e-3)
    assert (tuned.best_config.kwargs["BM"], tuned.best_config.kwargs["BN"]) != first
    assert [c.split(",")[:2] for c in tuned.rejected] == [[f"BM={first[0]}",
                                                          f"BN={first[1]}"]]


def test_an_unprintable_error_is_no_evidence():
    from costtune.tune.decision import PruneDecision
    from costtune.tune.launchable import launchable

    class Unprintable(RuntimeError):
        def __str__(self):
            raise ValueError("no text")

    configs = _configs()

    def run(batch, named_args, kwargs, family, outcomes=None, errors=None):
        for i, c in enumerate(batch):
            bad = c is configs[0] or c is configs[1]
            outcomes.append("failed" if bad else "ok")
            if bad:
                errors[i] = Unprintable()
        return outcomes.count("ok"), len(batch)

    decision = PruneDecision(len(configs), 2, [], "gemm", {}, "float16", None)
    kept = launchable(run, configs, list(range(8)), configs[:2], decision, {}, {},
                      keys=list(range(8)))
    assert kept == configs[2:4]



# One stage of a split-K pipeline whose split count is a runtime argument: grid (tiles,
# SPLITS), fp32 partials into ws (SPLITS, M, N); a later kernel sums them.
_SPLIT_PARTIALS = """
import triton
import triton.language as tl


@triton.jit
def partials(a_ptr, b_ptr, ws_ptr, M, N, K, SPLITS, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid, chunk = tl.program_id(0), tl.program_id(1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rm = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    per = K // SPLITS
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(chunk * per, (chunk + 1) * per, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=rm[:, None] < M, other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=rn[None, :] < N, other=0.0)
        acc += tl.dot(a, b)
    tl.store(ws_ptr + chunk * M * N + rm[:, None] * N + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))
"""


@pytest.mark.parametrize("name", ["split_k", "num_splits", "SPLIT_K"])
def test_a_runtime_split_count_is_a_split_not_a_batch(name, tmp_path):
    """A split count passed at run time (any case of a SPLIT_K name) is the split the grid
    fixes: M stays M (lower-case names were read as a batch axis, M x split_k)."""
    path = tmp_path / f"partials_{name}.py"
    path.write_text(_SPLIT_PARTIALS.replace("SPLITS", name))
    spec = importlib.util.spec_from_file_location(f"partials_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64}, num_warps=4,
                             num_stages=3) for bm in (64, 128) for bn in (64, 128)]
    tuner = triton.autotune(configs, key=["M", "N", "K"])(module.partials)
    m, n, k, splits = 512, 512, 16384, 4
    a = torch.empty(m, k, dtype=torch.float16, device="meta")
    b = torch.empty(k, n, dtype=torch.float16, device="meta")
    ws = torch.empty(splits, m, n, dtype=torch.float32, device="meta")
    report = costtune.explain(tuner, a, b, ws, m, n, k, splits, grid=lambda c: (
        triton.cdiv(m, c["BLOCK_M"]) * triton.cdiv(n, c["BLOCK_N"]), splits))
    assert report.family == "gemm" and report.problem == {"M": 512, "N": 512, "K": 16384}
    assert report.launch_params == {"SPLIT_K": 4}
    assert not any("batch" in why for _, why in report.doubts)
