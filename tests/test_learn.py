"""Learning the user's kernel: the adaptive budget inside one tuning call (stops when the model
is confident, extends along the measured best's neighbours on disagreement, never past its
cap), the per-kernel model across calls and processes, concurrent updates, and
``costtune train`` on harvested stores. Contracts, not timings."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from learning_helpers import StepBench, run, tuner
from typer.testing import CliRunner

import costtune
from costtune.cli import app
from costtune.model.files import kernel_dir
from costtune.model.learned import current_model, read_rows, update
from costtune.model.xgb import CostModel
from costtune.tune.adaptive import Adaptive, neighbour_finder, parse_budget, search

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO / "datasets" / "h200"


def test_search_stops_early_on_a_confident_model():
    measured = []
    r = search([10.0, 1.0, 0.9, 0.8], lambda i: measured.append(i) or 1.0 + i,
               budget=Adaptive(max_configs=4, min_configs=1), margin=1.0,
               neighbours=lambda i: [])
    assert (r.measured, r.stop, measured) == ([0], "confident", [0])
    r = search([10.0, 1.0, 0.9, 0.8], lambda i: 1.0 + i, budget=Adaptive(max_configs=4),
               margin=1.0, neighbours=lambda i: [])
    assert (r.measured, r.stop) == ([0, 1], "confident")  # min_configs=2 by default


def test_search_extends_along_neighbours_when_the_order_disagrees():
    # The model ranks 0, 1, 2, ...; position 1 measures faster than 0, so its neighbours
    # (5 and 6, ranked last) come next, best-predicted first.
    times = [2.0, 1.0, 3.0, 3.0, 3.0, 0.5, 0.8]
    r = search([7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0], lambda i: times[i],
               budget=Adaptive(max_configs=5), margin=100.0,
               neighbours=lambda i: [6, 5] if i == 1 else [])
    assert r.measured[:4] == [0, 1, 5, 6] and r.extended == 2 and r.best == 5


def test_search_respects_the_cap_and_replaces_failures():
    times = [math.inf, 3.0, 2.0, 1.0, 0.5]
    r = search([5.0, 4.0, 3.0, 2.0, 1.0], lambda i: times[i], budget=Adaptive(max_configs=2),
               margin=None, neighbours=lambda i: [])
    assert (r.failed, r.measured, r.stop) == ([0], [1, 2], "cap")


def test_neighbours_are_one_parameter_one_step_among_listed_configs():
    values = [{"B": b, "num_warps": w} for b in (32, 64, 128) for w in (4, 8)]
    values.remove({"B": 128, "num_warps": 8})
    near = neighbour_finder(values)
    got = sorted(tuple(values[j].values()) for j in near(values.index({"B": 64,
                                                                        "num_warps": 8})))
    assert got == [(32, 8), (64, 4)]


def test_budget_options_are_checked():
    assert parse_budget("adaptive") == Adaptive()
    assert parse_budget({"max_configs": 4}).max_configs == 4
    for bad, text in (("fast", "budget must be"), ({"cap": 3}, "unknown adaptive budget"),
                      ({"max_configs": 0}, "max_configs must be")):
        with pytest.raises(ValueError, match=text):
            parse_budget(bad)
    with pytest.raises(ValueError, match="top_k and budget= exclude each other"):
        tuner(StepBench(), top_k=4, budget="adaptive")
    with pytest.raises(ValueError, match="learn=True needs the model as a name or path"):
        tuner(StepBench(), learn=True, model=CostModel())


def test_autotune_adaptive_stops_extends_and_caps():
    confident = StepBench()
    t = run(tuner(confident, budget=Adaptive(max_configs=6, min_configs=1, margin=0.0)))
    assert confident.calls == 1 and t.adaptive.stop == "confident"
    assert len(t.configs_timings) == 1
    capped = StepBench()
    t = run(tuner(capped, budget=Adaptive(max_configs=5, margin=100.0)))
    assert capped.calls == 5 and t.adaptive.stop == "cap" and t.adaptive.extended == 0
    faster = StepBench(step=-0.1, start=2.0)  # each config measures faster than the last
    t = run(tuner(faster, budget=Adaptive(max_configs=5, margin=100.0)))
    assert faster.calls == 5 and t.adaptive.extended >= 1
    # the winner is what was measured fastest, and the decision lists what ran
    assert t.early_config_prune.last.k == 5


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTTUNE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_new_process_ranks_with_the_kernels_learned_model(home):
    first = run(tuner(StepBench(), learn=True))
    assert first.early_config_prune.last.model == "h200"
    (path,) = first.learner.updated
    folder = first.learner.folder()
    assert current_model(folder)[0] == path and len(read_rows(folder)) == 8
    env = {**os.environ, "COSTTUNE_HOME": str(home), "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    out = subprocess.run([sys.executable, str(REPO / "tests" / "learning_helpers.py"),
                          "64", "64", "64"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["MODEL"] == str(path)  # ranked by what the first process learned
    record = current_model(folder)[1]
    assert lines["UPDATED"] == str(folder / f"{record['model']}.json")
    assert record["rows"] == 16 and record["workloads"] == 2
    assert CostModel.load(lines["UPDATED"]).n_train_rows_ > CostModel.load(path).n_train_rows_


def test_explain_names_the_learned_model_that_ranks(home):
    """Once learn=True taught the kernel a model, explain's header names that model (it
    named the hook's "h200" while printing the learned model's ranking)."""
    from costtune.tune.explain import explain_call

    first = run(tuner(StepBench(), learn=True))
    (path,) = first.learner.updated
    second = tuner(StepBench(), learn=True)
    m, n, k = 32, 64, 64
    x, y = torch.randn(m, k).half(), torch.randn(k, n).half()
    report = explain_call(second, (x, y, torch.empty(m, n), m, n, k),
                          {"grid": lambda meta: (triton.cdiv(m, meta["BM"]),
                                                 triton.cdiv(n, meta["BN"]))})
    assert report.model == str(path)


def test_a_script_that_ends_after_its_one_tuning_still_learns(home):
    """The script's last line is its only tuning: exit waits for the update, which must not
    import modules registering exit hooks once shutdown began (it raised "can't register
    atexit after shutdown" and the kernel learned nothing)."""
    env = {**os.environ, "COSTTUNE_HOME": str(home), "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    code = ("import time, learning_helpers as h, costtune.tune.learn as learn\n"
            "imports = learn._import_update_modules\n"  # as if slow: the script ends first
            "learn._import_update_modules = lambda: (time.sleep(2), imports())\n"
            "h.run(h.tuner(h.StepBench(), learn=True))\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "not updated" not in out.stderr and "Traceback" not in out.stderr
    (written,) = home.glob("kernels/learned_matmul-*/*/current.json")
    assert current_model(written.parent)[1]["rows"] == 8


def test_an_update_imports_nothing_beside_a_tuning(home, monkeypatch):
    """What an update imports is imported first, in a thread the next tuning waits for (as
    for a preload); the update starts only after it: a tuning and an update never import
    side by side (which handed the pruner a half-initialised module on the H200)."""
    import threading

    from costtune.model import learned
    from costtune.tune import learn, preload

    release, order, real = threading.Event(), [], learned.update

    def imports():
        release.wait(60)
        order.append("imports")

    def update(*args, **kwargs):
        order.append("update")
        return real(*args, **kwargs)

    monkeypatch.setattr(learn, "_import_update_modules", imports)
    monkeypatch.setattr(learned, "update", update)
    t = run(tuner(StepBench(), learn=True))
    running = [th for th in preload._RUNNING if th.is_alive()]
    assert [th.name for th in running] == ["costtune-learn-imports"] and order == []
    release.set()
    preload.wait()  # what the next tuning call does first
    t.learner.wait()
    assert order == ["imports", "update"]


def test_an_update_thread_that_dies_leaves_no_one_waiting(home, monkeypatch):
    """An update thread ended by anything (here a BaseException) clears its entry and says
    what it could not learn; the kernel's next tuning starts a new thread, which learns."""
    from costtune.model import learned

    class Stop(BaseException):
        pass

    real, calls = learned.update, []

    def dies_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise Stop
        return real(*args, **kwargs)

    monkeypatch.setattr(learned, "update", dies_once)
    monkeypatch.setattr("threading.excepthook", lambda args: None)  # the thread's Stop
    t = run(tuner(StepBench(), learn=True))
    t.learner.wait()  # returns: the dead thread's entry is gone
    assert t.learner._pending is None and t.learner.updated == []
    run(t, 64, 64, 64)
    (path,) = t.learner.updated
    assert current_model(t.learner.folder())[0] == path


def test_a_failed_update_warns_at_the_tuning_call_not_in_threading(home, monkeypatch):
    """The update runs in a background thread; its failure is said at the launch that tuned
    (here learning_helpers.run), not at a frame of threading.py."""
    import warnings

    from costtune.model import learned

    def fails(*args, **kwargs):
        raise ValueError("disk full")

    monkeypatch.setattr(learned, "update", fails)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        t = run(tuner(StepBench(), learn=True))
        t.learner.wait()
    (w,) = [w for w in seen if "was not updated" in str(w.message)]
    assert "disk full" in str(w.message)
    assert Path(w.filename).name == "learning_helpers.py", w.filename


_FORK_SCRIPT = """
import os, threading
import torch
torch.set_num_threads(1)  # torch's own thread pool is not fork-safe
from learning_helpers import StepBench, run, tuner
from costtune.model import learned
gate, real = threading.Event(), learned.update
def held(*args, **kwargs):
    gate.wait(60)
    return real(*args, **kwargs)
learned.update = held
t = run(tuner(StepBench(), learn=True))  # its update held in the worker thread
assert t.learner._pending.is_alive()
pid = os.fork()
if pid == 0:
    code = 1
    try:
        learned.update = real
        run(t, 64, 64, 64)
        waiter = threading.Thread(target=t.learner.wait, daemon=True)
        waiter.start()
        waiter.join(500)  # a refit of the shipped GEMM model: ~20 s, minutes on a busy box
        code = 2 if waiter.is_alive() else 0 if len(t.learner._updated) == 1 else 3
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
gate.set()
print("CHILD", os.waitstatus_to_exitcode(status), "PARENT", len(t.learner.updated))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_process_forked_during_an_update_learns_on_its_own(home):
    """A child forked while the parent's update runs has no such thread: it forgets it (no
    wait spins on it) and learns its own tunings with a thread of its own."""
    env = {**os.environ, "COSTTUNE_HOME": str(home / "fork"), "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    out = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=800)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "CHILD 0 PARENT 1" in out.stdout


_FORK_AT_ONCE = """
import importlib.abc, importlib.machinery, os, sys, threading, time
import torch
torch.set_num_threads(1)
from learning_helpers import StepBench, run, tuner
SLOW, started = "costtune.model.learned", threading.Event()
class Slow(importlib.abc.MetaPathFinder):  # that module takes a second to import
    def find_spec(self, name, path, target=None):
        if name != SLOW:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run_module = spec.loader.exec_module
        def exec_module(module):
            started.set()
            time.sleep(1.0)
            run_module(module)
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Slow())
assert SLOW not in sys.modules
t = run(tuner(StepBench(), learn=True))  # the update's imports now run in a thread
assert started.wait(120)
pid = os.fork()  # while that thread imports it
if pid == 0:
    code = 1
    try:
        run(t, 64, 64, 64)
        waiter = threading.Thread(target=t.learner.wait, daemon=True)
        waiter.start()
        waiter.join(500)
        code = 2 if waiter.is_alive() else 0 if len(t.learner._updated) == 1 else 3
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
t.learner.wait()
print("CHILD", os.waitstatus_to_exitcode(status), "PARENT", len(t.learner.updated))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_process_forked_while_the_update_imports_learns_on_its_own(home):
    """Forked while the parent's update thread imports its modules (a multiprocessing pool
    started right after a tuning): the child neither hangs on a module lock that thread held
    nor meets a half-initialised module; the fork waits for the imports."""
    env = {**os.environ, "COSTTUNE_HOME": str(home / "fork"), "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    out = subprocess.run([sys.executable, "-c", _FORK_AT_ONCE], env=env, capture_output=True,
                         text=True, timeout=800)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "CHILD 0 PARENT 1" in out.stdout, out.stdout + out.stderr[-2000:]


