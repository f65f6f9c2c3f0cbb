"""What a triton.Config may hold beyond kwargs, warps and stages, and autotune's key, as the
pruning hook reads them (twenty-fifth session's review): configs Triton tells apart by their
pre_hook, ir_override or a value's type are not merged; tl.constexpr values are sizes; the
shared-memory floor assumes num_stages buffers only where the kernel pipelines its dots;
variants the model cannot tell apart go by their values (a default first); a key naming no
argument is said; rank 0's broadcast picks the same config. Pruner calls on meta tensors (no
launch)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import costtune
from costtune.features.pipelining import CONFIG, dot_stages
from costtune.tune.ranks import choice, config_from


@triton.jit
def _offsets(BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    return (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M),
            tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N), tl.arange(0, BLOCK_K))


@triton.jit
def _a(a, rm, rk, K):
    return tl.load(a + rm[:, None] * K + rk[None, :])


@triton.jit
def _b(b, rk, rn, N):
    return tl.load(b + rk[:, None] * N + rn[None, :])


# Each kernel's dot sits where its name says (the loads and offsets in helpers): what
# dot_stages reads.
@triton.jit
def looped(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
           BLOCK_K: tl.constexpr):
    rm, rn, rk = _offsets(BLOCK_M, BLOCK_N, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        acc += tl.dot(_a(a, rm, k0 + rk, K), _b(b, k0 + rk, rn, N))
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def one_k_tile(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """K fits one tile: no loop, so its operands are staged once whatever num_stages says."""
    rm, rn, rk = _offsets(BLOCK_M, BLOCK_N, BLOCK_K)
    tl.store(c + rm[:, None] * N + rn[None, :], tl.dot(_a(a, rm, rk, K), _b(b, rk, rn, N)))


@triton.jit
def pinned(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
           BLOCK_K: tl.constexpr):
    """Its K loop pins one stage (tl.range(..., num_stages=1))."""
    rm, rn, rk = _offsets(BLOCK_M, BLOCK_N, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, num_stages=1):
        acc += tl.dot(_a(a, rm, k0 + rk, K), _b(b, k0 + rk, rn, N))
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def unrolled(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_K: tl.constexpr):
    rm, rn, rk = _offsets(BLOCK_M, BLOCK_N, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for i in tl.static_range(2):
        acc += tl.dot(_a(a, rm, i * BLOCK_K + rk, K), _b(b, i * BLOCK_K + rk, rn, N))
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def _dot_of(x, y):
    return tl.dot(x, y)


@triton.jit
def helper_twice(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    """One dot helper called outside any loop, then inside a pipelined one."""
    rm, rn, rk = _offsets(BLOCK_M, BLOCK_N, BLOCK_K)
    acc = _dot_of(_a(a, rm, rk, K), _b(b, rk, rn, N))
    for k0 in range(BLOCK_K, K, BLOCK_K):
        acc += _dot_of(_a(a, rm, k0 + rk, K), _b(b, k0 + rk, rn, N))
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


def _meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def prune(kernel, configs, *, top_k=8, size=4096, key=("M", "N", "K")):
    """The hook's kept configs and decision for one 'size'-cubed fp16 call of ``kernel``."""
    tuner = triton.autotune(configs, key=list(key), prune_configs_by=costtune.prune_configs_by(
        "h200", top_k=top_k, family="gemm"))(kernel)
    pruner = tuner.early_config_prune
    pruner.kernel = tuner
    named = dict(a=_meta(size, size), b=_meta(size, size),
                 c=_meta(size, size, dtype=torch.float32), M=size, N=size, K=size)

    def grid(meta):
        return (triton.cdiv(size, meta["BLOCK_M"]), triton.cdiv(size, meta["BLOCK_N"]))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = pruner(configs, named, grid=grid, warmup=False)
    return kept, pruner.last, [str(w.message) for w in caught]


def tile(m=128, n=128, k=64, **kw):
    return {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, **kw}


