"""CPU tests of the collection plumbing: error classification, compile specs, suites, resume."""

from __future__ import annotations

import json

import pytest
import torch

import costtune.build.pool as compile_mod
import costtune.collect as collect_mod
import costtune.collect.local as local_mod
from costtune.build.errors import classify_error
from costtune.build.pool import PendingCompiles
from costtune.build.workload import precompile, rebuild_inputs, tensor_specs
from costtune.store.dataset import Store
from costtune.types import Config, Measurement, Status, Workload


def test_classify_error_maps_triton_failures():
    from triton.runtime.errors import OutOfResources, PTXASError

    assert classify_error(OutOfResources(300000, 232448, "shared memory")) \
        is Status.OUT_OF_RESOURCES
    assert classify_error(PTXASError("ptxas fatal")) is Status.PTXAS_ERROR
    assert classify_error(RuntimeError("ptxas died")) is Status.PTXAS_ERROR
    assert classify_error(ValueError("bad block")) is Status.COMPILE_ERROR


def test_specs_rebuild_shapes_strides_and_pass_values():
    a = torch.randn(8, 6).t()  # non-contiguous
    specs = tensor_specs({"a": a, "causal": True})
    back = rebuild_inputs(specs)
    assert back["a"].shape == a.shape and back["a"].stride() == a.stride()
    assert back["a"].dtype == a.dtype and back["causal"] is True


