"""Feasibility before ranking: what surely cannot launch is never kept, nothing that can is
dropped; configs the model cannot tell apart take one slot each; values the training data
never had are a doubt; warnings never raise into the tuning call."""

from __future__ import annotations

import itertools
import logging
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import triton
import triton.language as tl
from helpers import ours

import costtune
from costtune.hardware import H200
from costtune.model.features import config_rows
from costtune.model.xgb import CostModel
from costtune.tune import feasibility
from costtune.tune.feasibility import meta_args, operand_alignment, shared_floor
from costtune.tune.trained import build, load_trained
from costtune.types import Config

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "h200"
LIMIT = H200.max_shared_per_block
REPO = Path(__file__).resolve().parents[1]
# The unfiltered GEMM list of the issue: 384 configs, 56 over the limit by the tutorial's
# estimate stages * (BM*BK + BK*BN) * 2 bytes.
UNFILTERED = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w,
                            num_stages=s)
              for m, n, k, w, s in itertools.product((32, 64, 128, 256), (32, 64, 128, 256),
                                                     (32, 64, 128), (4, 8), (2, 3, 4, 5))]
FIVE_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (4096, 1024, 4096), (2048, 2048, 2048),
               (1024, 8192, 4096)]


def tutorial_estimate(c) -> int:
    kw = c.kwargs
    return c.num_stages * (kw["BLOCK_M"] * kw["BLOCK_K"] + kw["BLOCK_K"] * kw["BLOCK_N"]) * 2


def gemm_args(m, n, k):
    return {**meta_args("gemm", {"M": m, "N": n, "K": k}, "float16"), "M": m, "N": n, "K": k}


def floor_of(config, m, n, k) -> int:
    p = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    return shared_floor("gemm", {"M": m, "N": n, "K": k}, p, dtype="float16",
                        aligned=operand_alignment("gemm", gemm_args(m, n, k)), target=H200)


@pytest.fixture(scope="module")
def compiled_rows() -> pd.DataFrame:
    """Every dataset row of the families' original kernels with its compiled shared memory
    (features_<family>.parquet). The family floors describe those kernels; each other
    implementation's own floor is tested in tests/test_kernels_<name>.py."""
    frames = []
    for family in ("gemm", "softmax", "attention"):
        rows = costtune.load_dataset(DATASET, kernel=family)
        rows = rows[rows["implementation"] == family]
        feats = pd.read_parquet(DATASET / f"features_{family}.parquet",
                                columns=["workload", "config", "shared_bytes", "compile_status"])
        frames.append(rows.merge(feats, on=["workload", "config"], validate="one_to_one"))
    return pd.concat(frames, ignore_index=True)


def test_the_unfiltered_list_is_the_issues():
    assert len(UNFILTERED) == 384 and sum(tutorial_estimate(c) > LIMIT for c in UNFILTERED) == 56


def test_floor_never_exceeds_the_compiled_size(compiled_rows):
    """The lower bound each family's check drops by, against the shared memory every dataset
    config compiled to: never above it (no config that can launch is dropped), and for aligned
    GEMMs without split-K equal to it (so a config dropped there surely cannot launch)."""
    from costtune.kernels import PROBLEM_KEYS

    df = compiled_rows
    # The only configs that did not compile: split 256x256 GEMM tiles with N % 16 != 0, whose
    # atomic epilogue needs 262,144 B (measured on the H200); the gemm space rules them out.
    failed = df[df["compile_status"] != "ok"]
    assert set(failed["kernel"]) == {"gemm"} and len(failed) == 42
    assert ((failed["BLOCK_M"] == 256) & (failed["BLOCK_N"] == 256) & (failed["SPLIT_K"] > 1)
            & (failed["N"] % 16 != 0)).all()
    assert (failed["status"] == "out_of_resources").all()
    df = df[df["compile_status"] == "ok"].reset_index(drop=True)
    floors = np.zeros(len(df), dtype=np.int64)
    for (kernel, _), group in df.groupby(["kernel", "workload"], sort=False):
        first = group.iloc[0]
        problem = {k: int(first[k]) for k in PROBLEM_KEYS[kernel]}
        args = meta_args(kernel, problem, first["dtype"])
        cols = {c: group[c].to_numpy(dtype=float) for c in
                ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "ROWS_PER_PROG", "num_warps",
                 "num_stages") if c in group}
        floors[group.index] = shared_floor(kernel, problem, cols, dtype=first["dtype"],
                                           aligned=operand_alignment(kernel, args), target=H200)
    assert (floors <= df["shared_bytes"].to_numpy()).all()
    gemm = (df["kernel"] == "gemm").to_numpy()
    # (nullable columns: other implementations' parts lack SPLIT_K)
    aligned = gemm & (df["K"] % 16 == 0).to_numpy(dtype=bool, na_value=False) & (
        df["N"] % 16 == 0).to_numpy(dtype=bool, na_value=False) & (
        df["SPLIT_K"] == 1).to_numpy(dtype=bool, na_value=False)
    assert aligned.sum() > 15000
    assert (floors[aligned] == df["shared_bytes"].to_numpy()[aligned]).all()
    attention = (df["kernel"] == "attention").to_numpy()
    assert (floors[attention] == df["shared_bytes"].to_numpy()[attention]).all()
    assert (floors[gemm] == df["shared_bytes"].to_numpy()[gemm]).mean() > 0.95


