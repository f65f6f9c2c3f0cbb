"""Reuse across processes: ``costtune.autotune(..., cache_results=True)``.

Triton's disk cache key hashes the pruned config list, so the list costtune hands over must be
the same in every process (rank order, ties by config key; nothing from set order, the clock or
the PID). Each test runs fresh Python processes with different hash seeds.

Triton 3.6 turns ``cache_results`` off under ``TRITON_INTERPRET=1`` and its cache key needs a
GPU target and a compiled function's ``cache_key``, which the interpreter lacks. The cache-hit
test stands those in (``_interpreter_cache``: the tuner's flag set back on, an H200 target, a
hash of the kernel's source) and runs the rest of Triton's ``check_disk_cache`` as it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from helpers import Bench, masked_tile_matmul

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


def worker(out: str, cache: str) -> None:
    """One process's tuning call; writes what it benchmarked, chose and handed to Triton."""
    bench = Bench()
    tuner = costtune.autotune(CONFIGS, key=["m", "n", "k"], top_k=2, model="h200",
                              family="gemm", problem={"M": "m", "N": ("y", 1), "K": "k"},
                              params={"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"},
                              do_bench=bench, cache_results=cache == "on")(_cached_matmul)
    handed: list[list[str]] = []
    if cache == "on":
        _interpreter_cache(tuner)
        check = tuner.check_disk_cache

        def spy(key, configs, bench_fn):
            handed.append([str(c) for c in configs])  # what Triton's key hashes
            return check(key, configs, bench_fn)

        tuner.check_disk_cache = spy
    m, n, k = 16, 128, 256
    torch.manual_seed(0)
    x, y = (torch.randn(s).to(torch.float16) for s in ((m, k), (k, n)))
    c = torch.empty(m, n, dtype=torch.float32)
    tuner[lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))](
        x, y, c, m, n, k)
    assert torch.allclose(c, x.float() @ y.float(), rtol=1e-3, atol=1e-3)
    last = tuner.early_config_prune.last
    Path(out).write_text(json.dumps({
        "calls": bench.calls, "best": str(tuner.best_config), "handed": handed,
        "kept": last.kept, "ranked": last.ranked, "timed": len(tuner.configs_timings)}))


def run_workers(tmp_path: Path, cache: str, seeds: tuple[int, ...], *, shared: bool,
                parallel: bool) -> list[dict]:
    """``worker`` in one fresh process per hash seed; their results in seed order."""
    procs, outs = [], []
    for seed in seeds:
        out = tmp_path / f"out{seed}.json"
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONHASHSEED": str(seed),
               "TRITON_CACHE_DIR": str(tmp_path / ("cache" if shared else f"cache{seed}"))}
        code = ("import sys; sys.path[:0] = [sys.argv[1]]; import test_cache_results as t; "
                "t.worker(sys.argv[2], sys.argv[3])")
        proc = subprocess.Popen([sys.executable, "-c", code, str(TESTS), str(out), cache],
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


def costtune_key(text: str) -> str:
    """The canonical key of the CONFIGS entry whose str() is ``text``."""
    from costtune.tune.decision import config_key

    (config,) = [c for c in CONFIGS if str(c) == text]
    return config_key(config)