def test_precompile_turns_a_bad_config_into_a_row():
    from costtune.kernels import gemm

    w = Workload("gemm", {"M": 32, "N": 32, "K": 32}, "float16")
    inputs = gemm.make_inputs(w.sizes, "float16")
    bad = Config({"BLOCK_M": 48, "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 1})
    out = precompile(w, [bad], inputs, workers=0)
    assert out[bad.key].status is Status.COMPILE_ERROR
    assert "BLOCK_M" in out[bad.key].error


def test_pool_compiles_stream_and_failures_become_rows(tmp_path):
    """The runner times a config once its compile is done: a compile past its deadline is a
    TIMEOUT row, and so are the workload's queued ones, cancelled with the pool, whose
    processes are killed, with what they started (a hung compiler, or its ptxas, must not keep
    this interpreter from exiting); a dead pool worker is a COMPILE_ERROR row; the pool is then
    replaced, not reused."""
    import os
    import subprocess
    import time
    from functools import partial

    import psutil

    try:
        pool = compile_mod._pool(1)
        assert pool.submit(abs, -3).result(timeout=120) == 3  # pool up
        ok = Config({"BLOCK_M": 32})
        done = PendingCompiles({ok.key: pool.submit(partial(
            compile_mod.CompileResult, Status.OK, 0.5))}, timeout_s=120)
        assert done.get(ok) == compile_mod.CompileResult(Status.OK, 0.5)
        assert done.get(ok).status is Status.OK  # a second get answers from memory

        procs = [psutil.Process(p.pid) for p in pool._processes.values()]
        pid_file = tmp_path / "hung.pid"
        hung = ["sh", "-c", f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file} && "
                "exec sleep 60"]  # stands in for a ptxas that never returns
        stuck = [Config({"BLOCK_M": 2 ** i}) for i in range(4)]  # 1 runs, 1 sits in the
        futures = {stuck[0].key: pool.submit(subprocess.run, hung)}  # pipe, 2 are queued:
        futures.update({c.key: pool.submit(time.sleep, 20) for c in stuck[1:]})  # cancelled
        deadline = time.monotonic() + 60
        while not pid_file.exists():  # the hung compile has started its child
            assert time.monotonic() < deadline, "the pool never ran the hung job"
            time.sleep(0.01)
        grandchild = psutil.Process(int(pid_file.read_text()))
        waiting = PendingCompiles(futures, timeout_s=0.5)
        start = time.monotonic()
        assert all(waiting.get(c).status is Status.TIMEOUT for c in stuck)
        assert "not done" in waiting.get(stuck[-1]).error and time.monotonic() - start < 10
        assert compile_mod._POOL is None  # shut down after the timeout, its processes killed
        # Gone once shutdown_pool returns. Checked with psutil, not Process.join/is_alive: the
        # executor's own thread reaps its workers, and a second waitpid racing it makes
        # multiprocessing report a reaped worker as alive (the test's old failure under load).
        assert not any(compile_mod.is_running(p) for p in [*procs, grandchild])

        assert compile_mod._pool(1).submit(abs, -1).result(timeout=120) == 1  # a fresh one
        dead = Config({"BLOCK_M": 256})
        crash = PendingCompiles({dead.key: compile_mod._POOL.submit(os._exit, 3)},
                                timeout_s=120)
        assert crash.get(dead).status is Status.COMPILE_ERROR
        assert compile_mod._POOL is None

        assert compile_mod._pool(1).submit(abs, -2).result(timeout=120) == 2
        later = [Config({"BLOCK_M": 64}), Config({"BLOCK_M": 128}), Config({"BLOCK_M": 512})]
        gone = PendingCompiles({c.key: compile_mod._POOL.submit(time.sleep, 2) for c in later},
                               timeout_s=120)
        gone.cancel()  # a caller that stopped early drops what has not started
        assert gone._futures[later[-1].key].cancelled()
        assert gone.get(later[-1]).status is Status.TIMEOUT  # never compiled
    finally:
        compile_mod.shutdown_pool(kill=True)


def test_suite_workloads_default_dtypes_and_errors(tmp_path):
    ws = collect_mod.suite_workloads("softmax", "test")
    fp16 = [w for w in ws if w.dtype == "float16"]
    bf16 = [w for w in ws if w.dtype == "bfloat16"]
    assert len(fp16) == len(collect_mod.suite_problems("softmax", "test")) and 0 < len(bf16)
    with pytest.raises(ValueError, match="not supported"):
        collect_mod.suite_workloads("attention", "test", ["float32"])
    with pytest.raises(ValueError, match="neither"):
        collect_mod.suite_problems("gemm", "nosuch")
    f = tmp_path / "shapes.json"
    f.write_text(json.dumps([{"M": 64, "N": 64}]))
    with pytest.raises(ValueError, match="lacks"):
        collect_mod.suite_problems("gemm", str(f))
    f.write_text(json.dumps([{"M": 64, "N": 64, "K": 64}]))
    assert collect_mod.suite_workloads("gemm", str(f), ["bfloat16"])[0].id \
        == "gemm_M64_N64_K64_bfloat16"


def _fake_collect_workload(calls):
    def run(workload, configs, **kw):
        calls.append((workload.id, len(configs)))
        return [Measurement(workload, c, Status.OK, time_ms=1.0 + i,
                            extra={**kw.get("extra", {})}).as_row()
                for i, c in enumerate(configs)]
    return run


def _as_if_a_gpu(monkeypatch) -> None:
    """collect() checks for a GPU before any store work; these tests fake the measuring."""
    import costtune.env

    monkeypatch.setattr(costtune.env, "gpu_problem", lambda: None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_collect_and_the_gpu_runner_without_a_gpu_say_why_and_touch_nothing(tmp_path):
    from costtune.measure.gpu import GpuRunner

    ws = collect_mod.suite_workloads("softmax", "test", ["float16"])[:1]
    with pytest.raises(RuntimeError, match="^collect measures on a CUDA GPU and "):
        collect_mod.collect(ws, Store(tmp_path / "store"), max_configs=2)
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*"))
    with pytest.raises(RuntimeError, match="^GpuRunner measures on a CUDA GPU and"):
        GpuRunner()


def test_collect_resumes_and_respects_the_budget(tmp_path, monkeypatch):
    _as_if_a_gpu(monkeypatch)
    calls: list = []
    monkeypatch.setattr(local_mod, "collect_workload", _fake_collect_workload(calls))
    ws = collect_mod.suite_workloads("softmax", "test", ["float16"])[:3]
    store = Store(tmp_path)
    s1 = collect_mod.collect(ws[:2], store, max_configs=5, time_budget_s=None)
    assert s1["workloads"] == 2 and s1["configs"] == 10
    # Workloads already stored are skipped; only the new one is measured.
    s2 = collect_mod.collect(ws, store, max_configs=5)
    assert s2["skipped_workloads"] == 2 and calls[-1][0] == ws[2].id
    df = store.load("softmax")
    assert len(df) == 15 and not df.duplicated(["workload", "config"]).any()
    # A spent budget starts no workload.
    more = collect_mod.suite_workloads("softmax", "train", ["float16"])[:2]
    s3 = collect_mod.collect(more, store, max_configs=5, time_budget_s=0.0)
    assert s3["stopped_early"] and s3["workloads"] == 0


def test_collect_cli_reports_and_resumes(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from costtune.cli import app

    calls: list = []
    monkeypatch.setattr(local_mod, "collect_workload", _fake_collect_workload(calls))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: None)
    import costtune.env

    # The environment probe would ask the (absent) GPU for its name and clocks.
    monkeypatch.setattr(costtune.env, "environment", lambda *a, **k: {"gpu": "stub"})
    monkeypatch.setattr(costtune.env, "sm_clock_mhz", lambda *a, **k: None)
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps([{"rows": 64, "cols": 1000}, {"rows": 8, "cols": 77}]))
    args = ["collect", "softmax", "--suite", str(shapes), "--out", str(tmp_path / "store"),
            "--max-configs", "4", "--dtype", "float16"]

    def summary(result) -> dict:
        assert result.exit_code == 0, result.output
        text = result.output.replace("\n", " ")
        return json.loads(text[text.rindex("{"):])

    first = summary(CliRunner().invoke(app, args))
    assert (first["workloads"], first["configs"], first["ok"]) == (2, 8, 8)
    again = summary(CliRunner().invoke(app, args))
    assert again["workloads"] == 0 and again["skipped_workloads"] == 2
    assert len(calls) == 2
    bad = CliRunner().invoke(app, ["collect", "softmax", "--suite", "nosuch", "--out",
                                   str(tmp_path / "other")])
    assert bad.exit_code == 2 and "neither" in bad.output


def test_spread_order_alternates_kernels_biggest_first():
    from costtune.collect import spread_order

    def item(kernel, n, dtype="float16"):
        sizes = {"M": n, "N": 64, "K": 64} if kernel == "gemm" else {"rows": n, "cols": 64}
        return Workload(kernel, sizes, dtype), [object()] * n

    todo = [item("gemm", 10), item("gemm", 30), item("softmax", 5), item("softmax", 20),
            item("gemm", 20), item("gemm", 40, "bfloat16")]
    out = spread_order(todo)
    assert sorted(map(id, out)) == sorted(map(id, todo))  # a permutation, nothing copied
    assert [(w.kernel, w.dtype, len(c)) for w, c in out] == [
        ("gemm", "bfloat16", 40), ("gemm", "float16", 30), ("softmax", "float16", 20),
        ("gemm", "float16", 20), ("softmax", "float16", 5), ("gemm", "float16", 10)]
    assert spread_order([]) == []


def test_compile_lock_serializes_one_specialization_only(tmp_path, monkeypatch):
    """Two GPU workers of a host needing the same kernel at once: one compiles, the other waits
    (then loads it from Triton's cache); other specializations do not wait."""
    import threading
    import time

    from costtune.build.workload import compile_lock, specialization_key

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    cfg = {"BLOCK_N": 1024, "num_warps": 4}
    a = {"x": ("tensor", (4096, 4096), (4096, 1), "float16"), "n": ("value", 4096)}
    b = {"x": ("tensor", (2048, 8192), (8192, 1), "float16"), "n": ("value", 8192)}
    c = {"x": ("tensor", (4095, 4095), (4095, 1), "float16"), "n": ("value", 4095)}
    assert specialization_key("softmax", a, cfg) == specialization_key("softmax", b, cfg)
    assert specialization_key("softmax", a, cfg) != specialization_key("softmax", c, cfg)
    assert specialization_key("softmax", a, cfg) != specialization_key(
        "softmax", a, {**cfg, "num_warps": 8})
    held, waited = threading.Event(), {}

    def holder():
        with compile_lock("softmax", a, cfg):
            held.set()
            time.sleep(1.0)

    def other(name, specs, **kw):
        held.wait()
        start = time.perf_counter()
        with compile_lock("softmax", specs, cfg, **kw):
            waited[name] = time.perf_counter() - start

    threads = [threading.Thread(target=holder), threading.Thread(target=other, args=("same", b)),
               threading.Thread(target=other, args=("different", c)),
               threading.Thread(target=other, args=("gave up", b), kwargs={"wait_s": 0.2})]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert waited["same"] >= 0.8 and waited["different"] < 0.5
    assert 0.2 <= waited["gave up"] < 0.8  # a stuck holder is compiled around
    assert list((tmp_path / "costtune-locks").iterdir())


def test_compile_lock_without_file_locks_compiles_anyway(tmp_path, monkeypatch):
    """A file system that refuses locks (NFS without locking: ENOLCK) must not turn compiles
    into errors: the compile goes ahead unlocked."""
    import errno
    import fcntl

    from costtune.build.workload import compile_lock

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))

    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    ran = []
    with compile_lock("softmax", {"n": ("value", 16)}, {"BLOCK_N": 64}):
        ran.append(1)
    assert ran == [1]
    # an unwritable cache: no lock either, and no error
    monkeypatch.setenv("TRITON_CACHE_DIR", "/proc/costtune-no-such-dir")
    with compile_lock("softmax", {"n": ("value", 16)}, {"BLOCK_N": 64}):
        ran.append(2)
    assert ran == [1, 2]