_AFTER_MAIN = """
import sys, threading, time
from learning_helpers import StepBench, run, tuner
t = tuner(StepBench(), learn=True)
def worker():
    time.sleep(1.0)  # the main thread has finished: the interpreter is shutting down
    try:
        run(t)
        print("TUNED", t.learner.skipped, flush=True)
    except Exception as exc:
        print("RAISED", type(exc).__name__, exc, flush=True)
threading.Thread(target=worker).start()
"""


def test_a_tuning_after_the_main_thread_ended_tunes_and_says_it_did_not_learn(home):
    """A worker thread tuning after the script's last line (a server thread): the call tunes;
    learning, which cannot start at the interpreter's shutdown, is skipped with a warning."""
    env = {**os.environ, "COSTTUNE_HOME": str(home / "late"), "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    out = subprocess.run([sys.executable, "-c", _AFTER_MAIN], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0 and "TUNED" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "after shutdown" in out.stdout and "was not updated" in out.stderr


def test_learning_runs_beside_the_program_and_no_tuning_waits(home, monkeypatch):
    """The update runs in a thread and nothing waits for it but the process's exit: a tuning
    made while it runs ranks with the model learned before (here the shipped one), the rows of
    tunings made meanwhile are learned together in one more update, later tunings rank with
    the newest model, and a process that exits right after tuning still writes it."""
    import threading

    from costtune.model import learned

    gate, real, calls = threading.Event(), learned.update, []

    def held(folder, rows, **kwargs):
        gate.wait(60)
        calls.append(len(rows))
        return real(folder, rows, **kwargs)

    monkeypatch.setattr(learned, "update", held)
    t = run(tuner(StepBench(), learn=True))  # returned while its update waits on the gate
    folder = t.learner.folder()
    assert t.learner._pending.is_alive() and current_model(folder) is None
    # Two more tunings of the kernel, new shapes, by another tuner and by the first: neither
    # waits (the update is still held), both rank with the shipped model.
    other = run(tuner(StepBench(), learn=True), 64, 64, 64)
    run(t, 128, 64, 64)
    assert other.early_config_prune.last.model == "h200" == t.early_config_prune.last.model
    assert t.learner._pending.is_alive() and current_model(folder) is None
    gate.set()
    (first, both) = t.learner.updated  # its first tuning's, then one for the two queued
    assert other.learner.updated == [both] and len(calls) == 2 and calls[1] == 2 * calls[0]
    assert current_model(folder)[0] == both
    run(t, 128, 128, 64)  # ranks with the newest learned model
    assert t.early_config_prune.last.model == str(both)

    monkeypatch.setattr(learned, "update", real)
    env = {**os.environ, "COSTTUNE_HOME": str(home / "exits"), "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    code = ("from learning_helpers import StepBench, run, tuner\n"
            "run(tuner(StepBench(), learn=True))\n")  # exits without waiting itself
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=600)  # a refit at exit: minutes on a busy box
    assert out.returncode == 0, out.stderr[-2000:]
    written = list((home / "exits").rglob("current.json"))
    assert len(written) == 1 and current_model(written[0].parent) is not None


