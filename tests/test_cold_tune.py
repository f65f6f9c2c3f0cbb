"""The cold-tuning experiment's harness (issue 20) on CPU: the child tunes a user-written
kernel under the interpreter by every method kind and reports phases that add up; the report
turns raw records into speedups and same-process quality ratios; bad method names fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.cold_tune import report
from experiments.cold_tune.cases import CASES, matmul_configs, parse_method

ROOT = Path(__file__).resolve().parents[1]


def test_the_gemm_list_is_the_328_configs_that_fit():
    configs = matmul_configs()
    assert len(configs) == 328 and len({str(c) for c in configs}) == 328
    assert all(c.num_stages * (c.kwargs["BLOCK_SIZE_M"] + c.kwargs["BLOCK_SIZE_N"])
               * c.kwargs["BLOCK_SIZE_K"] * 2 <= 232_448 for c in configs)


def test_method_names():
    assert parse_method("exhaustive") == ("exhaustive", None, False, None)
    assert parse_method("hook:4") == ("hook", 4, False, None)
    assert parse_method("costtune.autotune:8+cache") == ("costtune.autotune", 8, True, None)
    assert parse_method("hook:8@threads") == ("hook", 8, False, "threads")
    assert parse_method("costtune.autotune:8+cache@processes")[2:] == (True, "processes")
    for bad in ("hook", "costtune:8", "hook:x", "hook:8@fork", "exhaustive@threads"):
        with pytest.raises(ValueError, match="unknown method"):
            parse_method(bad)


@pytest.mark.parametrize("method", ["exhaustive", "hook:2", "costtune.autotune:2"])
def test_child_tunes_a_user_kernel_and_times_its_phases(method, tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path / "t"),
           "COSTTUNE_HOME": str(tmp_path / "h"), "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "experiments.cold_tune.child", "--case",
                          "tutorial03_matmul", "--method", method, "--cpu"], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.splitlines()[-1].removeprefix("RESULT "))
    assert out["correct"] and out["rel_err"] < 2e-3
    n = out["n_configs"]
    assert out["n_benchmarked"] == (n if method == "exhaustive" else out["kept"]) >= 1
    phases = [out[p] for p in report.PHASES]
    assert all(p >= 0 for p in phases)
    assert sum(phases) == pytest.approx(out["first_call_s"], rel=0.05, abs=0.02)
    assert len(out["timings"]) == out["n_benchmarked"] and out["chosen"] in out["timings"]
    assert min(out["timings"].values()) == out["timings"][out["chosen"]]
    if method == "exhaustive":
        assert out["model_s"] == out["rank_s"] == 0 and out["kept"] is None
    else:
        assert out["family_read"] == "gemm" and out["kept"] < n


def _record(case, i, method, first, chosen, env):
    return {"case": case, "shape_index": i, "method": method, "status": "ok",
            "first_call_s": first, "chosen": chosen, "model_s": 0.1, "rank_s": 0.05,
            "compile_s": 0.5, "bench_s": 0.2, "launch_s": 0.01, "n_configs": 328,
            "kept": None if method == "exhaustive" else 8, "n_benchmarked": 8, "compiles": 8,
            "correct": True, "import_s": 2.0, "preload_s": 0.0, "process_s": first + 5,
            "env": env}


def test_report_ratios_come_from_the_same_process_retiming(tmp_path):
    env = {"commit": "abc1234", "date": "2026-12-02 03:00 UTC", "gpu": "G", "torch": "t",
           "triton": "3.6.0", "cpus": 16}
    runs = [_record("tutorial03_matmul", 0, "exhaustive", 180.0, "A", env),
            _record("tutorial03_matmul", 0, "costtune.autotune:8", 3.6, "B", env),
            _record("tutorial03_matmul", 0, "hook:8", 6.0, "A", env)]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    (tmp_path / "retimes.jsonl").write_text(json.dumps({
        "case": "tutorial03_matmul", "shape_index": 0, "status": "ok",
        "ms": {"A": 0.30, "B": 0.31, "torch": 0.29}}) + "\n")
    df = report.table(tmp_path).set_index("method")
    assert df.loc["costtune.autotune:8", "speedup_vs_exhaustive"] == pytest.approx(50.0)
    assert df.loc["costtune.autotune:8", "quality_vs_exhaustive"] == pytest.approx(0.30 / 0.31)
    assert df.loc["hook:8", "quality_vs_exhaustive"] == pytest.approx(1.0)
    assert df.loc["exhaustive", "shape"] == "2048x11008x4096"
    text = "\n".join(report.goal_lines(df.reset_index()))
    k8 = next(line for line in text.splitlines() if "`costtune.autotune:8`" in line)
    hook = next(line for line in text.splitlines() if "`hook:8`" in line)
    # 50x, but 0.968 of exhaustive's kernel speed; the hook's 30x at the same pick.
    assert "on every GEMM shape: **NOT met** (0 of 1 shapes; " in k8
    assert "2048x11008x4096: 50.0x at 0.968)" in k8
    assert "on every GEMM shape: **met** (1 of 1 shapes; 2048x11008x4096: 30.0x at 1.000)" in hook
    # A ratio against another call's exhaustive is shown but never meets a goal.
    runs[1]["env"] = {**env, "commit": "def5678"}
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    df = report.table(tmp_path).set_index("method")
    assert not df.loc["costtune.autotune:8", "same_call"] and df.loc["hook:8", "same_call"]
    text = "\n".join(report.goal_lines(df.reset_index()))
    assert "`costtune.autotune:8`: >= 45x at >= 0.99 of exhaustive's kernel speed" in text
    assert "**NOT met** (0 of 1 shapes; " in text
    assert "50.0x at 0.968 (exhaustive of another call: does not count)" in text
    path = report.write(df.reset_index(), tmp_path, tmp_path / "out")
    assert "abc1234" in path.read_text() and (tmp_path / "out" / "cold_tune.csv").exists()
    assert set(CASES) >= {"tutorial03_matmul"}


def test_report_compares_a_run_with_the_exhaustive_of_its_own_call(tmp_path):
    """Two calls each time exhaustive: every run is compared with the one beside it, not with
    the latest; quality comes from the latest re-timing that holds both picks."""
    one = {"commit": "abc1234", "call": "abc1234-step1", "date": "d1"}
    two = {"commit": "abc1234", "call": "abc1234-step2", "date": "d2"}
    m = "tutorial03_matmul"
    runs = [_record(m, 0, "exhaustive", 200.0, "A", one),
            _record(m, 0, "hook:8", 2.0, "B", one),
            _record(m, 0, "exhaustive", 150.0, "C", two),
            _record(m, 0, "costtune.autotune:8", 1.5, "B", two)]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    retimes = [{"ms": {"A": 0.30, "B": 0.30}}, {"ms": {"B": 0.30, "C": 0.29}},
               {"ms": {"C": 0.5}}]  # the latest holds only C: not used for B
    (tmp_path / "retimes.jsonl").write_text("".join(json.dumps(
        {"case": m, "shape_index": 0, "status": "ok", **r}) + "\n" for r in retimes))
    df = report.table(tmp_path).set_index("method")
    assert df.loc["hook:8", "speedup_vs_exhaustive"] == pytest.approx(100.0)
    assert df.loc["hook:8", "exhaustive_s"] == 200.0  # its own call's, not the latest
    assert df.loc["hook:8", "quality_vs_exhaustive"] == pytest.approx(1.0)
    assert df.loc["costtune.autotune:8", "speedup_vs_exhaustive"] == pytest.approx(100.0)
    assert df.loc["costtune.autotune:8", "quality_vs_exhaustive"] == pytest.approx(0.29 / 0.30)
    assert df["same_call"].all()
    assert df.loc["exhaustive", "first_call_s"] == 150.0  # the shape's latest is shown


def test_committed_h200_records_rebuild_the_report(tmp_path):
    """The report step on the committed raw records (H200, 2026-12-02, tenth to twelfth
    sessions): the latest costtune.autotune:8 run of each GEMM shape against the exhaustive of
    its own device call; every shape has such a pair (twelfth session), re-timed side by side;
    a ratio against another call's exhaustive is named as such in the goal line."""
    df = report.table(report.RAW)
    gemm = df[df["family"] == "gemm"]
    assert set(gemm["shape"]) == {"2048x11008x4096", "4096x4096x4096", "512x8192x8192"}
    k8 = gemm[gemm["method"] == "costtune.autotune:8"].set_index("shape")
    assert len(k8) == 3
    assert k8["same_call"].all() and k8["quality_vs_exhaustive"].notna().all()
    assert df["correct"].all()
    ex = gemm[gemm["method"] == "exhaustive"]
    assert (ex["n_benchmarked"] == 328).all() and (ex["first_call_s"] > 150).all()
    text = report.write(df, report.RAW, tmp_path).read_text()
    goal = next(line for line in text.splitlines() if line.startswith("- `costtune.autotune:8`"))
    for shape, row in k8.iterrows():
        assert f"{shape}: " in goal
        assert ("exhaustive of another call" in goal.split(f"{shape}: ")[1].split(";")[0]) \
            == (not row["same_call"])
    assert "cache hit" in text


