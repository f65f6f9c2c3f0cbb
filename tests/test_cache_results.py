"""Reuse across processes: ``costtune.autotune(..., cache_results=True)``.

Triton's disk cache key hashes the pruned config list, so the list costtune hands over must be
the same in every process (rank order, ties by config key; nothing from set order, the clock or
the PID). Each test runs fresh Python processes with different hash seeds.

Triton 3.6 turns ``cache_results`` off under ``TRITON_INTERPRET=1`` and its cache key needs a
GPU target and a compiled function's ``cache_key``, which the interpreter lacks. The cache-hit
test stands those in (``_interpreter_cache``: the tuner's flag set back on, an H200 target, a
hash of the kernel's source) and runs the rest of Triton's ``check_disk_cache`` as it is.
costtune's kept-list cache (``tune.kept_cache``) uses the same stand-ins: a hit runs no pruner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import triton
import triton.language as tl
from helpers import Bench, launch_tile_matmul, masked_tile_matmul

import costtune

TESTS = Path(__file__).resolve().parent
CONFIGS = [triton.Config({"BM": 32, "BN": bn, "BK": bk}, num_warps=w, num_stages=2)
           for bn in (32, 64, 128) for bk in (32, 64) for w in (4, 8)]


@triton.jit
def _cached_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    masked_tile_matmul(x, y, out, m, n, k, BM, BN, BK)


def _interpreter_cache(tuner) -> None:
    """What Triton's disk cache needs and the interpreter lacks (see the module docstring)."""
    import hashlib
    import inspect
    from types import SimpleNamespace

    import triton.runtime.autotuner as autotuner
    from triton.backends.compiler import GPUTarget
    from triton.runtime.interpreter import InterpretedFunction

    tuner.cache_results = True
    target = GPUTarget("cuda", 90, 32)
    autotuner.driver = SimpleNamespace(active=SimpleNamespace(
        get_current_target=lambda: target))
    autotuner.JITFunction = InterpretedFunction
    InterpretedFunction.cache_key = property(
        lambda self: hashlib.sha256(inspect.getsource(self.fn).encode()).hexdigest())


def worker(out: str, cache: str, options: str = "{}") -> None:
    """One process's tuning call; writes what it benchmarked, chose and handed to Triton, and
    how often the pruner ran. ``options`` (JSON): ``top_k``, ``model``, ``configs`` (how many
    of CONFIGS), ``learn``."""
    from costtune.tune.pruner import ConfigPruner

    opts = json.loads(options)
    pruned = []
    call = ConfigPruner.__call__

    def counted(self, *args, **kwargs):
        pruned.append(1)
        return call(self, *args, **kwargs)

    ConfigPruner.__call__ = counted
    bench = Bench()
    tuner = costtune.autotune(CONFIGS[:opts.get("configs", len(CONFIGS))], key=["m", "n", "k"],
                              top_k=opts.get("top_k", 2), model=opts.get("model", "h200"),
                              family="gemm", problem={"M": "m", "N": ("y", 1), "K": "k"},
                              params={"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"},
                              do_bench=bench, cache_results=cache == "on",
                              learn=opts.get("learn", False))(_cached_matmul)
    handed: list[list[str]] = []
    if cache == "on":
        _interpreter_cache(tuner)
        check = tuner.check_disk_cache

        def spy(key, configs, bench_fn):
            handed.append([str(c) for c in configs])  # what Triton's key hashes
            return check(key, configs, bench_fn)

        tuner.check_disk_cache = spy
    launch_tile_matmul(tuner, 16, 128, 256)
    last = tuner.early_config_prune.last  # None when the pruner did not run
    Path(out).write_text(json.dumps({
        "calls": bench.calls, "best": str(tuner.best_config), "handed": handed,
        "kept": last and last.kept, "ranked": last and last.ranked,
        "timed": len(tuner.configs_timings), "pruned": len(pruned),
        "kept_from_cache": tuner.kept_from_cache, "xgboost": "xgboost" in sys.modules}))