def test_wrappers_with_different_models_each_learn_from_their_own(home, tmp_path,
                                                                   monkeypatch):
    """Two autotune wrappers of one kernel, one ranking with the shipped model and one with a
    model file of the user's, tuning while an update runs: their queued rows are learned in
    one update per base (they were all learned from the first one's base)."""
    import threading

    from costtune.model import learned

    df = costtune.load_dataset(DATASET, kernel="gemm")
    own = CostModel(n_estimators=5, family="gemm").fit(df[df["workload"].isin(
        sorted(df["workload"].unique())[:4])])
    own_path = str(own.save(tmp_path / "own"))
    gate, real, bases = threading.Event(), learned.update, []

    def held(folder, rows, **kwargs):
        gate.wait(60)
        bases.append(kwargs["base"])
        return real(folder, rows, **kwargs)

    monkeypatch.setattr(learned, "update", held)
    shipped = run(tuner(StepBench(), learn=True))  # its update waits on the gate
    mine = run(tuner(StepBench(), learn=True, model=own_path), 64, 64, 64)
    run(shipped, 128, 64, 64)
    gate.set()
    assert len(shipped.learner.updated) == 2 and len(mine.learner.updated) == 1
    assert bases[0] == "h200" and sorted(bases[1:]) == sorted(["h200", own_path])
    path, record = current_model(shipped.learner.folder())
    assert record["base"] == bases[-1] and record["workloads"] == 3


