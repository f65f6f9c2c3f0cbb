"""Family parameters and launch options set by ``@triton.heuristics`` under (or over) the
autotuner: evaluated per config as Triton's launch evaluates them (``tune.names.rule_values``),
in the ranking, the grid check, the harvest and ``costtune.explain``."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl
from helpers import Bench, ours

import costtune
from costtune.tune.launch import LaunchSpec, NotApplicable, describe


@triton.jit
def softmax_kernel_inner(output_ptr, input_ptr, M, N, TILE_M: tl.constexpr,
                         TILE_N: tl.constexpr):
    tl.exp(tl.max(tl.sum(tl.load(input_ptr), 0), 0))


def _rows_args():
    return {"output_ptr": torch.empty(256, 1024), "input_ptr": torch.empty(256, 1024),
            "M": 256, "N": 1024}


def test_family_parameters_set_by_heuristics_are_evaluated_per_config():
    """FlagGems sets rows per program with triton.heuristics (TILE_M = 1024 // TILE_N): the
    hook evaluates the rule per config, as Triton's launch does, and ranks each config by its
    own value, with no doubt."""
    from costtune.tune.launch import launch_params

    kernel = triton.heuristics({"TILE_M": lambda a: max(1, 1024 // a["TILE_N"])})(
        softmax_kernel_inner)
    configs = [triton.Config({"TILE_N": n}) for n in (256, 512, 1024)]
    got = describe(LaunchSpec(), configs, args=_rows_args(), kernel=kernel)
    assert got.family == "softmax" and got.doubts == ()
    assert got.by_rule == {"ROWS_PER_PROG": "TILE_M"}
    assert got.origin["ROWS_PER_PROG"] == "triton.heuristics TILE_M"
    params = launch_params(got, configs)
    assert [p["ROWS_PER_PROG"] for p in params] == [4, 2, 1]
    assert [p["BLOCK_N"] for p in params] == [256, 512, 1024]


def test_heuristics_read_the_call_the_config_and_earlier_rules():
    """Rules see what Triton's Heuristics.run passes them: the call's arguments, the config's
    values and launch options, and the values of the rules applied before (outer first);
    a required parameter only a rule sets (tutorial 02's block from the row length) is read
    from it, and a rule's value overrides the config's."""
    from costtune.tune.launch import launch_params

    inner = triton.heuristics({"TILE_M": lambda a: a["ROWS"] * a["num_warps"]})(
        softmax_kernel_inner)
    kernel = triton.heuristics({"TILE_N": lambda a: triton.next_power_of_2(a["N"]),
                                "ROWS": lambda a: 2})(inner)
    configs = [triton.Config({"TILE_N": 64}, num_warps=w) for w in (1, 4)]
    got = describe(LaunchSpec(), configs, args={**_rows_args(), "N": 1000}, kernel=kernel)
    assert got.doubts == () and got.by_rule == {"BLOCK_N": "TILE_N", "ROWS_PER_PROG": "TILE_M"}
    params = launch_params(got, configs)
    assert [(p["BLOCK_N"], p["ROWS_PER_PROG"]) for p in params] == [(1024, 2), (1024, 8)]


@pytest.mark.parametrize("rule, required, why", [
    (lambda a: a["NOT_AN_ARG"], False, "raised KeyError: 'NOT_AN_ARG'"),
    (lambda a: 1024 / a["TILE_N"], False, "TILE_M = 4.0 is no valid ROWS_PER_PROG"),  # float
    (lambda a: a["NOT_AN_ARG"], True, "raised KeyError"),
])
def test_a_heuristic_that_fails_on_every_config_is_a_doubt_or_no_family(rule, required, why):
    """A rule that raises, or gives no positive integer, on every config: an optional
    parameter takes its neutral value with a doubt naming the rule and why (k widens); a
    required one leaves the family unread, with the reason."""
    kernel = triton.heuristics({"TILE_N" if required else "TILE_M": rule})(softmax_kernel_inner)
    configs = [triton.Config({} if required else {"TILE_N": n}) for n in (256, 512)]
    if required:
        with pytest.raises(NotApplicable, match=f"could not be evaluated for any config.*{why}"):
            describe(LaunchSpec(family="softmax"), configs, args=_rows_args(), kernel=kernel)
        return
    got = describe(LaunchSpec(), configs, args=_rows_args(), kernel=kernel)
    assert [c for c, _ in got.doubts] == ["params"] and got.by_rule == {}
    assert "triton.heuristics ['TILE_M'] could not be evaluated" in got.doubts[0][1]
    assert why in got.doubts[0][1]


def test_configs_whose_rules_fail_or_launch_too_many_warps_are_dropped(record):
    """Per config, as at the launch: a config whose rule raises (a lookup without its tile)
    or that a rule gives 64 warps cannot launch, so it is dropped with the reason; the rest
    are ranked by the values their rules set, with no doubt."""
    table = {256: 4, 512: 2}  # no entry for 1024
    kernel = triton.heuristics({"TILE_M": lambda a: table[a["TILE_N"]],
                                "num_warps": lambda a: a["TILE_N"] // 8})(softmax_kernel_inner)
    configs = [triton.Config({"TILE_N": n}) for n in (256, 512, 1024)]
    configs.append(triton.Config({"TILE_N": 256}, num_stages=2))
    hook = costtune.prune_configs_by(top_k=4, family="softmax")["early_config_prune"]
    hook.kernel = kernel
    kept = hook(configs, _rows_args())
    decision = hook.last
    assert [c.kwargs["TILE_N"] for c in kept] and 1024 not in [c.kwargs["TILE_N"] for c in kept]
    assert 512 not in [c.kwargs["TILE_N"] for c in kept]  # 64 warps: 2048 threads
    dropped = " ".join(decision.dropped.values())
    assert "KeyError" in dropped and "num_warps=64" in dropped
    assert not [c for c, _ in decision.notes if c == "params"]


def test_your_mapping_wins_and_rule_overridden_values_are_no_knobs(record):
    """params= names the config's tile even where a rule has a known spelling (BLOCK_SIZE);
    a config value a rule overrides at every launch is no knob the model lacks, and configs
    that launch alike are benchmarked once."""
    from costtune.tune.launch import launch_params

    kernel = triton.heuristics({"BLOCK_SIZE": lambda a: triton.next_power_of_2(a["N"])})(
        softmax_kernel_inner)
    configs = [triton.Config({"TILE_COLS": t}) for t in (64, 128)]
    got = describe(LaunchSpec(family="softmax", params={"TILE_COLS": "BLOCK_N"}), configs,
                   args=_rows_args(), kernel=kernel)
    assert got.rename == {"TILE_COLS": "BLOCK_N"} and got.by_rule == {}
    assert [p["BLOCK_N"] for p in launch_params(got, configs)] == [64, 128]
    overridden = [triton.Config({"BLOCK_SIZE": b}, num_warps=w) for b in (128, 256, 1024)
                  for w in (2, 4)]
    hook = costtune.prune_configs_by(top_k=4, family="softmax")["early_config_prune"]
    hook.kernel = kernel
    kept = hook(overridden, _rows_args())
    assert len(kept) == 2 and hook.last.duplicates == 4  # two launches: num_warps 2 and 4
    assert not [c for c, _ in hook.last.notes if c == "knobs"] and ours(record) == []


def test_a_kernel_under_heuristics_is_tuned_by_its_evaluated_parameters(tmp_path, record):
    """End to end, under triton.autotune with the hook: a tutorial-02 softmax whose block is
    set by triton.heuristics from the row length and whose configs vary only num_warps is
    pruned to top_k with no doubt, harvested with the block the rule sets, and explain shows
    it."""
    @triton.heuristics({"BLOCK_SIZE": lambda a: triton.next_power_of_2(a["n_cols"])})
    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK_SIZE)
        x = tl.load(in_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        e = tl.exp(x - tl.max(x, 0))
        tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, 0), mask=cols < n_cols)

    bench = Bench()
    configs = [triton.Config({}, num_warps=w, num_stages=s) for w in (1, 2, 4, 8)
               for s in (1, 2)]
    tuner = triton.autotune(configs, key=["n_cols"], do_bench=bench,
                            prune_configs_by=costtune.prune_configs_by(top_k=2))(softmax_kernel)
    x = torch.randn(6, 300)
    y = torch.empty_like(x)
    with costtune.harvest(tmp_path / "harvest") as h:
        tuner[(6,)](y, x, 300)
    torch.testing.assert_close(y, torch.softmax(x, -1))
    assert h.errors == [] and h.rows == 2  # what was benchmarked, with the rule's block
    rows = costtune.load_dataset(tmp_path / "harvest")
    assert (rows["family"] == "softmax").all() and (rows["BLOCK_N"] == 512).all()
    decision = tuner.early_config_prune.last
    assert decision.family == "softmax" and decision.k == 2 and bench.calls == 2
    assert not [c for c, _ in decision.notes if c == "params"] and ours(record) == []
    from costtune.tune.explain import explain_call

    report = explain_call(tuner, (y, x, 300), {"grid": (6,)})
    assert report.set_by_rules == {"BLOCK_N": [512]} and report.doubts == []
    assert "BLOCK_N in [512] (triton.heuristics BLOCK_SIZE, per config)" in str(report)


@triton.jit
def rows_softmax(output_ptr, input_ptr, M, N, TILE_M: tl.constexpr, TILE_N: tl.constexpr):
    rows = tl.program_id(0) * TILE_M + tl.arange(0, TILE_M)
    cols = tl.arange(0, TILE_N)
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    v = tl.load(input_ptr + rows[:, None] * N + cols[None, :], mask=inside, other=-float("inf"))
    e = tl.exp(v - tl.max(v, 1)[:, None])
    tl.store(output_ptr + rows[:, None] * N + cols[None, :], e / tl.sum(e, 1)[:, None],
             mask=inside)


def test_the_grid_is_checked_with_the_values_rules_set():
    """A grid reading a heuristics-set value (``meta["TILE_M"]``) is evaluated as the launch
    evaluates it: it agrees with the family's program count, no "grid" doubt, k = top_k."""
    kernel = triton.heuristics({"TILE_M": lambda a: 1024 // a["TILE_N"]})(rows_softmax)
    configs = [triton.Config({"TILE_N": n}, num_warps=w) for n in (256, 512, 1024)
               for w in (4, 8)]
    x = torch.empty(4096, 1024, device="meta")
    got = describe(LaunchSpec(family="softmax"), configs, kernel=kernel,
                   args={"output_ptr": x, "input_ptr": x, "M": 4096, "N": 1024},
                   grid=lambda meta: (triton.cdiv(4096, meta["TILE_M"]),))
    assert got.doubts == () and got.by_rule == {"ROWS_PER_PROG": "TILE_M"}


def test_rules_over_the_autotuner_are_applied_before_explaining(capsys):
    """flash-linear-attention puts triton.heuristics over triton.autotune: explain passes the
    autotuner what the launch passes it (the rules' values as kwargs)."""
    tuner = triton.autotune([triton.Config({"TILE_M": r}, num_warps=w) for r in (1, 2, 4)
                             for w in (1, 2)], key=["N"],
                            prune_configs_by=costtune.prune_configs_by(top_k=2))(rows_softmax)
    kernel = triton.heuristics({"TILE_N": lambda a: triton.next_power_of_2(a["N"])})(tuner)
    x, y = torch.randn(8, 200), torch.empty(8, 200)
    report = costtune.explain(kernel, y, x, 8, 200,
                              grid=lambda meta: (triton.cdiv(8, meta["TILE_M"]),))
    assert report.family == "softmax" and report.launch_params == {"BLOCK_N": 256}
    assert report.k == 2 and "launch TILE_N=256" in capsys.readouterr().out


def test_a_harvest_records_each_launch_once_with_the_values_rules_set(tmp_path):
    """Under plain triton.autotune every config is benchmarked, also those a rule makes the
    same launch: the harvest records each launch once, with the value the rule set."""
    kernel = triton.heuristics({"TILE_N": lambda a: triton.next_power_of_2(a["N"])})(
        rows_softmax)
    configs = [triton.Config({"TILE_N": n, "TILE_M": 2}, num_warps=w) for n in (64, 1024)
               for w in (1, 2)]
    tuner = triton.autotune(configs, key=["N"], do_bench=Bench())(kernel)
    x, y = torch.randn(8, 200), torch.empty(8, 200)
    with costtune.harvest(tmp_path / "h") as h:
        tuner[(4,)](y, x, 8, 200)
    torch.testing.assert_close(y, torch.softmax(x, -1))
    rows = costtune.load_dataset(tmp_path / "h")
    assert h.errors == [] and len(rows) == 2  # num_warps 1 and 2; TILE_N 64 / 1024 are dead
    assert (rows["BLOCK_N"] == 256).all() and (rows["ROWS_PER_PROG"] == 2).all()
    assert "TILE_N" not in rows.columns or rows["TILE_N"].isna().all()


UNGUARDED = """
import os
os.environ["TRITON_INTERPRET"] = "1"
print("top level ran", flush=True)  # no `if __name__ == "__main__":`, as Triton's tutorials
from costtune.build.pool import get_pool, shutdown_pool
assert get_pool(2).submit(int, "7").result(timeout=120) == 7
shutdown_pool(wait=True)
"""


def test_compile_workers_do_not_rerun_an_unguarded_script(tmp_path):
    """Compile workers are spawned; they must not run the user's script again (a tutorial
    has no main guard): its top level runs once."""
    script = tmp_path / "tutorial.py"
    script.write_text(UNGUARDED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("top level ran") == 1


def test_an_elementwise_maximum_is_no_reduction_and_doubts_name_each_value_once():
    """Inductor's ReLU (``maximum(0, x)``) reads as elementwise; a "config" doubt names each
    untrained value once, however many configs hold it."""
    from costtune.tune.kind import read_kind
    from costtune.tune.trained import config_doubts

    @triton.jit
    def triton_poi_fused_relu_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
        x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
        tl.store(out_ptr0 + x, tl.maximum(tl.load(in_ptr0 + x), 0.0))

    assert read_kind(triton_poi_fused_relu_0).what == "an elementwise kernel"
    columns = {"BLOCK_M": [16.0, 16.0, 64.0], "BLOCK_N": [16.0, 16.0, 64.0],
               "BLOCK_K": [32.0, 32.0, 32.0], "num_warps": [2.0, 2.0, 4.0],
               "num_stages": [3.0, 3.0, 3.0], "SPLIT_K": [1.0, 1.0, 1.0]}
    (doubt,) = config_doubts("gemm", {k: torch.tensor(v).numpy() for k, v in columns.items()})
    assert doubt[1].count("BLOCK_M=16") == 1 and doubt[1].count("num_warps=2") == 1


def test_configs_a_rule_clamps_alike_but_flags_apart_are_both_tuned_and_harvested(tmp_path):
    """An outer rule reads the config's block before an inner rule clamps it: two configs
    launch the same block with different EVEN_N, so neither the hook nor the harvest merges
    them (it kept one and recorded the other's time)."""
    inner = triton.heuristics({"TILE_N": lambda a: min(a["TILE_N"],
                                                       triton.next_power_of_2(a["N"]))})(
        rows_softmax)
    kernel = triton.heuristics({"EVEN_N": lambda a: a["N"] % a["TILE_N"] == 0})(inner)
    configs = [triton.Config({"TILE_N": n, "TILE_M": 1}) for n in (256, 512)]
    hook = costtune.prune_configs_by(top_k=2, family="softmax")["early_config_prune"]
    hook.kernel = kernel
    args = {"output_ptr": torch.empty(8, 256), "input_ptr": torch.empty(8, 256), "M": 8,
            "N": 256}
    assert len(hook(configs, args)) == 2 and hook.last.duplicates == 0
    tuner = triton.autotune(configs, key=["N"], do_bench=Bench())(kernel)
    x, y = torch.randn(8, 256), torch.empty(8, 256)
    with costtune.harvest(tmp_path / "h") as h:
        tuner[(8,)](y, x, 8, 256)
    rows = costtune.load_dataset(tmp_path / "h")
    assert h.errors == [] and sorted(rows["EVEN_N"].tolist()) == [False, True]
    assert (rows["BLOCK_N"] == 256).all()


def test_a_refused_config_leaves_a_kernel_with_rules_pruned():
    """A config Triton refuses (num_warps=None) beside rules: dropped with its reason, and
    the rest still ranked to top_k (the launch key of the refused config raised, and pruning
    fell back to benchmarking everything)."""
    kernel = triton.heuristics({"TILE_M": lambda a: max(1, 1024 // a["TILE_N"])})(rows_softmax)
    configs = [triton.Config({"TILE_N": n}, num_warps=w) for n in (256, 512, 1024)
               for w in (2, 4, 8)] + [triton.Config({"TILE_N": 256}, num_warps=None)]
    hook = costtune.prune_configs_by(top_k=2, family="softmax")["early_config_prune"]
    hook.kernel = kernel
    kept = hook(configs, _rows_args())
    assert len(kept) == 2 and "error" not in hook.last.fallbacks
    assert any("num_warps=None" in why for why in hook.last.dropped.values())


def test_what_the_model_cannot_tell_apart_is_read_per_call():
    """The knob split is made per call from that call's values: a later call whose rules
    fail (every config gets the neutral rows per program) sees X as the only difference,
    as a fresh hook does (it reused the earlier call's split)."""
    kernel = triton.heuristics({"TILE_M": lambda a: a["X"] * (a["M"] // 256)})(rows_softmax)
    configs = [triton.Config({"TILE_N": n, "X": x}) for n in (512, 1024) for x in (1, 2, 4)]

    def prune(hook, m):
        args = {**_rows_args(), "M": m}
        return [c.kwargs for c in hook(configs, args)], hook.last.knobs

    hook = costtune.prune_configs_by(top_k=2, family="softmax", widen=1)["early_config_prune"]
    hook.kernel = kernel
    prune(hook, 512)
    fresh = costtune.prune_configs_by(top_k=2, family="softmax", widen=1)["early_config_prune"]
    fresh.kernel = kernel
    assert prune(hook, 128) == prune(fresh, 128)


def test_warp_specialization_a_rule_sets_counts_in_the_shared_memory_check():
    """A rule may turn warp specialization on (``WARP_SPECIALIZE``): the shared-memory floor
    is then the warp-specialized one, as when the flag is in the configs, so a config whose
    plain pipeline would overflow is not dropped on the plain floor."""
    from helpers import masked_tile_matmul

    big = triton.Config({"BM": 32, "BN": 256, "BK": 256}, num_warps=4, num_stages=5)
    configs = [big] + [triton.Config({"BM": 64, "BN": n, "BK": 32}, num_warps=4,
                                     num_stages=3) for n in (64, 128)]
    m = n = k = 1024
    args = {"x": torch.empty(m, k, dtype=torch.float16),
            "y": torch.empty(k, n, dtype=torch.float16), "out": torch.empty(m, n),
            "m": m, "n": n, "k": k}
    dropped = {}
    for ws in (False, True):
        kernel = triton.heuristics({"WARP_SPECIALIZE": lambda a, ws=ws: ws})(masked_tile_matmul)
        hook = costtune.prune_configs_by(top_k=3, family="gemm")["early_config_prune"]
        hook.kernel = kernel
        hook(configs, args)
        dropped[ws] = hook.last.dropped
    assert any("shared memory" in why for why in dropped[False].values())
    assert dropped[True] == {}