@pytest.mark.slow
def test_the_floor_matches_an_aot_compile(tmp_path):
    """AOT compiles for sm_90 (spawned workers, outside the interpreter): at 8192^3 the old top
    pick (128x256x64, 5 stages) needs 245,760 B and cannot launch, with 4 stages it fits; at
    1000^3 (unaligned rows) 5 stages compile to 49,152 B and launch."""
    from costtune.features import compiled_features

    cases = [((8192, 8192, 8192), 5, "out_of_resources"), ((8192, 8192, 8192), 4, "ok"),
             ((1000, 1000, 1000), 5, "ok")]
    rows = pd.DataFrame([{"kernel": "gemm", "workload": f"w{i}", "dtype": "float16", "M": m,
                          "N": n, "K": k, "config": f"BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,"
                          f"SPLIT_K=1,num_warps=8,num_stages={s}"}
                         for i, ((m, n, k), s, _) in enumerate(cases)])
    table = compiled_features(rows, workers=1, cache_dir=tmp_path)
    for (shape, stages, status), (_, got) in zip(cases, table.iterrows()):
        config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8,
                               num_stages=stages)
        assert got["compile_status"] == status
        assert got["shared_bytes"] == floor_of(config, *shape)
    assert [floor_of(triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64},
                                   num_warps=8, num_stages=s), 8192, 8192, 8192) > LIMIT
            for s in (5, 4)] == [True, False]


def with_split_k(configs):
    """The configs as the hook scores them: the family's neutral SPLIT_K=1 filled in."""
    return [Config({**c.kwargs, "SPLIT_K": 1}, num_warps=c.num_warps, num_stages=c.num_stages)
            for c in configs]


@pytest.mark.parametrize("ranking", ["h200", "biggest_first"])
def test_unfiltered_list_keeps_nothing_that_cannot_launch(ranking, record, monkeypatch):
    """The goal on the five shapes: at k = 1, 4, 8 no kept config needs more shared memory
    than the H200 has, with the shipped model and with a ranking that puts the largest
    pipelines first (the hook's scores replaced by its estimate of shared memory), whose
    own top k holds such configs at every shape and k. (The shipped GEMM model's own top 8
    holds none on these shapes since its original weight is 16; with 8 it held several.)"""
    model = CostModel.load_for("h200", "gemm")[0]
    if ranking == "biggest_first":
        from costtune.tune import ranking as scoring

        monkeypatch.setattr(scoring, "score", lambda model, features: (
            features["smem_bytes_est"].to_numpy(dtype=float)))
    before = after = 0
    for (m, n, k), top_k in itertools.product(FIVE_SHAPES, (1, 4, 8)):
        pruner = costtune.prune_configs_by("h200", top_k, family="gemm")["early_config_prune"]
        kept = pruner(UNFILTERED, gemm_args(m, n, k))
        after += sum(floor_of(c, m, n, k) > LIMIT for c in kept)
        if ranking == "h200":
            ranked = [c.to_triton() for c in model.top_k(
                "gemm", {"M": m, "N": n, "K": k}, "float16", with_split_k(UNFILTERED), top_k)]
        else:
            ranked = sorted(UNFILTERED, key=tutorial_estimate, reverse=True)[:top_k]
            assert all(floor_of(c, m, n, k) > LIMIT for c in ranked)
            # the replaced scores ranked what it kept: the largest pipeline that fits first
            fits = [c for c in UNFILTERED if floor_of(c, m, n, k) <= LIMIT]
            assert tutorial_estimate(kept[0]) == max(map(tutorial_estimate, fits))
        before += sum(floor_of(c, m, n, k) > LIMIT for c in ranked)
        assert len(kept) >= top_k and len(pruner.last.dropped) == 54
    assert after == 0 and (before > 0 or ranking == "h200")
    messages = [m for m in ours(record) if "cannot launch" in m]
    assert messages and "245,760 B" in " ".join(messages)