def test_concurrent_updates_keep_every_row(tmp_path):
    df = costtune.load_dataset(DATASET, kernel="softmax")
    workloads = sorted(df["workload"].unique())[:3]
    paths = []
    for i, w in enumerate(workloads):
        paths.append(tmp_path / f"rows{i}.parquet")
        df[df["workload"] == w].to_parquet(paths[-1])
    folder = tmp_path / "kernel"
    ctx = multiprocessing.get_context("spawn")
    start, done = ctx.Event(), ctx.Queue()
    from learning_helpers import update_worker

    procs = [ctx.Process(target=update_worker, args=(str(folder), str(p), start, done))
             for p in paths]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(600)  # three refits on two cores: minutes when the box is busy
    assert [p.exitcode for p in procs] == [0, 0, 0]
    written = {done.get(timeout=5) for _ in procs}
    assert len(written) == 3
    path, record = current_model(folder)
    assert str(path) in written and record["rows"] == int(df["workload"].isin(workloads).sum())
    rows = read_rows(folder)
    assert sorted(rows["workload"].unique()) == workloads
    assert not rows.duplicated(["workload", "config"]).any()
    model = CostModel.load(path)  # the current pair is whole
    assert len(model.predict(df[df["workload"] == workloads[0]])) > 0
    assert not list(folder.glob("*.tmp")) and len(list(folder.glob("model-*.json"))) <= 2