def test_configs_told_apart_only_by_their_pre_hook_or_ir_override_each_keep_a_slot():
    def zero_a(nargs):
        pass

    def zero_b(nargs):
        pass

    configs = [triton.Config(tile(), num_warps=4, num_stages=3, pre_hook=h)
               for h in (zero_a, zero_b, zero_a)]  # the third repeats the first
    configs += [triton.Config(tile(), num_warps=4, num_stages=3, ir_override=f"/tmp/{x}.ttgir")
                for x in ("a", "b")]
    kept, decision, _ = prune(looped, configs, top_k=8)
    assert decision.duplicates == 1 and len(kept) == 4
    assert {id(c) for c in kept} == {id(c) for c in (configs[0], *configs[1:2], *configs[3:])}
    assert {c.ir_override for c in kept} == {None, "/tmp/a.ttgir", "/tmp/b.ttgir"}


def test_a_string_value_and_a_number_of_the_same_text_are_two_configs():
    configs = [triton.Config(tile(ACT=v), num_warps=4, num_stages=3) for v in (1, "1")]
    kept, decision, said = prune(looped, configs, top_k=2)
    assert len(kept) == 2 and decision.duplicates == 0
    assert any("ACT (1, '1')" in m for m in said)


def test_constexpr_wrapped_sizes_are_sizes():
    configs = [triton.Config(tile(m=tl.constexpr(64)), num_warps=4, num_stages=3),
               triton.Config(tile(m=128), num_warps=4, num_stages=3)]
    kept, decision, _ = prune(looped, configs, top_k=2)
    assert len(kept) == 2 and not decision.dropped


@pytest.mark.parametrize("kernel, stages", [(looped, CONFIG), (one_k_tile, 1), (pinned, 1),
                                            (unrolled, 1), (helper_twice, CONFIG)])
def test_how_deep_a_kernels_dots_are_buffered_is_read_from_its_source(kernel, stages):
    assert dot_stages(kernel) == stages


def test_the_shared_memory_floor_counts_stages_only_where_the_kernel_pipelines():
    """256 x 256 x 128 fp16 at 3 stages: 384 KiB if pipelined (over sm_90's 227 KiB, dropped);
    staged once where the kernel has no K loop or pins one stage (131,072 B compiled for
    sm_90 without a loop, the review's AOT check): kept."""
    configs = [triton.Config(tile(256, 256, 128), num_warps=8, num_stages=3),
               triton.Config(tile(), num_warps=4, num_stages=3)]
    kept, decision, _ = prune(looped, configs)
    assert len(kept) == 1 and "shared memory" in next(iter(decision.dropped.values()))
    for kernel in (one_k_tile, pinned, unrolled):
        kept, decision, _ = prune(kernel, configs)
        assert len(kept) == 2 and not decision.dropped, kernel.__name__


def test_an_unpipelined_dot_still_stages_its_operands_once():
    """256 x 256 x 256 fp16 without a K loop: one copy of A and B is 262,144 B (compiled for
    sm_90: exactly that, over the 232,448 B limit), so it is dropped whatever num_stages says;
    256 x 256 x 128 (131,072 B) is kept. The same one copy at num_stages 1 on a looped kernel
    (its num_stages 2 needs two copies, 524,288 B)."""
    configs = [triton.Config(tile(256, 256, 256), num_warps=8, num_stages=s) for s in (1, 2)]
    configs.append(triton.Config(tile(256, 256, 128), num_warps=8, num_stages=1))
    for kernel in (one_k_tile, pinned, looped):
        kept, decision, _ = prune(kernel, configs)
        assert [c.kwargs["BLOCK_K"] for c in kept] == [128], kernel.__name__
        reasons = [decision.dropped[k] for k in decision.dropped if "num_stages=1" in k]
        assert len(reasons) == 1 and "needs at least 262,144 B" in reasons[0], kernel.__name__