@pytest.mark.slow
def test_random_shapes_top_pick_always_launches():
    """1,000 random aligned shapes (sizes multiples of 16, log-uniform over the training
    range): the kept top pick never needs more shared memory than the H200 has, where the
    model's own best 16 hold configs that do (its own top pick no longer does on these shapes,
    nor, since it learned all six GEMM implementations, its best 8)."""
    rng = np.random.default_rng(0)
    lo, hi = np.log2([16, 256, 512]), np.log2([8192, 16384, 16384])
    shapes = [tuple(int(16 * max(1, round(2 ** x / 16))) for x in rng.uniform(lo, hi))
              for _ in range(1000)]
    model = CostModel.load_for("h200", "gemm")[0]
    pruner = costtune.prune_configs_by("h200", 1, family="gemm", widen=1)["early_config_prune"]
    configs = with_split_k(UNFILTERED)
    rows = pd.concat([config_rows("gemm", dict(zip("MNK", s)), "float16", configs)
                      for s in shapes], ignore_index=True)
    scores = model.predict(rows).reshape(len(shapes), len(configs))
    before = after = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s, row in zip(shapes, scores):
            kept = pruner(UNFILTERED, gemm_args(*s))
            after += floor_of(kept[0], *s) > LIMIT
            before += sum(floor_of(UNFILTERED[int(i)], *s) > LIMIT
                          for i in np.argsort(-row, kind="stable")[:16])
    assert after == 0 and before > 0


def test_launch_options_triton_or_the_gpu_refuse(record):
    from triton.backends.nvidia.compiler import CUDAOptions

    with pytest.raises(AssertionError, match="power of 2"):
        CUDAOptions(num_warps=3)  # what Triton does with num_warps=3
    good = [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=w)
            for w in (4, 8)]
    bad = [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=w,
                         num_stages=s)
           for w, s in [(3, 3), (0, 3), (64, 3), (4.0, 3), (True, 3), (None, 3), (4, -1),
                        (4, 1.5)]]
    bad += [triton.Config({"BLOCK_M": v, "BLOCK_N": 64, "BLOCK_K": 32}) for v in (0, 1.5, True)]
    bad += [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_ctas=0)]
    pruner = costtune.prune_configs_by("h200", 8, family="gemm")["early_config_prune"]
    kept = pruner(bad + good, gemm_args(512, 512, 512))
    assert kept == good and len(pruner.last.dropped) == len(bad)
    why = " ".join(pruner.last.dropped.values())
    for word in ("num_warps=3 is not a power of two", "2048 threads", "num_warps=4.0",
                 "num_warps=True", "num_stages=-1", "BLOCK_M=0", "BLOCK_M=1.5",
                 "BLOCK_M=True", "num_ctas=0"):
        assert word in why, word
    assert len([m for m in ours(record) if "cannot launch" in m]) == 1
    pruner(bad + good, gemm_args(512, 512, 512))
    assert len(ours(record)) == 1  # once per kernel
    # Nothing can launch: everything is kept (Triton then fails as it would without us).
    only_bad = costtune.prune_configs_by("h200", 1, family="gemm")["early_config_prune"]
    assert only_bad(bad[:3], gemm_args(512, 512, 512)) == bad[:3]