def test_a_second_collector_skips_what_the_first_is_measuring(tmp_path, monkeypatch):
    """Two collectors on one store: the second skips (reports busy) the workload the first
    holds, measures the rest; the first then finds those stored and does not measure them
    again. Every key is stored once."""
    _as_if_a_gpu(monkeypatch)
    ws = collect_mod.suite_workloads("softmax", "test", ["float16"])[:3]
    calls: list = []
    fake = _fake_collect_workload(calls)
    second: dict = {}

    def first_measures(workload, configs, **kw):
        if not second:  # while the first holds ws[0], a second collector runs
            second["started"] = True
            second.update(collect_mod.collect(ws, Store(tmp_path), max_configs=4))
        return fake(workload, configs, **kw)

    monkeypatch.setattr(local_mod, "collect_workload", first_measures)
    first = collect_mod.collect(ws, Store(tmp_path), max_configs=4)
    assert second["busy_workloads"] == [ws[0].id] and second["workloads"] == 2
    assert first["workloads"] == 1 and first["skipped_workloads"] == 2
    assert [c[0] for c in calls] == [ws[1].id, ws[2].id, ws[0].id]
    df = Store(tmp_path).load("softmax")
    assert len(df) == 12 and not df.duplicated(["workload", "config"]).any()
    # Resume is per GPU model: rows of another GPU do not count as measured here.
    import costtune.env

    monkeypatch.setattr(local_mod, "collect_workload", fake)
    env = costtune.env.environment
    monkeypatch.setattr(costtune.env, "environment", lambda *a, **k: {**env(), "gpu": "other"})
    again = collect_mod.collect(ws, Store(tmp_path), max_configs=4)
    assert again["workloads"] == 3 and again["skipped_workloads"] == 0
    assert len(Store(tmp_path).load("softmax")) == 24
