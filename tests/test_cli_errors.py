"""Every command with bad input: a non-zero exit, one line naming what is wrong, no traceback;
arguments are checked before dataset or GPU work; nothing is written where it was not asked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from costtune.cli import app
from costtune.store.dataset import Store

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO / "datasets" / "h200"
GPU_MESSAGE = ("CPU-only build", "no CUDA GPU is visible", "CUDA does not start",
               "CUDA_VISIBLE_DEVICES")


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli")
    empty = root / "empty"
    empty.mkdir()
    corrupt = root / "corrupt"
    (corrupt / "softmax").mkdir(parents=True)
    part = Store(DATASET).parts("softmax")[0]
    shutil.copy(part, corrupt / "softmax" / part.name)
    torn = corrupt / "softmax" / "part-29990101T000000.000000Z-deadbeef.parquet"
    torn.write_bytes(part.read_bytes()[:200])
    harvested = root / "harvested"  # what costtune.harvest writes for a user's own kernel
    Store(harvested).append([{"kernel": "my_matmul", "workload": "my_matmul_M64_float16",
                              "dtype": "float16", "M": 64, "BLOCK": b, "num_warps": 4,
                              "num_stages": 2, "config": f"BLOCK={b},num_warps=4,num_stages=2",
                              "status": "ok", "time_ms": 0.01 * b} for b in (16, 32)],
                            meta={"gpu": "NVIDIA H200"})
    failed, two_gpus = root / "failed", root / "two_gpus"
    for folder, gpus, status in ((failed, ["NVIDIA H200"], "out_of_resources"),
                                 (two_gpus, ["NVIDIA H200", "NVIDIA H100"], "ok")):
        for i, gpu in enumerate(gpus):
            Store(folder).append(gemm_rows(status, scale=i + 1), meta={"gpu": gpu})
    no_booster = root / "lonely"
    shutil.copy(REPO / "costtune" / "models" / "h200.json", root / "lonely.json")
    a_file = root / "a_file"
    a_file.write_text("not a folder")
    return {"empty": empty, "corrupt": corrupt, "harvested": harvested, "torn": torn,
            "missing": root / "missing", "lonely": no_booster, "file": a_file,
            "out": root / "out", "part": corrupt / "softmax" / part.name, "failed": failed,
            "two_gpus": two_gpus}


def gemm_rows(status: str, scale: int = 1) -> list[dict]:
    """Rows of gemm at 64 x 64 x 64 for two configs, all with ``status``."""
    rows = []
    for bm in (32, 64):
        cfg = {"BLOCK_M": bm, "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 1, "num_warps": 4,
               "num_stages": 2}
        rows.append({"kernel": "gemm", "workload": "gemm_M64_N64_K64_float16", "dtype":
                     "float16", "M": 64, "N": 64, "K": 64, **cfg, "suite": "train",
                     "config": ",".join(f"{k}={v}" for k, v in cfg.items()), "status": status,
                     "time_ms": 0.001 * bm * scale if status == "ok" else float("nan")})
    return rows


def cases(p: dict[str, Path]) -> list[tuple[list[str], str]]:
    """(arguments, what the one line must say) for every command."""
    e, c, h, m = (str(p[k]) for k in ("empty", "corrupt", "harvested", "missing"))
    out, shape = str(p["out"]), ["--shape", "64,64,64"]
    replay = ["--replay", str(DATASET)]
    return [
        (["nosuch"], "No such command"),
        (["kernels", "--bogus"], "No such option: --bogus"),
        (["kernels", "--seed", "x"], "Invalid value for '--seed'"),
        # collect: arguments first, then the GPU
        (["collect", "softmax"], "Missing option '--out'"),
        (["collect", "conv", "--out", out], "unknown kernel family 'conv'"),
        (["collect", "softmax", "--suite", "nosuch", "--out", out], "neither"),
        (["collect", "softmax", "--dtype", "int8", "--out", out], "not supported by softmax"),
        (["collect", "softmax", "--gpus", "a,b", "--out", out], "--gpus must be"),
        (["collect", "softmax", "--max-configs", "0", "--out", out], "--max-configs"),
        (["collect", "softmax", "--out", str(p["file"])], "is a file"),
        (["collect", "softmax", "--suite", str(p["file"]), "--out", out], "a_file: not JSON"),
        # features
        (["features", "--dataset", e, "--out", out], f"--dataset {e} holds no rows"),
        (["features", "--dataset", m, "--out", out], f"--dataset {m} does not exist"),
        (["features", "--dataset", c, "--out", out], str(p["torn"])),
        (["features", "--kernel", "conv", "--dataset", c], "unknown kernel family 'conv'"),
        (["features", "--arch", "12", "--dataset", c], "--arch 12"),
        (["features", "--dataset", str(DATASET)], "inside the shipped dataset"),
        (["features", "--dataset", c, "--out", str(p["empty"])], "is a folder"),
        (["features", "--dataset", c, "--out", str(p["part"])], "is a part of a measurement"),
        # train
        (["train", "--dataset", e], f"--dataset {e} holds no rows"),
        (["train", "--dataset", m], f"--dataset {m} does not exist"),
        (["train", "--dataset", c, "--out", out], str(p["torn"])),
        (["train", "--dataset", h, "--out", out], "no 'suite' column (a harvested store?)"),
        (["train", "--dataset", h, "--suite", "all", "--out", out],
         "no rows of costtune's kernel families"),
        (["train", "--suite", "x", "--dataset", c], "--suite must be"),
        (["train", "--objective", "x", "--dataset", c], "--objective 'x'"),
        (["train", "--features", "x", "--dataset", c], "--features 'x'"),
        (["train", "--name", "h200", "--dataset", c], "a shipped model's name"),
        (["train", "--name", "a/b", "--dataset", c], "must be a bare name"),
        (["train", "--dataset", c, "--out", str(p["empty"])], "is a folder; give the model"),
        (["train", "--dataset", str(DATASET), "--out", str(p["lonely"])], "pass --force to"),
        # demo: every input before any output
        (["demo", "--dataset", h], "has no 'suite' column"),
        (["demo", "--model", "/no/such.json", "--dataset", str(DATASET)],
         "--model /no/such.json: no model file"),
        # eval: the model before the dataset
        (["eval", "--model", "nosuch", "--dataset", c], "no shipped model named 'nosuch'"),
        (["eval", "--model", str(p["lonely"]), "--dataset", str(DATASET)],
         "its booster lonely.ubj is missing"),
        (["eval", "--dataset", e], f"--dataset {e} holds no rows"),
        (["eval", "--dataset", m], f"--dataset {m} does not exist"),
        (["eval", "--dataset", c], str(p["torn"])),
        (["eval", "--dataset", c, "--plot", str(p["out"]) + ".txt"], "write a .png"),
        (["demo", "--shape", "99999999999999999999,1,1"], "below 2^31"),
        (["demo", "--top-k", "-1"], "Invalid value for '--top-k'"),
        (["explain", "--top-k", "-3", "nosuch.py"], "Invalid value for '--top-k'"),
        (["eval", "--dataset", h], "no 'suite' column"),
        (["eval", "--plot", e, "--dataset", c], "is a folder"),
        # study: storage and model before the replay dataset
        (["study", "conv", "--shape", "1,2,3"], "unknown kernel 'conv'"),
        (["study", "gemm", "--shape", "64,64"], "needs 3 comma-separated sizes"),
        (["study", "gemm", *shape, "--n-trials", "0"], "--n-trials must be >= 1"),
        (["study", "gemm", *shape, "--storage", "/no/such/dir/s.db", "--replay", c],
         "folder /no/such/dir does not exist"),
        (["study", "gemm", *shape, "--warm-start", "nosuch", "--replay", c],
         "--warm-start nosuch"),
        (["study", "gemm", *shape, "--replay", e], f"--replay {e} holds no gemm rows"),
        (["study", "softmax", "--shape", "4096,1000", "--replay", c], str(p["torn"])),
        (["study", "gemm", "--shape", "64,64,5", *replay], "gemm_M64_N64_K5_float16 is not in"),
        (["study", "gemm", *shape, "--storage", "nosuchdb://x", "--replay", c],
         "--storage nosuchdb://x: cannot open it"),
        (["study", "gemm", *shape, *replay, "--dtype", "int8"], "takes dtype"),
        (["study", "gemm", *shape, "--gpu", "NVIDIA H200"], "--gpu chooses a GPU model's"),
        (["study", "gemm", *shape, "--replay", str(p["failed"])],
         "gemm_M64_N64_K64_float16 has no OK measurement"),
        (["study", "gemm", *shape, "--replay", str(p["two_gpus"])],
         "from 2 GPU models ['NVIDIA H100', 'NVIDIA H200']: pass gpu= (the CLI's --gpu)"),
        (["study", "gemm", *shape, "--replay", str(p["two_gpus"]), "--gpu", "A100"],
         "no rows for GPU 'A100'"),
    ]


def one_line_error(res) -> str:
    assert res.exit_code not in (0, None), res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def test_every_command_rejects_bad_input_in_one_line(places, monkeypatch, tmp_path):
    monkeypatch.setenv("COSTTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # nothing may appear in the working directory
    runner = CliRunner()
    seen = set()
    for args, message in cases(places):
        line = one_line_error(runner.invoke(app, args))
        assert message in line, (args, line)
        seen.add(args[0])
    assert seen >= {"kernels", "collect", "features", "train", "eval", "study"}
    assert not list(tmp_path.iterdir()) and not places["out"].exists()


def test_study_replays_the_gpu_model_asked_for(places):
    runner = CliRunner()
    for gpu, best in (("NVIDIA H200", 0.032), ("NVIDIA H100", 0.064)):
        res = runner.invoke(app, ["study", "gemm", "--shape", "64,64,64", "--replay",
                                  str(places["two_gpus"]), "--gpu", gpu, "--n-trials", "2",
                                  "--sampler", "random", "--seed", "0", "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.output.strip().splitlines()[-1])
        assert out["exhaustive_best_time_ms"] == best, out


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_gpu_commands_on_a_cpu_say_precisely_why(places):
    runner = CliRunner()
    for args in (["collect", "softmax", "--out", str(places["out"])],
                 ["study", "gemm", "--shape", "64,64,64"]):
        line = one_line_error(runner.invoke(app, args))
        assert any(m in line for m in GPU_MESSAGE), line
        assert "--replay" in line or "--scheduler" in line, line
    assert not places["out"].exists()


def test_the_installed_entry_point_prints_one_line(places):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for args, message in ((["eval", "--model", "nosuch"], "no shipped model named 'nosuch'"),
                          (["train", "--dataset", str(places["empty"])], "holds no rows")):
        res = subprocess.run([sys.executable, "-m", "costtune.cli", *args], env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 2 and res.stdout == "", res
        assert res.stderr.count("\n") == 1 and message in res.stderr, res.stderr
        assert res.stderr.startswith("error: ")


def test_ctrl_c_says_so_in_one_line_and_exits_130(monkeypatch):
    import costtune.cli.eval as command

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "scored_rows", interrupted)  # Ctrl-C while scoring
    res = CliRunner().invoke(app, ["eval", "--dataset", str(DATASET)])
    assert res.exit_code == 130, res.output
    assert res.output.strip().splitlines() == ["error: interrupted (Ctrl-C)"], res.output


@pytest.fixture(scope="module")
def small_store(tmp_path_factory) -> Path:
    """Two families' train and test workloads of the H200 dataset (a few parts)."""
    root = tmp_path_factory.mktemp("small")
    src = Store(DATASET)
    for kernel in ("softmax", "gemm"):
        parts = src.parts(kernel)
        suites = {p: src.part_meta(p).get("command", "") for p in parts}
        df = pd.concat([pd.read_parquet(p, columns=["suite"]).head(1).assign(p=str(p))
                        for p in parts])
        picked = (df[df["suite"] == "train"]["p"].head(3).tolist()
                  + df[df["suite"] == "test"]["p"].head(2).tolist())
        assert suites and len(picked) == 5
        (root / kernel).mkdir()
        for p in picked:
            shutil.copy(p, root / kernel / Path(p).name)
    return root