@pytest.mark.parametrize("value", [1.5, True, 0])
def test_problem_sizes_that_are_not_integers(value, record):
    configs = UNFILTERED[:8]
    pruner = costtune.prune_configs_by("h200", 1, family="gemm")["early_config_prune"]
    kept = pruner(configs, {**gemm_args(512, 512, 512), "M": value})
    assert kept == configs  # the launch cannot be described: every config is benchmarked
    assert any(f"size M={value!r} is not a positive integer" in m for m in ours(record))


def test_untold_knobs_take_one_slot_each(record):
    """GROUP_SIZE_M and warp_specialize mean nothing to the model: the top 8 are 8 distinct
    configs, the knobs' values vary across them, and one warning names the knobs."""
    base = [c for c in UNFILTERED if tutorial_estimate(c) <= LIMIT]
    configs = [triton.Config({**c.kwargs, "GROUP_SIZE_M": g, "warp_specialize": ws},
                             num_warps=c.num_warps, num_stages=c.num_stages)
               for c in base for g in (1, 8) for ws in (False, True)]
    pruner = costtune.prune_configs_by("h200", 8, family="gemm", range_margin=None)
    pruner = pruner["early_config_prune"]
    kept = pruner(configs, gemm_args(1000, 1000, 1000))
    distinct = {(tuple(sorted((k, v) for k, v in c.kwargs.items() if k.startswith("BLOCK"))),
                 c.num_warps, c.num_stages) for c in kept}
    assert len(kept) == 8 and len(distinct) == 8
    assert {c.kwargs["GROUP_SIZE_M"] for c in kept} == {1, 8}
    assert {c.kwargs["warp_specialize"] for c in kept} == {False, True}
    assert pruner.last.knobs == {"GROUP_SIZE_M": [1, 8], "warp_specialize": [False, True]}
    pruner(configs, gemm_args(2000, 1000, 1000))
    messages = ours(record)
    assert len(messages) == 1 and "GROUP_SIZE_M" in messages[0] and "warp_specialize" in \
        messages[0]
    # Once every distinct config is in, the variants follow: all 4 variants of the top config
    # are kept before any config is left out entirely only when k covers them all.
    ranked = [configs[i] for i in pruner.last.ranked]
    assert len(ranked) == len(configs)


def test_values_outside_the_training_data_are_a_doubt(record):
    """256x256 tiles at 4 warps (512 accumulator elements per thread, trained up to 256),
    BLOCK_M=512, num_warps=16 and num_stages=9 never appear in the training rows: when one
    ranks among those kept, k is widened with one warning; when none does, nothing happens."""
    odd = [triton.Config({"BLOCK_M": 512, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=8),
           triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=16),
           triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_stages=9)]
    pruner = costtune.prune_configs_by("h200", 1, family="gemm")["early_config_prune"]
    assert len(pruner(odd, gemm_args(4096, 4096, 4096))) == 3  # widen=4, capped at 3
    assert "config" in pruner.last.fallbacks
    text = " ".join(ours(record))
    for word in ("BLOCK_M=512", "num_warps=16", "num_stages=9"):
        assert word in text or "outside the training data" in text
    # At 4096^3 the unfiltered list's 256x256 tiles at 4 warps (512 elements per thread) are
    # untrained, but the shipped model, trained on tiles up to 256 elements per thread (they
    # spill and run 2.7-10x slower), ranks none of them above its 8th trained config: exactly
    # 8 kept, no doubt. (Before the 256-element rows were measured, 8 untrained tiles ranked
    # there and 16 were kept; the rule itself is tested with a stand-in order in
    # test_untrained_rule_holds_after_stage_two.)
    pruner = costtune.prune_configs_by("h200", 8, family="gemm")["early_config_prune"]
    kept = pruner(UNFILTERED, gemm_args(4096, 4096, 4096))
    assert len(kept) == 8 and "config" not in pruner.last.fallbacks
    assert all(c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] <= 128 * 32 * c.num_warps for c in kept)
    ranked = [UNFILTERED[i] for i in pruner.last.ranked]
    assert kept == ranked[:8]
    assert any(c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] > 256 * 32 * c.num_warps
               for c in UNFILTERED if tutorial_estimate(c) <= LIMIT)
    # Only trained values: no doubt.
    trained = [c for c in UNFILTERED if c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"]
               <= 256 * 32 * c.num_warps and tutorial_estimate(c) <= LIMIT]
    pruner = costtune.prune_configs_by("h200", 8, family="gemm")["early_config_prune"]
    assert len(pruner(trained, gemm_args(4096, 4096, 4096))) == 8
    assert pruner.last.fallbacks == []