def test_update_checks_its_rows(tmp_path):
    df = costtune.load_dataset(DATASET, kernel="softmax").head(5)
    with pytest.raises(ValueError, match="rows must be gemm rows"):
        update(tmp_path, df, family="gemm")
    with pytest.raises(ValueError, match="no rows"):
        update(tmp_path, df.iloc[:0], family="softmax")


def test_a_tuning_of_one_config_per_shape_teaches_nothing_and_keeps_its_rows(home):
    """top_k=1 benchmarks one config of the shape: no order to learn, so no model is written
    (a refit on it only moved the model's bins and cost later picks), the rows are kept, and
    a later tuning that benchmarks two configs of a shape learns from those."""
    first = run(tuner(StepBench(), top_k=1, learn=True))
    assert len(first.configs_timings) == 1 and first.learner.updated == []
    (why,) = first.learner.skipped
    assert "no new order to learn" in why
    folder = first.learner.folder()
    assert current_model(folder) is None and len(read_rows(folder)) == 1
    second = run(tuner(StepBench(), top_k=2, learn=True), m=48)
    assert second.early_config_prune.last.model == "h200"  # nothing learned to rank with
    (path,) = second.learner.updated
    path_now, record = current_model(folder)
    assert path_now == path and record["workloads"] == 1 and record["rows"] == 2
    assert len(read_rows(folder)) == 3
    third = run(tuner(StepBench(), top_k=1, learn=True), m=80)  # a new shape, one config:
    assert third.early_config_prune.last.model == str(path)  # ranked by what was learned,
    assert third.learner.updated == [] and len(third.learner.skipped) == 1  # not refitted
    assert current_model(folder)[0] == path and len(read_rows(folder)) == 4


