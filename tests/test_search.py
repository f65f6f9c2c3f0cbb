"""costtune.search.study: Optuna studies over config spaces, answered by replay of the H200
dataset."""

from __future__ import annotations

import json
import multiprocessing as mp
import warnings
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

import costtune
from costtune.measure.replay import ReplayRunner
from costtune.model.registry import rank_configs
from costtune.search.claims import Claims
from costtune.search.samplers import SAMPLERS, make_sampler
from costtune.search.study import INVALID, ConfigStudy, search
from costtune.space.config_space import ConfigSpace
from costtune.types import Config, Status

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO / "datasets" / "h200"
optuna.logging.set_verbosity(optuna.logging.WARNING)


class Recording:
    """A runner that forwards to another and records every config it is asked to measure."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.asked: list[str] = []

    def measure(self, workload, configs):
        self.asked += [c.key for c in configs]
        return self.runner.measure(workload, configs)


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    return costtune.load_dataset(DATASET, kernel="softmax")


@pytest.fixture(scope="module")
def attention() -> pd.DataFrame:
    return costtune.load_dataset(DATASET, kernel="attention")


def first_test_workload(rows: pd.DataFrame, kernel: str):
    runner = ReplayRunner(rows[rows["suite"] == "test"])
    w = runner.workloads()[0]
    return w, runner, costtune.get_family(kernel).config_space(w.sizes)


def measured_trials(study: optuna.Study) -> list:
    return [t for t in study.trials if t.user_attrs.get("status") not in (None, INVALID)
            and not t.user_attrs.get("cached")]


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_finds_a_valid_config_by_replay(data, sampler):
    w, runner, space = first_test_workload(data, "softmax")
    rec = Recording(runner)
    options = {"n_startup_trials": 3} if sampler in ("tpe", "gp") else None
    study = ConfigStudy(w, rec, space=space, sampler=sampler, seed=1, sampler_options=options)
    result = study.optimize(6)
    assert result.n_measured == 6 == len(rec.asked) == len(set(rec.asked))
    assert result.best_config in space
    assert set(rec.asked) <= {c.key for c in space.configs()}
    times = {m.config.key: m.time_ms for m in runner.measure(w, space.configs())}
    assert result.best_time_ms == min(times[k] for k in rec.asked)
    assert result.best_config.key in rec.asked
    assert result.history == list(np.minimum.accumulate([times[k] for k in rec.asked]))


def test_unknown_sampler_or_option_raises():
    with pytest.raises(ValueError, match="unknown sampler"):
        make_sampler("bo")
    with pytest.raises(ValueError, match="unknown option"):
        make_sampler("tpe", options={"n_startup": 3})
    with pytest.raises(ValueError, match="unknown option"):
        search(None, None, n_trials=1, smapler="tpe")


def test_failing_and_unrecorded_configs_end_pruned_with_status(data):
    w, _, space = first_test_workload(data, "softmax")
    rows = data[data["workload"] == w.id].reset_index(drop=True)
    failing = rows.index % 3 == 1
    rows.loc[failing, "status"] = Status.COMPILE_ERROR.value
    rows.loc[failing, "time_ms"] = np.nan
    rows.loc[failing, "error"] = "CompilationError: made up for the test"
    rows = rows[rows.index % 3 != 2]  # a third is missing: NOT_MEASURED under replay
    study = ConfigStudy(w, ReplayRunner(rows), space=space, sampler="random", seed=0)
    result = study.optimize(30)
    by_status: dict[str, list] = {}
    for t in measured_trials(study.study):
        by_status.setdefault(t.user_attrs["status"], []).append(t)
    assert set(by_status) == {"ok", "compile_error", "not_measured"}
    for status, trials in by_status.items():
        want = TrialState.COMPLETE if status == "ok" else TrialState.PRUNED
        assert all(t.state == want for t in trials)
        assert status == "ok" or all(t.user_attrs.get("error") for t in trials)
    ok = rows[rows["status"] == "ok"]
    assert result.best_config.key in set(ok["config"])
    assert result.best_time_ms >= ok["time_ms"].min()


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_constraints_filter_invalid_proposals_before_the_runner(data, sampler):
    w, runner, space = first_test_workload(data, "softmax")
    rec = Recording(runner)
    study = ConfigStudy(w, rec, space=space, sampler=sampler, seed=0)
    assert study.optimize(12).best_config in space
    invalid = [t for t in study.study.trials if t.user_attrs.get("status") == INVALID]
    assert invalid, "the softmax space rejects some combinations of its parameter values"
    valid_keys = {c.key for c in space.configs()}
    for t in invalid:
        assert t.state == TrialState.PRUNED and t.user_attrs["config"] not in valid_keys
        assert t.user_attrs["violated"]
        # TPE reads the violated constraints (> 0 = infeasible); random ignores them.
        want = set(t.user_attrs["violated"]) if sampler == "tpe" else set()
        assert {k for k, v in t.constraints.items() if v > 0} == want
    assert set(rec.asked) <= valid_keys


def test_a_config_measured_once_is_reused(attention):
    w, runner, space = first_test_workload(attention, "attention")
    rec = Recording(runner)
    study = ConfigStudy(w, rec, space=space, sampler="random", seed=0)
    params = study.encoding.params(space.configs()[3])
    study.study.enqueue_trial(params)
    study.study.enqueue_trial(params)
    first, new1 = study.step()
    second, new2 = study.step()
    assert (new1, new2) == (True, False) and rec.asked == [space.configs()[3].key]
    assert second.cached and second.time_ms == first.time_ms
    assert study.study.trials[1].user_attrs["measured_by"] == first.number
    study.optimize(40)  # the whole space (32 configs): each measured once, then it stops
    assert sorted(rec.asked) == sorted(c.key for c in space.configs())


@pytest.fixture(scope="module")
def model(attention):
    from costtune.model.xgb import CostModel

    train = attention[attention["suite"] == "train"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CostModel(family="attention", n_estimators=20).fit(train)


def test_warm_start_enqueues_the_model_top_configs_first(attention, model):
    w, runner, space = first_test_workload(attention, "attention")
    rec = Recording(runner)
    study = ConfigStudy(w, rec, space=space, sampler="tpe", seed=0, warm_start=model,
                        n_warm=4)
    result = study.optimize(6)
    top = [c.key for c in rank_configs(model, w, configs=space.configs())[:4]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert top == [c.key for c in model.top_k("attention", w.sizes, w.dtype,
                                                   space.configs(), 4)]
    assert rec.asked[:4] == top and len(rec.asked) == 6
    assert [t.source for t in result.trials[:4]] == ["warm_start"] * 4
    assert [t.user_attrs["warm_rank"] for t in study.study.trials[:4]] == [0, 1, 2, 3]
    # The prior sampler at temperature 0 is the same top-k order, drawn instead of enqueued.
    prior = ConfigStudy(w, Recording(runner), space=space, seed=0, prior=model, n_prior=4,
                        temperature=0.0)
    assert prior.optimize(4).trials[0].source == "prior"
    assert prior.runner.asked == top


def test_named_sqlite_study_resumes(tmp_path, attention):
    w, runner, space = first_test_workload(attention, "attention")
    rec = Recording(runner)
    db = tmp_path / "studies.db"
    first = ConfigStudy(w, rec, space=space, storage=db, study_name="resume", seed=0)
    first.optimize(2)
    again = ConfigStudy(w, rec, space=space, storage=str(db), study_name="resume", seed=1)
    result = again.optimize(2)
    assert len(measured_trials(again.study)) == 4 == len(rec.asked) == len(set(rec.asked))
    assert result.best_time_ms == min(t.value for t in again.study.trials
                                      if t.state == TrialState.COMPLETE)
    other, runner2, space2 = first_test_workload(attention[attention["workload"] != w.id],
                                                 "attention")
    with pytest.raises(ValueError, match="use another study name"):
        ConfigStudy(other, runner2, space=space2, storage=db, study_name="resume")


def test_claims_elect_the_first_claim():
    claims = Claims(optuna.storages.InMemoryStorage(), "s")
    assert claims.elect("k", trial_id=5).won
    assert not claims.elect("k", trial_id=2).won
    assert claims.elect("k", trial_id=2, attempt=1).won
    assert claims.elect("other", trial_id=9).won


def _worker(url: str, rows: pd.DataFrame, out: str, start) -> None:
    """One of two processes running the same study (module level: spawn pickles it by name)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    runner = Recording(ReplayRunner(rows))
    w = runner.runner.workloads()[0]
    configs = [c.as_dict() for c in runner.runner.configs(w)]
    keys = {Config.from_dict(c).key for c in configs}
    # The recorded configs as a space: no triton import, so the worker starts fast.
    space = ConfigSpace({n: sorted({c[n] for c in configs}) for n in configs[0]},
                        constraints={"recorded": lambda c: Config.from_dict(c).key in keys})
    study = ConfigStudy(w, runner, space=space, storage=url, study_name="shared", seed=0)
    start.wait()
    result = study.optimize(4)
    Path(out).write_text(json.dumps({"numbers": [t.number for t in result.trials],
                                     "asked": runner.asked}))