def test_trained_values_of_other_rows_drive_the_kept_count():
    """A replay passes the values its own model learned from (``trained_from_rows``): a config
    outside them ranked among the first k is measured besides the k best trained ones."""
    from costtune.tune.trained import keep_untrained, trained_from_rows

    rows = pd.DataFrame({"kernel": "gemm", "dtype": "float16", "M": 1024, "N": 1024,
                         "K": 1024, "BLOCK_M": [64, 128], "BLOCK_N": [64, 128],
                         "BLOCK_K": 32, "SPLIT_K": 1, "num_warps": 4, "num_stages": 3})
    trained = trained_from_rows(rows, "gemm")
    assert trained["gemm"]["values"]["BLOCK_M"] == [64, 128]
    assert trained["gemm"]["ranges"]["elems_per_thread"] == [32.0, 128.0]
    cols = {"BLOCK_M": np.array([256, 64, 128, 64]), "BLOCK_N": np.array([128, 64, 128, 64]),
            "num_warps": np.array([4, 4, 4, 4])}
    elems = cols["BLOCK_M"] * cols["BLOCK_N"] / (32 * cols["num_warps"])
    n, doubts = keep_untrained("gemm", cols, elems, [0, 1, 2, 3], k=2, cap=4, trained=trained)
    assert n == 3 and doubts and "BLOCK_M=256" in doubts[0][1]
    assert keep_untrained("gemm", cols, elems, [1, 2, 0, 3], k=2, cap=4,
                          trained=trained) == (2, [])


def test_a_split_deeper_than_any_trained_split_counts_as_untrained():
    """SPLIT_K values that were trained, on a grid many waves deeper than any split trained:
    the rows say when a split pays only up to their waves, so such configs are measured
    besides the k best trained ones, with the reason in the doubt."""
    from costtune.tune.trained import SPLIT_WAVES, keep_untrained, trained_from_rows

    rows = pd.DataFrame({"kernel": "gemm", "dtype": "float16", "M": 512, "N": 512,
                         "K": 8192, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64,
                         "SPLIT_K": [1, 2, 4], "num_warps": 4, "num_stages": 3})
    trained = trained_from_rows(rows, "gemm")
    # 16 tiles x 4 splits = 64 programs over 132 SMs.
    assert trained["gemm"]["ranges"][SPLIT_WAVES] == [32 / 132, 64 / 132]
    cols = {"SPLIT_K": np.array([4, 1, 2, 1]), "BLOCK_M": np.full(4, 128),
            "BLOCK_N": np.full(4, 128), "num_warps": np.full(4, 4)}
    elems = np.full(4, 128.0)
    waves = np.array([4096 * 4, 4096, 2048, 4096]) / 132  # at 8192^2: 4,096 tiles
    n, doubts = keep_untrained("gemm", cols, elems, [0, 1, 2, 3], k=2, cap=4,
                               trained=trained, waves=waves)
    assert n == 4 and "SPLIT_K=4 over 124 waves of programs" in doubts[0][1]
    assert "SPLIT_K=2 over 15.5 waves" in doubts[0][1]
    # Without waves (or without split rows in training) nothing changes.
    assert keep_untrained("gemm", cols, elems, [1, 3, 0, 2], k=2, cap=4,
                          trained=trained, waves=waves) == (2, [])
    assert keep_untrained("gemm", cols, elems, [0, 1, 2, 3], k=2, cap=4,
                          trained=trained) == (2, [])
    unsplit = trained_from_rows(rows[rows["SPLIT_K"] == 1], "gemm")
    assert SPLIT_WAVES not in unsplit["gemm"]["ranges"]