def test_update_learns_only_from_workloads_with_an_order(tmp_path):
    df = costtune.load_dataset(DATASET, kernel="softmax")
    first, second = sorted(df["workload"].unique())[:2]
    one = df[df["workload"] == first].head(1)
    assert update(tmp_path, one, family="softmax") is None
    assert current_model(tmp_path) is None and len(read_rows(tmp_path)) == 1
    failed = df[df["workload"] == second].head(3).assign(status="compile_error")
    assert update(tmp_path, failed, family="softmax") is None  # nothing measured
    path = update(tmp_path, df[df["workload"] == second].head(4), family="softmax")
    record = current_model(tmp_path)[1]
    assert current_model(tmp_path)[0] == path and record["rows"] == 4
    assert len(read_rows(tmp_path)) == 5


def test_train_on_a_harvested_store(home, tmp_path):
    store = tmp_path / "harvest"
    with costtune.harvest(store) as h:
        run(tuner(StepBench(), top_k=3))
    assert h.rows == 3
    res = CliRunner().invoke(app, ["train", "--dataset", str(store)])
    assert res.exit_code == 0, res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("trained the per-kernel model of learned_matmul (gemm, source ")
    assert "refitted from h200) on 1 workloads (3 rows, this store's 3 among them)" in line
    path = Path(line.rsplit(" -> ", 1)[1])
    rows = costtune.load_dataset(store)
    folder = kernel_dir("learned_matmul", rows["kernel_hash"].iloc[0], rows["gpu"].iloc[0])
    assert path.parent == folder and current_model(folder)[0] == path
    record = json.loads((folder / "current.json").read_text())
    assert record["family"] == "gemm" and record["method"] == "refit"
    # Options for a model file do not apply to per-kernel models: said, nothing trained.
    for extra in (["--out", str(tmp_path / "m")], ["--objective", "reg:logtime"],
                  ["--suite", "all"]):
        res = CliRunner().invoke(app, ["train", "--dataset", str(store), *extra])
        assert res.exit_code != 0 and f"{extra[0]} do not apply" in res.output, res.output
    assert current_model(folder)[0] == path


def test_train_on_a_store_of_one_config_per_shape_says_it_learned_nothing(home, tmp_path):
    store = tmp_path / "harvest"
    with costtune.harvest(store):
        run(tuner(StepBench(), top_k=1))
    res = CliRunner().invoke(app, ["train", "--dataset", str(store)])
    assert res.exit_code == 0, res.output
    assert "learned nothing for learned_matmul (gemm" in res.output
    assert "no new order to learn" in res.output
    rows = costtune.load_dataset(store)
    folder = kernel_dir("learned_matmul", rows["kernel_hash"].iloc[0], rows["gpu"].iloc[0])
    assert current_model(folder) is None and len(read_rows(folder)) == 1


def test_train_then_learn_on_one_kernel_keeps_its_model_learning(home, tmp_path):
    """A store's rows carry an implementation column, learn=True's do not: mixed, the
    kernel's next update used to fail for good (its rows were written before the fit)."""
    store = tmp_path / "harvest"
    with costtune.harvest(store):
        run(tuner(StepBench(), top_k=3))
    assert CliRunner().invoke(app, ["train", "--dataset", str(store)]).exit_code == 0
    rows = costtune.load_dataset(store)
    folder = kernel_dir("learned_matmul", rows["kernel_hash"].iloc[0], rows["gpu"].iloc[0])
    t = run(tuner(StepBench(), top_k=3, learn=True), m=48)
    t.learner.wait()
    assert current_model(folder)[1]["workloads"] == 2 and not t.learner.skipped
    assert read_rows(folder)["workload"].nunique() == 2


