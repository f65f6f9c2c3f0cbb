"""Dask collection on CPU: the replay runner stands in for the GPU, on real H200 rows.

A cluster of 2 single-threaded worker processes must store exactly what a single-process
collection stores, lose nothing when a worker dies or a task errors, and resume to completion.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path

import pandas as pd
import pytest
from distributed import Client, LocalCluster

from costtune.collect import workload_configs
from costtune.collect.dask import collect_dask
from costtune.measure.replay import ReplayRunner
from costtune.store.dataset import Store, load_dataset
from costtune.types import Status

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO / "datasets" / "h200"
MAX_CONFIGS, SEED = 24, 0
PER_RUN = ["run_id"]  # differs between two runs of the same workload; never compared


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    """4 softmax and 2 GEMM workloads of the H200 dataset (one part file each), as a store."""
    root = tmp_path_factory.mktemp("mini")
    src = Store(DATASET)
    for kernel, n in (("softmax", 4), ("gemm", 2)):
        (root / kernel).mkdir()
        for part in src.parts(kernel)[:n]:
            shutil.copy2(part, root / kernel / part.name)
    df = load_dataset(root)
    return root, df, ReplayRunner(df).workloads()


def replayed_rows(df: pd.DataFrame, w, n: int | None = None) -> list[dict]:
    configs = workload_configs(w, max_configs=MAX_CONFIGS, seed=SEED)[:n]
    ms = ReplayRunner(df).measure(w, configs)
    assert all(m.status is not Status.NOT_MEASURED for m in ms)
    return [m.as_row() for m in ms]


@pytest.fixture(scope="module")
def reference(mini, tmp_path_factory) -> pd.DataFrame:
    """A single-process collection: one workload after another, in this process."""
    _, df, workloads = mini
    store = Store(tmp_path_factory.mktemp("reference"))
    for w in workloads:
        store.append(replayed_rows(df, w), meta={"gpu": "replay"})
    return frame(store.load())


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, resources={"GPU": 1}) as cluster:
        with Client(cluster) as c:
            yield c


def frame(df: pd.DataFrame) -> pd.DataFrame:
    df = df.drop(columns=PER_RUN).sort_values(["workload", "config"]).reset_index(drop=True)
    return df[sorted(df.columns)]


def collect(workloads, root: Path, **kw) -> dict:
    kw = {"runner": "replay", "max_configs": MAX_CONFIGS, "seed": SEED, **kw}
    return collect_dask(workloads, Store(root), **kw)


def ready(client: Client) -> Client:
    client.wait_for_workers(2, timeout=60)  # a killed worker's nanny restarts it
    return client


def test_cluster_collection_equals_single_process(client, mini, reference, tmp_path):
    root, df, workloads = mini
    # Resume inside a workload: 5 of its configs are already stored.
    Store(tmp_path).append(replayed_rows(df, workloads[0], 5), meta={"gpu": "replay"})
    summary = collect(workloads, tmp_path, scheduler=ready(client), replay_dataset=root)
    assert summary["failed_workloads"] == [] and summary["errors"] == []
    assert summary["workloads"] == 6 and summary["configs"] == len(reference) - 5
    assert sum(summary["workers"].values()) == 6
    pd.testing.assert_frame_equal(frame(Store(tmp_path).load()), reference)
    store = Store(tmp_path)
    metas = [store.part_meta(p) for p in store.parts()]
    assert sum(m.get("collector") == "dask" for m in metas) == 6
    assert all(m["task_wall_s"] >= 0 for m in metas if m.get("collector") == "dask")
    assert {m["replay_source"] for m in metas if "replay_source" in m} == {str(root)}
    again = collect(workloads, tmp_path, scheduler=client, replay_dataset=df)
    assert again["skipped_workloads"] == 6 and again["workloads"] == 0


def test_replay_of_a_two_gpu_dataset_takes_the_gpu_asked_for(client, mini, tmp_path):
    _, df, workloads = mini
    both = pd.concat([df.assign(gpu="NVIDIA H200"),
                      df.assign(gpu="NVIDIA H100", time_ms=df["time_ms"] * 2)],
                     ignore_index=True)
    summary = collect(workloads[:1], tmp_path / "a", scheduler=ready(client),
                      replay_dataset=both, gpu="NVIDIA H100")
    assert summary["failed_workloads"] == [] and summary["errors"] == [], summary
    stored = Store(tmp_path / "a").load()
    assert set(stored["gpu"]) == {"NVIDIA H100"}
    want = df[df["workload"] == workloads[0].id].set_index("config")["time_ms"] * 2
    got = stored.set_index("config")["time_ms"]
    pd.testing.assert_series_equal(got.sort_index(), want.loc[got.index].sort_index())
    unsure = collect(workloads[:1], tmp_path / "b", scheduler=client, replay_dataset=both,
                     retries=0)
    assert unsure["failed_workloads"] == [workloads[0].id]
    assert "2 GPU models" in unsure["errors"][0] and "gpu=" in unsure["errors"][0]


def test_a_workload_another_collector_holds_is_skipped(client, mini, reference, tmp_path):
    """Two collections on one store: the one that finds a workload claimed skips it (busy),
    stores the rest, and a rerun after the claim is gone completes the store."""
    _, df, workloads = mini
    held = Store(tmp_path).claim(workloads[0].kernel, workloads[0].id, gpu=None)
    assert held is not None
    try:
        summary = collect(workloads, tmp_path, scheduler=ready(client), replay_dataset=df)
    finally:
        held.release()
    assert summary["busy_workloads"] == [workloads[0].id] and summary["workloads"] == 5
    assert workloads[0].id not in set(Store(tmp_path).load()["workload"])
    rest = collect(workloads, tmp_path, scheduler=client, replay_dataset=df)
    assert rest["workloads"] == 1 and rest["busy_workloads"] == []
    pd.testing.assert_frame_equal(frame(Store(tmp_path).load()), reference)


def test_local_cluster_pins_its_worker_to_one_gpu(mini, reference, tmp_path, monkeypatch):
    _, df, workloads = mini
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")  # our GPU 1 is the machine's GPU 7
    summary = collect(workloads, tmp_path, gpus=[1], replay_dataset=df)
    assert summary["workloads"] == 6 and not summary["errors"]
    store = Store(tmp_path)
    for part in store.parts():
        meta = store.part_meta(part)
        assert (meta["dask_worker_name"], meta["cuda_visible_devices"]) == ("gpu7", "7")
    pd.testing.assert_frame_equal(frame(store.load()), reference)


def test_one_worker_measures_in_the_given_order(mini, reference, tmp_path):
    """order="given" keeps the caller's order (the default spreads biggest first); the rows
    are the same either way."""
    _, df, workloads = mini
    given = list(reversed(workloads))
    for order, expected in (("given", given), ("spread", None)):
        seen: list[str] = []
        out = tmp_path / order
        summary = collect(given, out, gpus=[0], replay_dataset=df, order=order,
                          on_stored=lambda w, rows, seen=seen: seen.append(w.id))
        assert summary["workloads"] == 6 and not summary["errors"]
        if expected is not None:
            assert seen == [w.id for w in expected]
        else:
            assert seen != [w.id for w in given]
            assert sorted(seen) == sorted(w.id for w in given)
        pd.testing.assert_frame_equal(frame(Store(out).load()), reference)


def test_killed_worker_loses_no_stored_rows_and_rerun_completes(client, mini, reference,
                                                                tmp_path):
    _, df, workloads = mini
    client = ready(client)
    pids = client.run(os.getpid)
    seen: dict = {}

    def kill_a_busy_worker(w, rows):
        if seen:
            return
        busy = {a: keys for a, keys in client.processing().items() if keys}
        address, keys = next(iter(busy.items()))
        seen["stored"] = frame(Store(tmp_path).load())  # what must survive
        seen["killed"] = {w2.id for w2 in workloads if any(w2.id in str(k) for k in keys)}
        os.kill(pids[address], signal.SIGKILL)

    summary = collect(workloads, tmp_path, scheduler=client, replay_dataset=df,
                      replay_delay_s=0.6, on_stored=kill_a_busy_worker)
    assert seen["killed"], "the killed worker held no workload"
    after = frame(Store(tmp_path).load())  # raises on a duplicated (workload, config)
    kept = seen["stored"].merge(after, how="left", indicator=True)
    assert (kept["_merge"] == "both").all()
    stored = set(after["workload"])
    assert all(wid in stored or wid in summary["failed_workloads"] for wid in seen["killed"])
    assert summary["workloads"] + len(summary["failed_workloads"]) == 6

    rerun = collect(workloads, tmp_path, scheduler=ready(client), replay_dataset=df)
    assert rerun["workloads"] == len(summary["failed_workloads"])
    pd.testing.assert_frame_equal(frame(Store(tmp_path).load()), reference)


def test_task_error_is_retried_once_else_reported(client, mini, reference, tmp_path):
    _, df, workloads = mini
    client = ready(client)
    target = sorted(client.scheduler_info()["workers"])[:1]

    def arm_fault():  # on one worker, the next measurement raises (a GPU error), once
        from costtune.measure import replay

        original = replay.ReplayRunner.measure

        def fail_once(self, workload, configs):
            replay.ReplayRunner.measure = original
            raise RuntimeError("simulated GPU error")

        replay.ReplayRunner.measure = fail_once

    def fault_fired() -> bool:
        from costtune.measure import replay

        return replay.ReplayRunner.measure.__name__ == "measure"

    client.run(arm_fault, workers=target)
    s0 = collect(workloads, tmp_path / "a", scheduler=client, replay_dataset=df,
                 replay_delay_s=0.3, retries=0)
    assert all(client.run(fault_fired, workers=target).values())
    assert len(s0["failed_workloads"]) == 1 and s0["workloads"] == 5
    assert "simulated GPU error" in s0["errors"][0]
    assert s0["failed_workloads"][0] not in set(Store(tmp_path / "a").load()["workload"])
    rerun = collect(workloads, tmp_path / "a", scheduler=client, replay_dataset=df)
    assert rerun["workloads"] == 1 and rerun["skipped_workloads"] == 5
    pd.testing.assert_frame_equal(frame(Store(tmp_path / "a").load()), reference)

    client.run(arm_fault, workers=target)
    s1 = collect(workloads, tmp_path / "b", scheduler=client, replay_dataset=df,
                 replay_delay_s=0.3, retries=1)
    assert all(client.run(fault_fired, workers=target).values())
    assert s1["failed_workloads"] == [] and s1["workloads"] == 6
    pd.testing.assert_frame_equal(frame(Store(tmp_path / "b").load()), reference)


def test_refuses_a_cluster_without_gpu_workers_and_bad_options(mini, tmp_path):
    _, df, workloads = mini
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        with pytest.raises(ValueError, match="resource GPU"):
            collect(workloads[:1], tmp_path, scheduler=cluster, replay_dataset=df)
    with pytest.raises(ValueError, match="replay_dataset"):
        collect(workloads, tmp_path)
    with pytest.raises(ValueError, match="runner"):
        collect(workloads, tmp_path, runner="cpu", replay_dataset=df)
    with pytest.raises(ValueError, match="order must be one of"):
        collect(workloads, tmp_path, replay_dataset=df, order="shuffled")
    with pytest.raises(ValueError, match="local cluster"):
        collect(workloads, tmp_path, scheduler="tcp://127.0.0.1:1", gpus=[0],
                replay_dataset=df)
    assert Store(tmp_path).parts() == []


def test_cli_scheduler_reports_workers_without_a_gpu(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from costtune import cli
    from costtune.cli.console import console

    monkeypatch.setattr(console, "width", 10_000)  # the summary JSON on one line

    problems = tmp_path / "problems.json"
    problems.write_text(json.dumps([{"rows": 64, "cols": 128}, {"rows": 32, "cols": 256}]))
    # A worker thread in this CPU-only process: no GPU, and torch is already imported.
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None,
                      resources={"GPU": 1}) as cluster:
        res = CliRunner().invoke(cli.app, [
            "collect", "softmax", "--suite", str(problems), "--dtype", "float16",
            "--max-configs", "2", "--out", str(tmp_path / "store"),
            "--scheduler", cluster.scheduler_address])
    # Every workload failed: the summary JSON still comes (on stdout), then the errors and a
    # non-zero exit, so a script or shell loop sees the collection did not happen.
    assert res.exit_code == 2, res.output
    (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    summary = json.loads(line)
    assert summary["workloads"] == 0 and len(summary["failed_workloads"]) == 2
    assert all("no CUDA GPU visible" in e for e in summary["errors"])
    errors = res.stderr.strip().splitlines()
    assert sum("no CUDA GPU visible" in e for e in errors) == 2, errors
    assert errors[-1] == ("error: 2 of 2 workloads failed and were not stored (see the errors "
                          "above); rerun to resume them")
    assert Store(tmp_path / "store").parts() == []


def test_time_budget_stops_submitting_new_workloads(client, mini, tmp_path):
    _, df, workloads = mini
    summary = collect(workloads, tmp_path, scheduler=ready(client), replay_dataset=df,
                      replay_delay_s=0.5, time_budget_s=0.1)
    assert summary["stopped_early"] and 2 <= summary["workloads"] < 6
    rest = collect(workloads, tmp_path, scheduler=client, replay_dataset=df)
    assert rest["workloads"] == 6 - summary["workloads"]


def _experiment(module: str):
    """A module of the experiments package (its report and probe steps run on CPU)."""
    import importlib
    import sys

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module(f"experiments.{module}")


def test_dask_scaling_solves_each_runs_own_noise():
    """The three-cornered hat: from pairwise differences alone it finds which run is noisy."""
    import numpy as np

    script = _experiment("dask_scaling.analysis")
    rng = np.random.default_rng(0)
    n = 20_000
    truth = np.exp(rng.uniform(-5, 0, n))
    sd = {"1gpu": 0.004, "2gpu": 0.012, "1gpu_b": 0.006}
    runs = {k: pd.DataFrame({"workload": "w", "config": np.arange(n).astype(str), "status": "ok",
                             "time_ms": truth * np.exp(rng.normal(0, s, n))})
            for k, s in sd.items()}
    runs["2gpu"].loc[:9, "status"] = "compile_error"  # failed rows are left out of the pairs
    pairs, own = script.own_noise(runs)
    assert len(pairs) == 3 and set(own) == set(sd)
    assert pairs["configs"].tolist() == [n - 10, n, n - 10]
    for k, s in sd.items():
        assert own[k] == pytest.approx(s, rel=0.1), (k, own)
    assert script.own_noise({k: runs[k] for k in ("1gpu", "2gpu")})[1] == {}  # two: unsolvable


def test_dask_scaling_cpu_probe_rates_every_level_against_one_process(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))  # spawned processes import experiments.*
    probe = _experiment("dask_scaling.probe").cpu_probe([1, 2], seconds=0.3)
    assert probe["processes"].tolist() == [1, 2, 1]  # the first level again at the end
    assert probe["repeat"].tolist() == [False, False, True]
    assert probe["per_process_vs_first"].iloc[[0, 2]].mean() == pytest.approx(1.0)
    assert (probe["per_process"] > 0).all() and (probe["slowest"] <= probe["per_process"]).all()
    second = probe.iloc[1]
    assert second["total_vs_first"] == pytest.approx(2 * second["per_process_vs_first"])
    lines = _experiment("dask_scaling.text").host_lines(
        {"1 GPU": {"wall_s": 10.0, "busy_cpus": 9.2, "niced_cpus": 8.1, "steal_share": 0.031},
         "2 GPUs": {}}, probe)
    text = re.sub(" +", " ", "\n".join(lines))  # markdown tables pad their cells
    assert "| 1 GPU | 10.0 | 9.2 | 8.1 | 3.1% |" in text and "| 2 GPUs |" not in text
    assert "| 2 | " in text and "| 1 (again) | " in text