def test_the_hook_measures_deep_splits_besides_its_top_k():
    """Through the public hook with the shipped files: a triton.ops-style split-K list at
    4096x4096x32768 (1,024 tiles of 128x128, so SPLIT_K 4 and 8 fill 31 and 62 waves, where
    the trained splits stop at a few). With k one more than the unsplit configs the shipped
    model ranks above its first split (read from its ranking, so that the premise does not
    hang on one model), the hook keeps its k best-ranked unsplit configs and measures the
    splits above them besides, naming why."""
    configs = [triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": bk, "SPLIT_K": sk},
                             num_warps=w, num_stages=3)
               for bk, sk, w in itertools.product((32, 64), (1, 4, 8), (4, 8))]
    args = gemm_args(4096, 4096, 32768)
    probe = costtune.prune_configs_by("h200", 1, family="gemm")["early_config_prune"]
    probe(configs, args)
    splits = [configs[i].kwargs["SPLIT_K"] for i in probe.last.ranked]
    k = splits.index(next(s for s in splits if s > 1)) + 1
    assert k <= 3, f"premise: the model ranks a deep split among its first ({splits})"
    pruner = costtune.prune_configs_by("h200", k, family="gemm")["early_config_prune"]
    kept = pruner(configs, args)
    split = [c for c in kept if c.kwargs["SPLIT_K"] > 1]
    assert len(kept) - len(split) == k and split
    assert kept[-1].kwargs["SPLIT_K"] == 1  # the second unsplit one closes the list
    (doubt,) = [text for kind, text in pruner.last.notes if kind == "config"]
    assert doubt.startswith(f"{len(split)} gemm config(s)") and "waves of programs" in doubt