def run_workers(tmp_path: Path, cache: str, seeds: tuple[int, ...], *, shared: bool,
                parallel: bool, options: tuple[dict, ...] = ()) -> list[dict]:
    """``worker`` in one fresh process per hash seed (with ``options[i]``, default none);
    their results in seed order."""
    procs, outs = [], []
    for i, seed in enumerate(seeds):
        out = tmp_path / f"out{seed}.json"
        opts = json.dumps(options[i] if i < len(options) else {})
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONHASHSEED": str(seed),
               "COSTTUNE_HOME": str(tmp_path / "home"),
               "TRITON_CACHE_DIR": str(tmp_path / ("cache" if shared else f"cache{seed}"))}
        code = ("import sys; sys.path[:0] = [sys.argv[1]]; import test_cache_results as t; "
                "t.worker(sys.argv[2], sys.argv[3], sys.argv[4])")
        proc = subprocess.Popen([sys.executable, "-c", code, str(TESTS), str(out), cache, opts],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if not parallel:
            assert proc.wait(timeout=240) == 0, proc.stdout.read().decode()[-3000:]
        procs.append(proc)
        outs.append(out)
    for proc in procs:
        assert proc.wait(timeout=240) == 0, proc.stdout.read().decode()[-3000:]
    return [json.loads(out.read_text()) for out in outs]


def test_pruned_list_is_the_same_in_every_process(tmp_path):
    first, second = run_workers(tmp_path, "off", (1, 2), shared=False, parallel=True)
    assert first["kept"] == second["kept"] and first["ranked"] == second["ranked"]
    assert len(first["kept"]) >= 2 and len(first["ranked"]) == len(CONFIGS)
    assert first["calls"] == len(first["kept"]) == first["timed"]  # nothing cached: all tuned


def test_second_process_hits_the_disk_cache(tmp_path):
    first, second = run_workers(tmp_path, "on", (1, 2), shared=True, parallel=False)
    assert first["calls"] == len(first["kept"]) >= 2 and first["timed"] == first["calls"]
    assert second["calls"] == 0  # read back from the disk: nothing benchmarked
    assert second["best"] == first["best"]
    # The list whose strings Triton hashes: the kept configs, in rank order, in both processes
    assert first["handed"] == second["handed"] and len(first["handed"]) == 1
    assert [costtune_key(s) for s in first["handed"][0]] == first["kept"]
    # The kept list came from disk: the pruner never ran and no model was loaded
    assert first["pruned"] == 1 and first["kept_from_cache"] is False
    assert second["pruned"] == 0 and second["kept_from_cache"] is True
    assert not second["xgboost"] and second["kept"] is None


def test_kept_list_misses_when_what_decides_it_changes(tmp_path):
    import shutil

    from costtune.model.files import resolve

    for source in resolve("h200"):  # a model given by path, whose file is then touched
        shutil.copy(source, tmp_path / f"model{source.suffix}")
    model = {"model": str(tmp_path / "model")}
    first, again = run_workers(tmp_path, "on", (1, 2), shared=True, parallel=False,
                               options=(model, model))
    assert first["kept_from_cache"] is False and again["kept_from_cache"] is True
    assert again["pruned"] == 0 and again["calls"] == 0
    stamp = os.stat(tmp_path / "model.json").st_mtime_ns + 10**9
    os.utime(tmp_path / "model.json", ns=(stamp, stamp))
    changed = ({**model, "configs": len(CONFIGS) - 1}, {**model, "top_k": 3}, model)
    for out in run_workers(tmp_path, "on", (3, 4, 5), shared=True, parallel=True,
                           options=changed):
        assert out["kept_from_cache"] is False and out["pruned"] == 1
    assert len(list((tmp_path / "cache").rglob("*.costtune_kept.json"))) == 4


def test_kept_list_hit_without_triton_timings_still_tunes(tmp_path):
    (first,) = run_workers(tmp_path, "on", (1,), shared=True, parallel=False)
    timings = list((tmp_path / "cache").rglob("*.autotune.json"))
    assert len(timings) == 1
    timings[0].unlink()  # Triton's own cache misses; costtune's kept list still hits
    (second,) = run_workers(tmp_path, "on", (2,), shared=True, parallel=False)
    assert second["kept_from_cache"] is True and second["pruned"] == 0
    kept = first["handed"][0]
    assert second["handed"] == [kept]  # the same list, benchmarked again, no replacements
    assert second["calls"] == second["timed"] == len(kept)
    assert second["best"] in kept  # (the worker checked the output too)


def test_learn_never_uses_the_kept_list_cache(tmp_path):
    learn = {"learn": True}
    first, second = run_workers(tmp_path, "on", (1, 2), shared=True, parallel=False,
                                options=(learn, learn))
    assert first["kept_from_cache"] is None and second["kept_from_cache"] is None
    assert first["pruned"] == second["pruned"] == 1
    assert not list((tmp_path / "cache").rglob("*.costtune_kept.json"))


def costtune_key(text: str) -> str:
    """The canonical key of the CONFIGS entry whose str() is ``text``."""
    from costtune.tune.decision import config_key

    (config,) = [c for c in CONFIGS if str(c) == text]
    return config_key(config)


def test_triton_key_is_warmed_in_the_background():
    """A process likely to hit the kept-list cache loads no model but needs Triton's key of
    its own files (~0.4 s on the 2-core VM): ``start_warm`` computes it in a thread that the
    call's key computation joins; the preload thread computes it too."""
    code = ("import costtune.tune.preload as p\n"
            "from triton.runtime.cache import triton_key\n"
            "assert triton_key.cache_info().currsize == 0\n"
            "t = p.start_warm(); p.wait(); assert not t.is_alive()\n"
            "assert triton_key.cache_info().currsize == 1\n"
            "triton_key.cache_clear(); p._STARTED.clear()\n"
            "p.preload('h200', 'gemm'); p.wait()\n"
            "assert triton_key.cache_info().currsize == 1\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]


@triton.jit
def _cached_scale(x, out, n, BLOCK: tl.constexpr, BUG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n) * 2.0
    if BUG == 1:
        v = v + 0.5  # a wrong config, benchmarked first: the fastest
    tl.store(out + offs, v, mask=offs < n)


def check_worker(out: str, check: str) -> None:
    """One process tuning ``_cached_scale`` with Triton's disk cache, ``check`` "on"/"off"."""
    import warnings

    import torch

    configs = [triton.Config({"BLOCK": 16, "BUG": 1}), triton.Config({"BLOCK": 32, "BUG": 0}),
               triton.Config({"BLOCK": 64, "BUG": 0})]
    class Ordered(Bench):  # the n-th benchmark takes n ms: the first benchmarked wins
        def __call__(self, fn, quantiles=None):
            super().__call__(fn, quantiles)
            return [float(self.calls)] * 3

    bench = Ordered()
    tuner = costtune.autotune(configs, key=["n"], do_bench=bench, cache_results=True,
                              check=check == "on")(_cached_scale)
    _interpreter_cache(tuner)
    x = torch.randn(100)
    y = torch.empty_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tuner[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, 100)
    Path(out).write_text(json.dumps({"calls": bench.calls, "bug": tuner.best_config.kwargs["BUG"],
                                     "right": bool(torch.allclose(y, 2 * x)),
                                     "rejected": list(tuner.rejected)}))


def test_a_cached_choice_is_checked_when_check_is_on(tmp_path):
    """Times stored by a process that did not check (its wrong config was the fastest) are
    read back by one that does: each cached config is launched once and judged, and the
    wrong one is not chosen, with nothing benchmarked again."""
    results = []
    for seed, check in ((1, "off"), (2, "on")):
        out = tmp_path / f"check{seed}.json"
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONHASHSEED": str(seed),
               "COSTTUNE_HOME": str(tmp_path / "home"), "TRITON_CACHE_DIR": str(tmp_path / "c")}
        code = ("import sys; sys.path[:0] = [sys.argv[1]]; import test_cache_results as t; "
                "t.check_worker(sys.argv[2], sys.argv[3])")
        run = subprocess.run([sys.executable, "-c", code, str(TESTS), str(out), check], env=env,
                             capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stderr[-3000:]
        results.append(json.loads(out.read_text()))
    unchecked, checked = results
    assert unchecked["calls"] == 3 and unchecked["bug"] == 1 and not unchecked["right"]
    assert checked["calls"] == 0 and checked["bug"] == 0 and checked["right"]
    assert len(checked["rejected"]) == 1


def test_kept_list_key_covers_the_heuristics_under_the_autotuner(monkeypatch):
    """A ``triton.heuristics`` rule under the autotuner sets values the pruner ranks with, and
    Triton's own key hashes none of it: an edited rule (its code, or a value it closes over)
    is another key."""
    import hashlib
    import inspect
    from types import SimpleNamespace

    import torch
    import triton.runtime.autotuner as autotuner
    from triton.backends.compiler import GPUTarget
    from triton.runtime.interpreter import InterpretedFunction

    from costtune.tune.kept_cache import key_for

    target = GPUTarget("cuda", 90, 32)
    monkeypatch.setattr(autotuner, "driver", SimpleNamespace(active=SimpleNamespace(
        get_current_target=lambda: target)))
    monkeypatch.setattr(autotuner, "JITFunction", InterpretedFunction)
    monkeypatch.setattr(InterpretedFunction, "cache_key", property(
        lambda self: hashlib.sha256(inspect.getsource(self.fn).encode()).hexdigest()),
        raising=False)

    def key(rule):
        fn = triton.heuristics({"EVEN_K": rule})(_cached_matmul)
        tuner = costtune.autotune(CONFIGS, key=["m", "n", "k"], top_k=2, family="gemm",
                                  cache_results=True)(fn)
        x = torch.empty(16, 256)
        tuner.nargs = dict(zip(tuner.arg_names, (x, x, x, 16, 128, 256)))
        return key_for(tuner, {})

    def factory(value):
        return lambda args: value

    keys = [key(lambda args: 32), key(lambda args: 64), key(factory(32)), key(factory(64))]
    assert None not in keys and len(set(keys)) == 4
    assert key(factory(32)) == keys[2]  # the same rule: the same key


RULES = """
import hashlib, os
os.environ["TRITON_INTERPRET"] = "1"
import triton, triton.language as tl
from costtune.tune.kept_cache import _rules_part

def make_rule(fn):
    return lambda args: fn(args["n"])

@triton.autotune([triton.Config({}, num_warps=w) for w in (1, 2)], key=["n"])
@triton.heuristics({"BLOCK": make_rule(triton.next_power_of_2),
                    "EVEN": lambda args: all(args["n"] % b == 0 for b in (16, 32))})
@triton.jit
def kernel(x, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    pass

print(hashlib.sha256(_rules_part(kernel).encode()).hexdigest())
"""


def test_the_rules_part_of_the_key_is_the_same_in_every_process(tmp_path):
    """No memory address in it (a generator's code object, a function closed over)."""
    script = tmp_path / "rules.py"
    script.write_text(RULES)
    keys = {subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}, timeout=300,
                           check=True).stdout.strip() for seed in (1, 2)}
    assert len(keys) == 1 and len(next(iter(keys))) == 64