def test_a_family_model_names_rows_without_a_kernel():
    df = costtune.load_dataset(DATASET, kernel="softmax").head(40)
    df.loc[df.index[:5], "kernel"] = None  # harvested kernels that read as no family
    with pytest.raises(ValueError, match="5 rows have no kernel"):
        CostModel(family="all").fit(df)
    assert len(CostModel(family="softmax", n_estimators=5).fit(df).predict(df.dropna(
        subset=["kernel"]))) == 35


def test_train_on_a_store_of_no_family(tmp_path):
    store = tmp_path / "other"
    costtune.Store(store).append([{"kernel": "layer_norm", "workload": "ln_N64_float16",
                                   "dtype": "float16", "N": 64, "BLOCK": b, "num_warps": 4,
                                   "num_stages": 2, "family": None, "kernel_hash": "ab" * 32,
                                   "config": f"BLOCK={b},num_warps=4,num_stages=2",
                                   "status": "ok", "time_ms": 0.01 * b} for b in (16, 32)],
                                 meta={"gpu": "NVIDIA H200"})
    res = CliRunner().invoke(app, ["train", "--dataset", str(store)])
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "read as no kernel family" in lines[0], res.output
    assert "layer_norm" in lines[0]


def test_train_on_a_harvest_without_source_hashes_trains_a_family_model(home, tmp_path):
    store, old = tmp_path / "harvest", tmp_path / "old"
    with costtune.harvest(store):
        run(tuner(StepBench(), top_k=3))
    rows = costtune.load_dataset(store).drop(columns=["kernel_hash"])  # harvested before it
    costtune.Store(old).append(rows.to_dict("records"), meta={"gpu": "cpu"})
    out = tmp_path / "family_model"
    res = CliRunner().invoke(app, ["train", "--dataset", str(old), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.strip().splitlines()[-1] == (
        f"trained a gemm family model on 1 workloads (3 rows, suite=harvested) -> {out}.json")
    model = CostModel.load(out)
    assert model.families_ == ["gemm"] and set(model.shape_ranges_["gemm"]) == {"M", "N", "K"}
    assert not (home / "kernels").exists()


def _fake_user_compile(fn, args, configs, **kw):
    """Compiled features of the user's kernel as kernel_compiled_table gives them (the
    interpreter compiles nothing): registers grow with the tile."""
    import pandas as pd

    from costtune.features.compiled import COMPILED_FEATURES

    table = pd.DataFrame(0.0, index=range(len(configs)), columns=COMPILED_FEATURES)
    table["n_regs"] = [c.kwargs["BM"] * c.kwargs["BN"] / c.num_warps for c in configs]
    table.insert(0, "compile_key", [str(c) for c in configs])
    table.insert(0, "compile_s", 0.1)
    table.insert(0, "compile_error", "")
    table.insert(0, "compile_status", "ok")
    return table


def test_two_stage_learns_its_compiled_model_too(home, tmp_path, monkeypatch):
    """learn=True with two_stage=True: the stage-2 model learns from the same rows with the
    user's kernel's compiled features (the folder's stage2/), and the next tuning call of the
    kernel re-ranks with it."""
    from costtune.features.compiled import COMPILED_FEATURES
    from costtune.tune.learn import STAGE2

    monkeypatch.setattr("costtune.tune.ranking.kernel_compiled_table", _fake_user_compile)
    df = costtune.load_dataset(DATASET, kernel="gemm")
    rows = df[df["workload"].isin(sorted(df["workload"].unique())[:4])]
    table = _fake_user_compile(None, None, [])  # the columns, to fit a small stage-2 model
    compiled = rows.drop_duplicates(["workload", "config"])[["workload", "config"]].assign(
        compile_status="ok", **{c: 1.0 for c in COMPILED_FEATURES})
    assert set(table.columns) - set(compiled.columns) <= {"compile_error", "compile_key",
                                                          "compile_s"}
    stage2 = CostModel(features="static+compiled", family="gemm", n_estimators=5,
                       max_depth=3).fit(rows, compiled=compiled)
    path = str(stage2.save(tmp_path / "stage2_small"))
    first = run(tuner(StepBench(), learn=True, two_stage=True, stage2_model=path, shortlist=8,
                      top_k=2))
    folder = first.learner.folder()
    assert len(first.learner.updated) == 2, first.learner.skipped
    assert first.learner.updated[1].parent == folder / STAGE2
    learned = read_rows(folder / STAGE2)
    assert len(learned) == len(read_rows(folder)) == 2 and (learned["n_regs"] > 0).all()
    assert current_model(folder / STAGE2)[1]["base"] == path
    assert first.early_config_prune.last.stage2_model == path  # nothing learned yet
    second = run(tuner(StepBench(), learn=True, two_stage=True, stage2_model=path,
                       shortlist=8, top_k=2), 64, 64, 64)
    assert second.early_config_prune.last.stage2_model == str(first.learner.updated[1])


def test_two_stage_learning_is_skipped_where_nothing_compiles(home):
    """Under the interpreter the user's kernel does not compile: stage 1 learns, stage 2 is
    skipped with its reason (no warning)."""
    first = run(tuner(StepBench(), learn=True, two_stage=True, top_k=2))
    assert len(first.learner.updated) == 1
    assert any(s.startswith("stage 2: RuntimeError: Triton's interpreter")
               for s in first.learner.skipped)


@pytest.mark.parametrize("text", ["{}", "[1]", '{"model": 3}', '{"model": "../x"}', "null"])
def test_a_pointer_costtune_did_not_write_is_no_model(text, tmp_path):
    """A kernel folder's current.json that is JSON but no pointer: no model (the shipped
    base ranks, and the next update rewrites it), not a KeyError on every call."""
    (tmp_path / "current.json").write_text(text)
    assert current_model(tmp_path) is None


def test_a_relative_home_stays_where_it_was_first_used(tmp_path, monkeypatch):
    from costtune.model.files import user_home

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTTUNE_HOME", "rel_home_for_test")
    first = user_home()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert user_home() == first == tmp_path / "rel_home_for_test"


def test_an_unreadable_rows_file_is_moved_aside(tmp_path):
    from costtune.model.learned import ROWS
    from costtune.types import CosttuneWarning

    (tmp_path / ROWS).write_bytes(b"PAR1 cut short")
    with pytest.warns(CosttuneWarning, match="could not be read"):
        assert read_rows(tmp_path).empty
    assert not (tmp_path / ROWS).exists()
    assert len(list(tmp_path.glob(f"{ROWS}.unreadable-*"))) == 1


def test_an_update_removes_what_writers_killed_mid_write_left(tmp_path):
    """Temp files a killed update left in the kernel's folder go with the next update (which
    holds the folder's lock, as every writer there does); the lock file stays."""
    from costtune.model.learned import LOCK, update

    df = costtune.load_dataset(DATASET, kernel="softmax")
    rows = df[df["workload"] == sorted(df["workload"].unique())[0]]
    folder = tmp_path / "kernel"
    folder.mkdir()
    left = [".model-20261205T070652-bc0117dc.6024f214.ubj", ".rows.parquet.1a2b3c4d.tmp",
            ".model-x.forest.npz.123.tmp.npz", ".model-x.train.npz.9f8e7d6c.npz"]
    for name in left:
        (folder / name).write_bytes(b"")
    update(folder, rows, base="h200", family="softmax")
    assert not [p.name for p in folder.glob(".*") if p.name != LOCK]
    assert (folder / LOCK).exists() and current_model(folder) is not None


@triton.jit
def _twice(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * 2, mask=mask)


def test_a_kernel_of_no_family_says_why_it_is_not_learned(home):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    t = costtune.autotune(configs, key=["n"], learn=True, do_bench=StepBench())(_twice)
    x = torch.randn(100)
    out = torch.empty_like(x)
    with pytest.warns(costtune.CosttuneWarning):
        t[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, out, 100)
    assert torch.allclose(out, 2 * x)
    (why,) = t.learner.skipped
    assert "is not learned" in why and "costtune explain" in why
    assert not (home / "kernels").exists() or not any((home / "kernels").iterdir())