def test_train_writes_to_the_user_folder_and_eval_scores_the_models_family(
        small_store, tmp_path, monkeypatch):
    monkeypatch.setenv("COSTTUNE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    shipped = sorted((REPO / "costtune" / "models").iterdir())
    stamps = [p.stat().st_mtime_ns for p in shipped]
    runner = CliRunner()
    res = runner.invoke(app, ["train", "--dataset", str(small_store), "--name", "mine"])
    assert res.exit_code == 0, res.output
    saved = tmp_path / "home" / "models" / "mine.json"
    assert saved.exists() and str(saved) in res.output
    assert [p.stat().st_mtime_ns for p in shipped] == stamps  # the package is untouched

    from costtune.model.xgb import CostModel

    gemm_only = CostModel(family="gemm", n_estimators=20).fit(
        Store(small_store).load("gemm").query("suite == 'train'"))
    gemm_only.save(tmp_path / "gemm_only")
    res = runner.invoke(app, ["eval", "--dataset", str(small_store), "--model",
                              str(tmp_path / "gemm_only"), "--json"])
    assert res.exit_code == 0, res.output
    board = json.loads(res.stdout[res.stdout.index("{"):])
    assert list(board) == ["gemm"] and "costtune" in board["gemm"]
    assert "note: model" in res.output and "leaving out softmax" in res.output
    res = runner.invoke(app, ["eval", "--dataset", str(small_store), "--model", "mine",
                              "--plot", str(tmp_path / "plots" / "topk.png")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "plots" / "topk.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gemm_only.forest.npz",
                                                         "gemm_only.json", "gemm_only.ubj",
                                                         "home", "plots"]


def test_an_unwritable_output_is_refused_before_any_work(places, monkeypatch, tmp_path):
    """--out / --plot where nothing can be written: one line naming the option, before the
    fit (it failed after it with xgboost's message). Root may write anywhere, so the write
    check is made to fail as it fails for a user without the permission."""
    import tempfile

    monkeypatch.setenv("COSTTUNE_HOME", str(tmp_path / "home"))

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", denied)
    for args in (["train", "--dataset", str(places["corrupt"]), "--out",
                  str(tmp_path / "ro" / "m")],
                 ["eval", "--dataset", str(places["corrupt"]), "--plot",
                  str(tmp_path / "board.png")]):
        line = one_line_error(CliRunner().invoke(app, args))
        assert "cannot write in" in line and "Permission denied" in line
        assert args[-2] in line
    # No --out: the folder it would write is the user's, not an option they gave.
    line = one_line_error(CliRunner().invoke(app, ["train", "--dataset", str(places["corrupt"])]))
    assert line.startswith("error: the user folder (COSTTUNE_HOME): ") and "--out" not in line


def test_kernels_check_passes_on_a_cpu(monkeypatch):
    """`costtune kernels --check` runs every implementation under the interpreter: each on
    the check shapes its space and inputs take (TMA kernels refuse K = 300, attention_tma
    S = 40), and each passes."""
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(app, ["kernels", "--check"])
    assert result.exit_code == 0, result.output[-2000:]
    from costtune.kernels import IMPLEMENTATIONS

    rows = [line for line in result.output.splitlines() if line.startswith("│ ")]
    for name in (n for names in IMPLEMENTATIONS.values() for n in names):
        row = next(r for r in rows if r.split("│")[1].strip() == name)
        assert row.split("│")[-2].strip() == "ok", row
