"""``costtune.harvest`` on a store in use: kernels that share a name, parts it cannot read,
another writer holding the lock, and its options checked before anything runs."""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
import warnings

import pytest
import torch
import triton

import costtune

KERNEL = '''
import triton
import triton.language as tl

def bench(fn, quantiles=None, **kw):
    fn()
    return [1.0, 1.0, 1.0]

@triton.autotune([triton.Config({{"BLOCK_N": n}}) for n in (64, 128)], key=["cols"],
                 do_bench=bench)
@triton.jit
def row_scale(x, y, cols, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    v = tl.load(x + tl.program_id(0) * cols + offs, offs < cols, 0.0)
    tl.store(y + tl.program_id(0) * cols + offs, v * {scale}, offs < cols)
'''


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """Two modules, each with a kernel named row_scale (another body)."""
    for i, scale in enumerate((2.0, 3.0)):
        (tmp_path / f"harvest_mod{i}.py").write_text(KERNEL.format(scale=scale))
    monkeypatch.syspath_prepend(str(tmp_path))
    for i in range(2):  # fresh modules: an autotuner remembers the keys it tuned
        monkeypatch.delitem(sys.modules, f"harvest_mod{i}", raising=False)
    return [importlib.import_module(f"harvest_mod{i}").row_scale for i in range(2)]


def tune(kernel, cols=50):
    x = torch.randn(2, cols)
    kernel[(2,)](x, torch.empty_like(x), cols)


def test_kernels_of_one_name_are_both_harvested(kernels, tmp_path):
    """Another kernel of the same name (or this one, edited) measured at the same sizes is
    other data: its rows were dropped as already stored."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with costtune.harvest(tmp_path / "store") as h:
            for kernel in kernels:
                tune(kernel)
    assert h.rows == 4 and h.errors == []
    df = costtune.load_dataset(tmp_path / "store")
    assert df["kernel_hash"].nunique() == 2 and df["workload"].nunique() == 2


def test_a_part_it_cannot_read_does_not_stop_harvesting(kernels, tmp_path):
    store = tmp_path / "store"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with costtune.harvest(store):
            tune(kernels[0])
        (store / "row_scale" / "part-20261205T010000.000000Z-deadbeef.parquet").write_bytes(b"")
        with costtune.harvest(store) as h:
            tune(kernels[0], cols=100)
    assert h.rows == 2 and h.errors == []


def test_a_held_lock_delays_the_rows_not_the_tuning(kernels, tmp_path):
    """Another writer holding the kernel folder's lock: the tuning call waits a few seconds
    at most (it waited up to 600 s) and its rows are stored when the harvest ends."""
    store = tmp_path / "store"
    (store / "row_scale").mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from filelock import FileLock; "
         "l = FileLock(sys.argv[1]); l.acquire(); print('held', flush=True); "
         "time.sleep(float(sys.argv[2]))", str(store / "row_scale" / ".lock"), "12"],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with costtune.harvest(store) as h:
            start = time.perf_counter()
            tune(kernels[0])
            waited = time.perf_counter() - start
            assert h.rows == 0 and len(h.pending) == 2
    holder.wait(timeout=60)
    assert waited < 11 and h.rows == 2 and h.pending == [] and h.errors == []


@pytest.mark.parametrize("meta, word", [({"kernel": "mine"}, "may not set"),
                                        ("tag", "must be a dict")])
def test_harvest_options_are_checked_when_it_starts(meta, word, tmp_path):
    with pytest.raises(ValueError, match=word):
        with costtune.harvest(tmp_path / "store", meta=meta):
            pass
    from triton.runtime.autotuner import Autotuner

    assert Autotuner.run.__name__ == "run" and "harvest" not in Autotuner.run.__module__
    assert triton is not None


HELPED = '''
import triton
import triton.language as tl

@triton.jit
def scale(v):
    return v * {scale}

@triton.jit
def row_scale(x, y, cols, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    v = tl.load(x + tl.program_id(0) * cols + offs, offs < cols, 0.0)
    tl.store(y + tl.program_id(0) * cols + offs, scale(v), offs < cols)
'''


def test_an_edited_jit_helper_is_an_edited_kernel(tmp_path, monkeypatch):
    """The kernel's source hash (its learned folder, its harvested workloads) covers the JIT
    helpers it calls, as Triton's cache key does; a kernel without helpers hashes its own
    source alone, as before; kernels built by exec without a source differ by their code."""
    import hashlib

    from costtune.jitsource import source_text
    from costtune.tune.harvest import source_hash

    monkeypatch.syspath_prepend(str(tmp_path))
    hashes = []
    for i, factor in enumerate((2.0, 3.0)):  # the helper edited, the kernel's text the same
        (tmp_path / f"helped{i}.py").write_text(HELPED.format(scale=factor))
        kernel = importlib.import_module(f"helped{i}").row_scale
        hashes.append(source_hash(kernel))
        assert source_hash(kernel) != hashlib.sha256(source_text(kernel).encode()).hexdigest()
    assert hashes[0] != hashes[1]
    (tmp_path / "plain_kernel.py").write_text(KERNEL.format(scale=2.0))
    plain = importlib.import_module("plain_kernel").row_scale
    assert source_hash(plain) == hashlib.sha256(source_text(plain.fn).encode()).hexdigest()
    made = []
    for body in ("v * 2.0", "v + 1.0"):  # no file, no linecache: names alike, code not
        scope: dict = {}
        exec(f"def row_scale(v):\n    return {body}\n", scope)
        made.append(source_hash(scope["row_scale"]))
    assert made[0] != made[1]


BELOW = '''
import triton
import triton.language as tl
import costtune

@costtune.autotune([triton.Config({{"BLOCK_N": 64}})], key=["cols"], learn=True,
                   family="softmax")
@triton.jit
def row_scale(x, y, cols, BLOCK_N: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    v = tl.load(x + tl.program_id(0) * cols + offs, offs < cols, 0.0)
    tl.store(y + tl.program_id(0) * cols + offs, scale(v), offs < cols)

@triton.jit
def scale(v):  # defined below the kernel, as Triton allows
    return v * {scale}
'''


def test_a_learned_kernels_hash_covers_a_helper_defined_below_it(tmp_path, monkeypatch):
    from costtune.tune.harvest import source_hash

    monkeypatch.syspath_prepend(str(tmp_path))
    hashes = []
    for i, factor in enumerate((2.0, 3.0)):
        (tmp_path / f"below{i}.py").write_text(BELOW.format(scale=factor))
        kernel = importlib.import_module(f"below{i}").row_scale
        assert kernel.learner.hash == source_hash(kernel)  # read once the module has run
        hashes.append(kernel.learner.hash)
    assert hashes[0] != hashes[1]