def test_two_processes_share_one_sqlite_study(tmp_path, attention):
    rows = attention[attention["workload"] == attention["workload"].iloc[0]]
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    optuna.create_study(storage=url, study_name="shared")  # tables exist before workers race
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    outs = [str(tmp_path / f"w{i}.json") for i in range(2)]
    procs = [ctx.Process(target=_worker, args=(url, rows, out, start)) for out in outs]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    a, b = (json.loads(Path(out).read_text()) for out in outs)
    trials = optuna.load_study(study_name="shared", storage=url).trials
    assert sorted(a["numbers"] + b["numbers"]) == sorted(t.number for t in trials)
    assert len(trials) == len(a["numbers"]) + len(b["numbers"])
    assert not set(a["numbers"]) & set(b["numbers"])
    asked = a["asked"] + b["asked"]
    assert len(asked) == len(set(asked)) == 8  # both measured 4 configs, none twice
    done = [t for t in trials if t.state == TrialState.COMPLETE and not t.user_attrs.get("cached")]
    assert sorted(t.user_attrs["config"] for t in done) == sorted(asked)
    # Same seed, same proposals: the workers collided and reused each other's results.
    assert any(t.user_attrs.get("cached") for t in trials)


def test_search_function_runs_a_study(attention):
    w, runner, space = first_test_workload(attention, "attention")
    best = runner.best(w)
    result = search(w, runner, n_trials=64, space=space, sampler="qmc", seed=0,
                    target_ms=best.time_ms)
    assert result.stopped == "target" and result.best_time_ms == best.time_ms