@triton.jit
def row_softmax(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(input_ptr + row * input_row_stride + cols, mask=cols < n_cols,
                other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(output_ptr + row * output_row_stride + cols, e / tl.sum(e, axis=0),
             mask=cols < n_cols)


def test_tiles_far_larger_than_the_problem_never_crowd_out_trained_ones():
    """A softmax list of 1024-8192 blocks at 1000 columns: the dataset never holds a block
    over next_pow2(cols) there, and the model ranks the 4096/8192 ones first. They are
    measured only besides the top_k best trained configs, with a warning saying why."""
    configs = [triton.Config({"BLOCK_SIZE": b}, num_warps=w, num_stages=s)
               for b in (1024, 2048, 4096, 8192) for w in (4, 8, 16) for s in (1, 2, 3)]
    tuned = costtune.autotune(configs, key=["n_cols"], top_k=4, family="softmax",
                              do_bench=lambda fn, quantiles=None, **kw: (fn(), [1.0] * 3)[1],
                              precompile=False)(row_softmax)
    x = torch.randn(8, 1000)
    y = torch.empty_like(x)
    with pytest.warns(costtune.CosttuneWarning, match=r"BLOCK_N=\d+ at cols=1000 \(trained "
                                                      r"up to 1024\)"):
        tuned[(8,)](y, x, x.stride(0), y.stride(0), 8, 1000)
    torch.testing.assert_close(y, torch.softmax(x, 1))
    last = tuned.early_config_prune.last
    kept = [configs[i] for i in last.ranked[:last.k]]
    assert sum(c.kwargs["BLOCK_SIZE"] == 1024 for c in kept) == 4 and last.k == 16
    assert "config" in last.fallbacks
    assert {c.kwargs["BLOCK_SIZE"] for c in kept} > {1024}  # the ones ranked first, measured
    # At 8192 columns every block is trained-size: k = 4, no doubt.
    x = torch.randn(2, 8192)
    y = torch.empty_like(x)
    tuned[(2,)](y, x, x.stride(0), y.stride(0), 2, 8192)
    assert tuned.early_config_prune.last.k == 4


def test_a_costtune_kernels_pruner_called_directly_reads_its_kernel():
    """As the docs' "See what it decided" calls it: without a launch (no Triton frame up the
    stack), the pruner still knows its kernel, so the softmax model reads its source."""
    configs = [triton.Config({"BLOCK_SIZE": 1024}, num_warps=w, num_stages=s)
               for w in (1, 2, 4, 8) for s in (1, 3)]
    tuned = costtune.autotune(configs, key=["n_cols"], top_k=2)(row_softmax)
    x = torch.empty(4096, 1000, device="meta")
    named = dict(zip(row_softmax.arg_names, [x, x, 1000, 1000, 4096, 1000]))
    kept = tuned.early_config_prune(configs, named, grid=(4096,), warmup=False)
    assert len(kept) == 2 and tuned.early_config_prune.last.fallbacks == []


def test_trained_values_file_matches_the_dataset():
    """The shipped file is what its generator computes from the dataset."""
    assert build(DATASET) == load_trained()


def test_warnings_never_raise_out_of_the_hook(caplog):
    """Under python -W error / filterwarnings=error a doubt still widens k and a dropped
    config is still dropped; the message goes to the costtune logger."""
    configs = UNFILTERED
    pruner = costtune.prune_configs_by("h200", 1, family="gemm")["early_config_prune"]
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="costtune"):
        warnings.simplefilter("error")
        kept = pruner(configs, gemm_args(65536, 4096, 4096))  # drops 54, M out of range
    assert len(kept) == 4 and pruner.last.fallbacks == ["infeasible", "range"]
    assert "cannot launch" in caplog.text and pruner.last.warnings


def test_refuse_for_family_and_alignment():
    a = torch.empty(64, 1000, dtype=torch.float16)
    assert operand_alignment("gemm", {"a": a, "b": torch.empty(1000, 64)}) == {
        "a": False, "b": True}
    assert operand_alignment("gemm", {"a": a}) == {"a": False, "b": False}
    params = [{"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 8,
               "num_stages": s} for s in (4, 5)]
    args = gemm_args(8192, 8192, 8192)
    out = feasibility.refuse_for_family("gemm", {"M": 8192, "N": 8192, "K": 8192}, "float16",
                                        params, args=args, target=H200)
    assert list(out) == [1] and "245,760 B" in out[1]
    unaligned = gemm_args(1000, 1000, 1000)
    assert feasibility.refuse_for_family("gemm", {"M": 1000, "N": 1000, "K": 1000}, "float16",
                                         params, args=unaligned, target=H200) == {}


def test_untrained_rule_holds_after_stage_two(monkeypatch):
    """Stage 2 re-orders the shortlist; the kept list still holds the k best trained configs
    (here a stand-in stage 2 that moves every untrained config to the front)."""
    import numpy as np

    def untrained(p):
        return p["BLOCK_M"] * p["BLOCK_N"] > 256 * 32 * p["num_warps"]

    def stage2(pruner, launch, params, features, keys, order, decision, notes, *_):
        first = [j for j in order if untrained(params[j])]  # wherever stage 1 ranked them
        decision.stage2 = True
        return np.array(first + [j for j in order if j not in first])

    monkeypatch.setattr("costtune.tune.stage2.rerank", stage2)
    pruner = costtune.prune_configs_by("h200", 8, family="gemm", two_stage=True,
                                       widen=8)["early_config_prune"]
    kept = pruner(UNFILTERED, gemm_args(4096, 4096, 4096))
    flags = [c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] > 256 * 32 * c.num_warps for c in kept]
    assert pruner.last.stage2 and any(flags)
    assert sum(not f for f in flags) == 8 and not flags[-1]
    assert pruner.last.k == len(kept) <= 64


def test_warp_specialize_at_the_launch_counts_as_in_every_config():
    """Tutorials 06 and 09 pass warp_specialize at the launch: every config's shared-memory
    floor is then the warp-specialized one, as when the flag is in the configs."""
    import numpy as np
    import triton

    from costtune.tune.feasibility import launch_traits, with_launch_traits

    configs = [triton.Config({"BLOCK_M": 64}), triton.Config({"BLOCK_M": 64,
                                                              "WARP_SPECIALIZE": True})]
    traits = launch_traits(configs)
    assert traits["warp_specialize"].tolist() == [0.0, 1.0]
    assert with_launch_traits(traits, {"warp_specialize": True})["warp_specialize"].tolist() \
        == [1.0, 1.0]
    for args in ({"warp_specialize": False}, {"ws": True}, {"warp_specialize": np.ones(2)}):
        assert with_launch_traits(traits, args)["warp_specialize"].tolist() == [0.0, 1.0]
