"""ReplayRunner: exact stored figures back, NOT_MEASURED for the rest, never an invented time."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from costtune.kernels import PROBLEM_KEYS as FAMILY_KEYS
from costtune.measure.replay import ReplayRunner
from costtune.store.dataset import Store
from costtune.types import Config, Measurement, Status, Workload

REPO = Path(__file__).resolve().parents[1]
GEMM = Workload("gemm", {"M": 512, "N": 256, "K": 128}, "float16")
SOFTMAX = Workload("softmax", {"rows": 1024, "cols": 3000}, "float32")
ATTENTION = Workload("attention", {"B": 1, "H": 4, "S": 256, "D": 64, "causal": True},
                     "bfloat16")


def gemm_config(bm: int, warps: int = 4) -> Config:
    return Config({"BLOCK_M": bm, "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT_K": 1},
                  num_warps=warps, num_stages=3)


def measurements() -> list[Measurement]:
    extra = {"suite": "train", "run_id": "run-7", "ref_time_ms": 0.05, "n_reps": 100}
    return [
        Measurement(GEMM, gemm_config(32), Status.OK, 0.31, 0.30, 0.33, 1e-3, 0.8, extra=extra),
        Measurement(GEMM, gemm_config(64), Status.OK, 0.12, 0.11, 0.125, 2e-3, 0.9,
                    extra=extra),
        # Fastest of all, but wrong: must never be the best.
        Measurement(GEMM, gemm_config(128), Status.WRONG_RESULT, 0.01, 0.01, 0.01, 0.5, 1.0,
                    error="rel_err 0.5 > 0.01", extra=extra),
        Measurement(GEMM, gemm_config(256, 8), Status.COMPILE_ERROR, compile_s=2.5,
                    error="CompilationError: at 12:4", extra=extra),
        Measurement(SOFTMAX, Config({"ROWS_PER_PROG": 4}, num_warps=8, num_stages=1),
                    Status.OK, 0.02),
        Measurement(SOFTMAX, Config({"ROWS_PER_PROG": 1}, num_warps=8, num_stages=1),
                    Status.TIMEOUT, error="timed out after 10 s"),
        Measurement(ATTENTION, Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4,
                                      num_stages=2), Status.OK, 0.2),
    ]


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    store = Store(tmp_path)
    for kernel in ("gemm", "softmax", "attention"):
        store.append([m.as_row() for m in measurements() if m.workload.kernel == kernel],
                     meta={"gpu": "test"})
    return tmp_path


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def assert_same_measurement(got: Measurement, want: Measurement) -> None:
    assert got.workload == want.workload and got.config == want.config
    assert got.status is want.status and got.error == want.error
    for f in ("time_ms", "time_p20_ms", "time_p80_ms", "rel_err", "compile_s"):
        assert same(getattr(got, f), getattr(want, f)), f
    assert got.extra == want.extra


def test_measure_returns_exactly_the_stored_figures(store_root):
    runner = ReplayRunner(store_root)  # mixed families: int columns come back nullable Int64
    for want in measurements():
        (got,) = runner.measure(want.workload, [want.config])
        assert_same_measurement(got, want)
        assert got.config.key == want.config.key  # no "64.0" from widened columns
    assert runner.n_measured == len(measurements()) and runner.n_calls == len(measurements())


def test_unknown_configs_and_workloads_are_not_measured(store_root):
    runner = ReplayRunner(store_root)
    unknown = gemm_config(16)
    got = runner.measure(GEMM, [unknown, gemm_config(64), unknown])
    assert [m.status for m in got] == [Status.NOT_MEASURED, Status.OK, Status.NOT_MEASURED]
    assert math.isnan(got[0].time_ms) and got[0].config == unknown
    other = Workload("gemm", {"M": 512, "N": 256, "K": 128}, "bfloat16")
    assert runner.measure(other, [gemm_config(64)])[0].status is Status.NOT_MEASURED
    assert runner.n_measured == 4 and runner.n_calls == 2
    with pytest.raises(ValueError, match="not in the replay dataset"):
        runner.configs(other)


def test_workloads_configs_and_best(store_root):
    runner = ReplayRunner(pd.read_parquet(Store(store_root).parts("gemm")[0]))
    assert runner.workloads() == [GEMM]
    assert runner.configs(GEMM) == [m.config for m in measurements()[:4]]
    best = runner.best(GEMM)
    assert best.config == gemm_config(64) and best.time_ms == 0.12
    assert runner.n_measured == 0  # best() is an oracle, not a measurement

    mixed = ReplayRunner(store_root)
    assert mixed.workloads() == [ATTENTION, GEMM, SOFTMAX]
    assert mixed.workloads("softmax") == [SOFTMAX]
    assert mixed.workloads("attention")[0].sizes["causal"] is True
    assert [c.key for c in mixed.configs(SOFTMAX)] == [
        "ROWS_PER_PROG=4,num_warps=8,num_stages=1", "ROWS_PER_PROG=1,num_warps=8,num_stages=1"]
    assert mixed.best(ATTENTION).time_ms == 0.2


def test_best_needs_an_ok_row():
    w = Workload("softmax", {"rows": 8, "cols": 8}, "float16")
    failed = Measurement(w, Config({"ROWS_PER_PROG": 1}), Status.OUT_OF_RESOURCES, error="smem")
    with pytest.raises(ValueError, match="no OK measurement"):
        ReplayRunner(pd.DataFrame([failed.as_row()])).best(w)


def test_replayed_measurement_rebuilds_the_stored_row(store_root):
    df = Store(store_root).load("gemm")
    runner = ReplayRunner(df)
    for want in df.to_dict("records"):
        config = runner.configs(GEMM)[[c.key for c in runner.configs(GEMM)]
                                      .index(want["config"])]
        got = runner.measure(GEMM, [config])[0].as_row()
        assert list(got) == list(want)
        assert all(same(got[k], want[k]) if isinstance(got[k], float) else got[k] == want[k]
                   for k in want)


def test_rejects_inconsistent_datasets():
    row = measurements()[0].as_row()
    with pytest.raises(ValueError, match="repeats"):
        ReplayRunner(pd.DataFrame([row, row]))
    with pytest.raises(ValueError, match="time_ms"):
        ReplayRunner(pd.DataFrame([row]).drop(columns=["time_ms"]))
    runner = ReplayRunner(pd.DataFrame([{**row, "BLOCK_M": 48}]))
    with pytest.raises(ValueError, match="config key"):
        runner.configs(GEMM)


def test_family_keys_match_the_family_modules():
    """Each family module's PROBLEM_KEYS is costtune.kernels.base's (family facts defined
    once); read from source, not imported (importing a family pulls in triton)."""
    for name in FAMILY_KEYS:
        path = REPO / "costtune" / "kernels" / f"{name}.py"
        if not path.exists():
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(getattr(t, "id", None) == "PROBLEM_KEYS" for t in targets):
                    # Read from the one definition in costtune.kernels.base, not restated.
                    assert ast.unparse(node.value) == "FAMILY_PROBLEM_KEYS[NAME]", name


def test_store_and_replay_import_neither_torch_nor_triton():
    code = ("import sys, costtune.store.dataset, costtune.measure.replay, costtune.env; "
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_one_workload_from_two_gpu_models_replays_one_of_them(tmp_path):
    # A store collected on two GPU models holds each workload twice: replay must say so and
    # replay the model asked for, not refuse the whole store.
    store = Store(tmp_path)
    rows = [m.as_row() for m in measurements() if m.workload.kernel == "gemm"]
    store.append(rows, meta={"gpu": "NVIDIA H200"})
    store.append([{**r, "time_ms": r["time_ms"] * 2} for r in rows], meta={"gpu": "NVIDIA H100"})
    from costtune.store.dataset import load_dataset

    assert set(load_dataset(tmp_path)["gpu"]) == {"NVIDIA H100", "NVIDIA H200"}  # which is which
    assert "gpu" not in load_dataset(tmp_path, gpu="NVIDIA H100").columns  # one model: as before
    with pytest.raises(ValueError, match=r"2 GPU models .*gpu="):
        ReplayRunner(tmp_path)
    h100 = ReplayRunner(tmp_path, gpu="NVIDIA H100")
    h200 = ReplayRunner(tmp_path, gpu="NVIDIA H200")
    assert h100.best(GEMM).time_ms == 0.24 and h200.best(GEMM).time_ms == 0.12
    with pytest.raises(ValueError, match=r"no rows for GPU 'A100'.*NVIDIA H100"):
        ReplayRunner(tmp_path, gpu="A100")
    with pytest.raises(ValueError, match="no gpu column"):
        ReplayRunner(pd.DataFrame([measurements()[0].as_row()]), gpu="NVIDIA H200")
    # A store of one GPU model names it in its parts' metadata only: said, not "no column".
    one = tmp_path / "one"
    Store(one).append(rows, meta={"gpu": "NVIDIA H200"})
    with pytest.raises(ValueError, match=r"no rows for GPU 'H200'; it has \['NVIDIA H200'\]"):
        ReplayRunner(one, gpu="H200")
    assert ReplayRunner(one, gpu="NVIDIA H200").best(GEMM).time_ms == 0.12
    # Parts naming the GPU in a column and parts naming it in metadata, loaded together.
    mixed = tmp_path / "mixed"
    Store(mixed).append([{**r, "gpu": "NVIDIA H100"} for r in rows], meta={"gpu": "x"})
    Store(mixed).append(rows, meta={"gpu": "NVIDIA H200"})
    assert set(load_dataset(mixed)["gpu"]) == {"NVIDIA H100", "NVIDIA H200"}
    assert ReplayRunner(load_dataset(mixed), gpu="NVIDIA H200").best(GEMM).time_ms == 0.12