def cli(*args: str):
    from typer.testing import CliRunner

    from costtune.cli import app

    return CliRunner().invoke(app, ["study", *args])


def test_cli_json_under_replay(attention):
    w, runner, _ = first_test_workload(attention, "attention")
    shape = ",".join(str(int(v)) for v in w.sizes.values())
    res = cli("attention", "--shape", shape, "--replay", str(DATASET), "--sampler", "random",
              "--n-trials", "5", "--seed", "0", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])  # after the progress bar (stderr)
    assert out["trials_run"] == 5 and out["workload"] == w.id
    assert set(out["best_config"]) == {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"}
    assert out["exhaustive_best_time_ms"] == runner.best(w).time_ms
    assert out["ratio"] == pytest.approx(out["exhaustive_best_time_ms"] / out["best_time_ms"])
    assert 0 < out["ratio"] <= 1


@pytest.mark.parametrize("args, message", [
    (("gemm", "--shape", "64,64"), "needs 3 comma-separated sizes"),
    (("gemm", "--shape", "64,x,64"), "must be an integer"),
    (("conv", "--shape", "1,2,3"), "unknown kernel"),
    (("gemm", "--shape", "64,64,64", "--sampler", "bayes"), "unknown sampler"),
    (("gemm", "--shape", "64,64,64", "--replay", "datasets/h200", "--dtype", "int8"),
     "takes dtype"),
])
def test_cli_bad_input_exits_2(args, message):
    res = cli(*args)
    assert res.exit_code == 2 and message in res.output


def test_cli_without_replay_needs_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    res = cli("gemm", "--shape", "64,64,64")
    assert res.exit_code == 2 and "--replay" in res.output


STUDY_WORKER = """
import sys, time
import optuna
import pandas as pd
from costtune.measure.replay import ReplayRunner
from costtune.search.study import ConfigStudy
from costtune.space.config_space import ConfigSpace
from costtune.types import Config

optuna.logging.set_verbosity(optuna.logging.ERROR)
url, rows, log, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runner = ReplayRunner(pd.read_parquet(rows))
w = runner.workloads()[0]
configs = [c.as_dict() for c in runner.configs(w)]
keys = {Config.from_dict(c).key for c in configs}
space = ConfigSpace({n: sorted({c[n] for c in configs}) for n in configs[0]},
                    constraints={"recorded": lambda c: Config.from_dict(c).key in keys})


class Logged:  # appends each config it measures to the log before measuring it
    def measure(self, workload, cs):
        with open(log, "a") as f:
            f.write(cs[0].key + "\\n")
        time.sleep(0.2)  # a measurement takes a while: the kill lands inside one
        return runner.measure(workload, cs)


study = ConfigStudy(w, Logged(), space=space, storage=url, study_name="shared", seed=seed,
                    heartbeat_s=1, grace_s=3)
for c in space.configs()[:4]:  # the same queued (WAITING) trials in every worker
    study.study.enqueue_trial(study.encoding.params(c))
print(study.optimize(5).n_measured)
"""


def _study_phase(url: str, rows: Path, tmp: Path, tag: str, seed: int) -> dict:
    """3 workers on one study; one is killed with SIGKILL after 2 measurements and restarted
    (resume). Returns what happened: exit codes, the measurement logs, the wall time."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def start(log: Path, seed: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", STUDY_WORKER, url, str(rows), str(log),
                                 str(seed)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    t0 = time.monotonic()
    logs = [tmp / f"{tag}{i}.log" for i in range(3)]
    procs = [start(log, seed + i) for i, log in enumerate(logs)]
    deadline = time.monotonic() + 120
    while len(logs[1].read_text().splitlines() if logs[1].exists() else []) < 2:
        assert procs[1].poll() is None, procs[1].communicate()
        assert time.monotonic() < deadline, "worker 1 never measured twice"
        time.sleep(0.02)
    os.kill(procs[1].pid, signal.SIGKILL)
    procs[1].wait()
    in_flight = logs[1].read_text().splitlines()[-1]
    resumed = start(tmp / f"{tag}1-resumed.log", seed + 1)
    outs = [p.communicate(timeout=180) for p in (procs[0], procs[2], resumed)]
    codes = [p.returncode for p in (procs[0], procs[2], resumed)]
    measured = [line for log in tmp.glob(f"{tag}*.log") for line in log.read_text().split()]
    return {"codes": codes, "errors": [e for _, e in outs if e.strip()], "killed": in_flight,
            "measured": measured, "seconds": time.monotonic() - t0,
            "counts": [int(o.split()[-1]) for o, _ in outs if o.split()]}


def test_three_workers_with_a_kill_on_a_fresh_and_an_existing_sqlite(tmp_path):
    """The issue's goal: 3 processes on one SQLite study, fresh then existing, with a kill -9
    in the middle of each run: no crash, no hang, no trial left RUNNING, no config measured
    twice (but the one the killed worker had in flight)."""
    from collections import Counter

    data = costtune.load_dataset(DATASET, kernel="gemm")
    rows = tmp_path / "rows.parquet"
    data[data["workload"] == "gemm_M16_N28672_K4096_float16"].to_parquet(rows)
    url = f"sqlite:///{tmp_path / 'studies.db'}"  # does not exist yet: the workers create it
    seen: list[str] = []
    killed: Counter = Counter()  # configs a killed worker had in flight
    for seed, tag in ((0, "fresh"), (10, "existing")):
        run = _study_phase(url, rows, tmp_path, tag, seed)
        killed[run["killed"]] += 1
        assert run["codes"] == [0, 0, 0] and run["errors"] == [], run
        assert len(run["counts"]) == 3 and run["seconds"] < 150, run  # no 600 s claim wait
        study = optuna.load_study(study_name="shared", storage=url)
        states = Counter(t.state.name for t in study.trials)
        assert states["RUNNING"] == 0, states
        twice = {k: n for k, n in Counter(seen + run["measured"]).items() if n > 1}
        assert all(n <= 1 + killed[k] for k, n in twice.items()), (twice, killed)
        seen += run["measured"]
        done = [t.user_attrs["config"] for t in study.trials
                if t.state == TrialState.COMPLETE and not t.user_attrs.get("cached")]
        assert len(done) == len(set(done))  # one measuring trial per config
    assert states["FAIL"] >= 2  # the killed workers' trials, failed by the others


def test_a_dead_workers_trial_fails_at_once_here_and_after_the_grace_elsewhere(tmp_path):
    from costtune.search.shared import OWNER_ATTR, fail_dead, open_storage

    storage = open_storage(tmp_path / "s.db", heartbeat_s=1, grace_s=2)
    study = optuna.create_study(storage=storage, study_name="s")
    local, remote, alive = study.ask(), study.ask(), study.ask()
    here = __import__("costtune.search.shared", fromlist=["owner"]).owner()
    host = here.rsplit(":", 2)[0]
    local.set_user_attr(OWNER_ATTR, f"{host}:999999999:1.00")  # this host, no such process
    remote.set_user_attr(OWNER_ATTR, "elsewhere|0|0:123:1.00")
    alive.set_user_attr(OWNER_ATTR, here)
    for t in (local, remote, alive):
        storage.record_heartbeat(t._trial_id)
    assert fail_dead(study) == [local.number]  # at once: its process is gone
    import time

    time.sleep(3.5)  # past the grace period without a heartbeat
    storage.record_heartbeat(alive._trial_id)
    fail_dead(study)
    states = {t.number: t.state for t in study.trials}
    assert states == {local.number: TrialState.FAIL, remote.number: TrialState.FAIL,
                      alive.number: TrialState.RUNNING}


def test_bad_storage_is_one_clear_error(tmp_path):
    from costtune.search.shared import open_storage

    with pytest.raises(ValueError, match="folder /no/such/dir does not exist"):
        open_storage("/no/such/dir/s.db")
    with pytest.raises(ValueError, match=r"storage nosuchdb://x: cannot open it"):
        open_storage("nosuchdb://x")