def test_variants_the_model_cannot_tell_apart_keep_the_default_then_ascending_values():
    """One tile at five maxnreg values scores alike: top_k=2 keeps the default (None) and the
    smallest number, in any list order, not the first two by the text of their keys (128,
    168)."""
    configs = [triton.Config(tile(), num_warps=8, num_stages=3, maxnreg=r)
               for r in (128, 232, None, 168, 96)]
    for order in (configs, configs[::-1]):
        kept, _, _ = prune(looped, order, top_k=2)
        assert [c.maxnreg for c in kept] == [None, 96]
    as_numpy = [triton.Config(tile(GROUP=np.int64(g)), num_warps=8, num_stages=3)
                for g in (16, 2, 8, 4)]  # and numbers of other types: as numbers
    kept, _, _ = prune(looped, as_numpy, top_k=2)
    assert [int(c.kwargs["GROUP"]) for c in kept] == [2, 4]
    wrapped = [triton.Config(tile(GROUP=tl.constexpr(g)), num_warps=8, num_stages=3)
               for g in (16, 2, 8, 4)]
    kept, _, _ = prune(looped, wrapped, top_k=2)
    assert [c.kwargs["GROUP"].value for c in kept] == [2, 4]


def test_a_key_naming_no_argument_is_an_error_in_costtune_autotune_and_said_by_the_hook():
    configs = [triton.Config(tile(), num_warps=4, num_stages=3),
               triton.Config(tile(m=64), num_warps=4, num_stages=3)]
    with pytest.raises(ValueError, match=r"autotune key \['k'\] names no argument"):
        costtune.autotune(configs, key=["M", "N", "k"])(looped)
    with pytest.raises(ValueError, match="list of argument names"):
        costtune.autotune(configs, key="M")(looped)
    _, decision, said = prune(looped, configs, key=("M", "N", "k"))
    assert any("['k'] names no argument" in m for m in said)
    assert ("key" in decision.fallbacks)


def test_explain_shows_num_ctas_as_triton_takes_it():
    configs = [triton.Config(tile(), num_warps=4, num_stages=3, num_ctas=c) for c in (1, 2)]
    tuned = costtune.autotune(configs, key=["M", "N", "K"], family="gemm")(looped)
    size = 4096
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = costtune.explain(tuned, _meta(size, size), _meta(size, size),
                               _meta(size, size, dtype=torch.float32), size, size, size,
                               grid=(32, 32))
    assert out.knobs["num_ctas"] == [1, 2]


def test_rank0s_choice_is_the_same_config_on_every_rank():
    """Configs alike but for their pre_hook share a key: the broadcast names the position."""
    def hook_a(nargs):
        pass

    def hook_b(nargs):
        pass

    configs = [triton.Config(tile(), num_warps=4, num_stages=3, pre_hook=h)
               for h in (hook_a, hook_b)]
    sent = choice(configs[1], configs)
    assert config_from(sent, configs) is configs[1]
    other_rank = [triton.Config(tile(), num_warps=4, num_stages=3, pre_hook=h)
                  for h in (hook_a, hook_b)]
    assert config_from(sent, other_rank) is other_rank[1]
    assert config_from({**sent, "position": 7}, other_rank) is other_rank[0]  # by key


def test_costtune_autotune_passes_the_problem_mapping_to_its_pruner():
    """Sizes only the mapping can tell (arguments named like no family size) reach the hook."""
    @triton.jit
    def odd_names(p, q, out, rows_a, cols_b, depth, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pass

    configs = [triton.Config(tile(), num_warps=4, num_stages=3),
               triton.Config(tile(m=64), num_warps=4, num_stages=3)]
    tuned = costtune.autotune(configs, key=["rows_a", "cols_b", "depth"], family="gemm",
                              top_k=1, problem={"M": "rows_a", "N": "cols_b", "K": "depth"},
                              trust_family=True)(odd_names)
    named = dict(p=_meta(2048 * 1024), q=_meta(1024 * 512), out=_meta(2048 * 512),  # flat
                 rows_a=2048, cols_b=512, depth=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kept = tuned.early_config_prune(configs, named, grid=(16, 4), warmup=False)
    assert len(kept) == 1
    assert tuned.early_config_prune.last.problem == {"M": 2048, "N": 512, "K": 1024}
