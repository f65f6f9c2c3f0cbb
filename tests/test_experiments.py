"""The experiments package: its size limits, the harness, and the GPU questions' report steps,
which must rebuild their figures on a CPU from the raw files committed under
experiments/results/raw/."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


@pytest.fixture(scope="module", autouse=True)
def importable():
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def _experiment(module: str):
    return importlib.import_module(f"experiments.{module}")


def test_experiment_modules_and_functions_stay_small():
    too_long = []
    for path in sorted(EXPERIMENTS.rglob("*.py")):
        source = path.read_text()
        name = path.relative_to(REPO)
        if len(source.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert too_long == []


def test_harness_writes_a_report_and_its_table(tmp_path):
    harness = _experiment("harness")
    table = pd.DataFrame({"k": [1, 2], "score": [0.91234, float("nan")]})
    md = harness.write_report("q", ["# Q", "", harness.provenance(), "",
                                    harness.md_table(table, floatfmt=".2f", missing="-")],
                              table, out=tmp_path)
    text = md.read_text()
    assert md == tmp_path / "q.md" and text.startswith("# Q\n") and text.endswith("|\n")
    assert "- Command: `python" in text and "torch " in text and "xgboost " in text
    flat = re.sub(" +", " ", text)  # markdown tables pad their cells
    assert "| 1 | 0.91 |" in flat and "| 2 | - |" in flat and "nan" not in text
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "q.csv"), table)
    assert (harness.command(["experiments/x.py", "--a", "b c"])
            == "python experiments/x.py --a 'b c'")


def test_prune_report_rebuilds_the_committed_csv(tmp_path):
    report = _experiment("prune_vs_exhaustive.report")
    assert report.main(["--out", str(tmp_path)]) == 0
    new = pd.read_csv(tmp_path / "prune_vs_exhaustive.csv")
    pd.testing.assert_frame_equal(new, pd.read_csv(EXPERIMENTS / "results" /
                                                   "prune_vs_exhaustive.csv"))
    text = (tmp_path / "prune_vs_exhaustive.md").read_text()
    assert "## Same runs under earlier code (`runs_session3.jsonl`)" in text
    assert (tmp_path / "prune_vs_exhaustive.png").stat().st_size > 0


def test_dask_report_recomputes_what_each_experiment_recorded(tmp_path):
    """Where an experiment kept its rows, the per-workload agreement recomputed from them
    equals the CSV its own report wrote at the time."""
    report = _experiment("dask_scaling.report")
    raw = EXPERIMENTS / "results" / "raw" / "dask_scaling"
    assert report.main(["--out", str(tmp_path)]) == 0
    new = pd.read_csv(tmp_path / "dask_scaling.csv")
    checked = 0
    for folder in sorted(raw.iterdir()):
        runs = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()]
        if not runs[0]["rows"] or not (folder / "report_as_written.csv").exists():
            continue
        mine = new[new["experiment"] == folder.name].drop(columns="experiment")
        pd.testing.assert_frame_equal(mine.reset_index(drop=True),
                                      pd.read_csv(folder / "report_as_written.csv"),
                                      check_exact=False, rtol=1e-9)
        checked += 1
    assert checked >= 6
    text = (tmp_path / "dask_scaling.md").read_text()
    assert "**Speed-up 1.91x**" in text and "**Speed-up 1.50x**" in text


def test_compile_scaling_report_keeps_the_recorded_figures(tmp_path):
    module = _experiment("compile_scaling")
    assert module.main(["report", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "compile_scaling.md").read_text().replace(" ", "")
    for row in ("|8|7.1|4.8|19.8|1.00x|96|", "|16|8.8|2.6|36.7|1.85x|96|",
                "|32|13.3|1.9|49.5|2.50x|96|"):
        assert row in text
    assert module.main(["plan", "--procs", "2,4"]) == 0
    with pytest.raises(SystemExit):
        module.main(["plan", "--procs", ""])


def test_dask_plan_orders_the_extra_runs():
    plan = _experiment("dask_scaling.plan")
    ap = argparse.ArgumentParser()
    plan.add_args(ap)
    args = plan.settle(ap.parse_args(["--gpus", "2", "--extra-runs", "1", "1s", "2",
                                      "--compile-workers", "8"]))
    runs = plan.runs(args)
    assert [r["label"] for r in runs] == ["1gpu", "2gpu", "1gpu_b", "1gpu_shuffled", "2gpu_b"]
    assert [r["cache_of"] for r in runs] == [None, None, "1gpu", "1gpu", "1gpu"]
    assert runs[3]["order"] == "given" and runs[3]["shuffle_seed"] == 2
    assert plan.fixed_compile_workers(args) == 8


def test_loio_replays_the_hooks_two_stages():
    """experiments.loio scores two_stage=True as the hook runs it: the best SHORTLIST by
    stage 1, ordered by the blend, then the rest in stage-1 order."""
    import numpy as np

    loio = _experiment("loio")
    keys = np.array([f"c{i}" for i in range(6)])
    s1 = np.array([6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    s2 = np.array([0.0, 1.0, 2.0, 9.0, 9.0, 9.0])
    assert loio.two_stage_order(s1, s2, keys, weight=1.0, shortlist=3).tolist() == list(range(6))
    # Stage 2 reorders only the shortlist: 3-5 score best there but stay behind it.
    assert loio.two_stage_order(s1, s2, keys, weight=0.0, shortlist=3).tolist() == [
        2, 1, 0, 3, 4, 5]
    assert loio.two_stage_name("static/family", "static+compiled/all", 0.5) == (
        "two-stage: static/family -> static+compiled/all, w=0.5")


def test_loio_as_kept_measures_untrained_configs_ranked_above_the_trusted_ones():
    """What the hook measures for a held-out kernel: a config whose tile the other
    implementations never had is kept on top of the k trusted ones (at most 4k), and the
    score is that of everything kept; a held-out run without such configs keeps k."""
    import numpy as np

    loio = _experiment("loio")

    def row(impl, suite, bm, t, wl="w"):
        return {"kernel": "gemm", "implementation": impl, "suite": suite, "workload": wl,
                "status": "ok", "time_ms": t, "dtype": "float16", "M": 1024, "N": 1024,
                "K": 1024, "BLOCK_M": bm, "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT_K": 1,
                "num_warps": 4, "num_stages": 3,
                "config": f"BLOCK_M={bm},BLOCK_N=64,BLOCK_K=32,SPLIT_K=1,num_warps=4,"
                          "num_stages=3"}

    # Held out: gemm_tutorial; its test run ranks a 256-row tile first.
    test = pd.DataFrame([row("gemm_tutorial", "test", 256, 2.0),
                         row("gemm_tutorial", "test", 64, 1.5),
                         row("gemm_tutorial", "test", 32, 1.0)])
    s1 = np.array([3.0, 2.0, 1.0])
    scores = {"static/family": s1, "static+compiled/all": s1}
    choice = pd.DataFrame([{"kernel": "gemm", "row": "static+compiled/all", "weight": 0.0}])

    def kept(tiles):
        others = pd.DataFrame([row("gemm", "train", bm, 1.0) for bm in tiles]
                              + [row("gemm_tutorial", "train", 256, 1.0)])
        return loio.as_kept(test, scores, {"gemm": "static/family"}, choice, others).iloc[0]

    # The other implementation never had 256: k=1 measures it and the best trusted one (64).
    got = kept((32, 64))
    assert got["tuned_configs1"] == 2 and got["tuned_top1"] == pytest.approx(1.0 / 1.5)
    assert got["tuned_configs4"] == 3 and got["tuned_top4"] == 1.0
    # Trained on 256 too (the held-out kernel's own train rows never count): k configs.
    got = kept((32, 64, 256))
    assert got["tuned_configs1"] == 1 and got["tuned_top1"] == pytest.approx(0.5)


def test_hook_user_spaces_report_rebuilds_the_committed_csv(tmp_path):
    """The H200 records of the user kernels' whole lists give back the committed per-shape
    scores; a kept config that cannot launch scores 0, and the report names what the plain
    hook replaced."""
    report = _experiment("hook_user_spaces")
    assert report.main(["--out", str(tmp_path)]) == 0
    new = pd.read_csv(tmp_path / "hook_user_spaces.csv")
    pd.testing.assert_frame_equal(new, pd.read_csv(EXPERIMENTS / "results" /
                                                   "hook_user_spaces.csv"))
    tma = new[new["style"] == "tutorial09_tma_matmul"]
    assert (tma["stage1 k=1"] == 0).all() and (tma["autotune:stage1 k=1"] > 0.9).all()
    assert "(does not fit in shared memory)" in (tmp_path / "hook_user_spaces.md").read_text()
    with pytest.raises(SystemExit, match="no methods_"):
        report.main(["--raw", str(tmp_path)])


def test_stage1_models_shipped_by_impl_descriptor_are_left_alone_by_model_selection():
    from costtune.tune.trained import ALL_IMPLEMENTATIONS
    from experiments import impl_descriptor, model_selection

    shipped = {f"{model_selection.NAME}_{f}" for f in impl_descriptor.SHIP_FAMILIES}
    assert set(model_selection.SHIPPED_ELSEWHERE) == shipped
    assert set(ALL_IMPLEMENTATIONS) == set(impl_descriptor.SHIP_FAMILIES)


def test_impl_descriptor_selection_reuses_the_records_it_is_given(monkeypatch, tmp_path, capsys):
    """--select --reuse: a variant whose records an earlier selection holds (every CV fold and
    held-out implementation) is taken from them and not refitted; a partial one is refitted."""
    import costtune.evaluate
    from experiments import impl_descriptor

    impls = ["softmax", "softmax_multirow", "softmax_onepass"]
    df = pd.DataFrame({"kernel": ["softmax"] * 3, "suite": ["train"] * 3,
                       "implementation": impls, "workload": ["a", "b", "c"]})
    monkeypatch.setattr(impl_descriptor, "SELECT_SETS", ("static",))
    monkeypatch.setattr(impl_descriptor, "SELECT_WEIGHTS", (2.0,))
    keys = {"family": "softmax", "features": "static", "top1": 0.9, "top4": 1.0,
            "top8": 1.0, "worst8": 0.8}
    whole = [{**keys, "weight": w, "part": "cv", "held": f"fold {k}"}
             for w in ("originals only", "2.0") for k in range(impl_descriptor.FOLDS)]
    whole += [{**keys, "weight": w, "part": "loio", "held": impl}
              for w in ("originals only", "2.0") for impl in impls[1:]]
    reuse = pd.DataFrame(whole)

    def no_fit(**kwargs):
        raise AssertionError("a reused variant was refitted")

    monkeypatch.setattr(costtune.evaluate, "default_model", no_fit)
    out = impl_descriptor.select(df, "softmax", reuse=reuse)
    cols = ["weight", "part", "held"]
    pd.testing.assert_frame_equal(pd.DataFrame(out)[reuse.columns].sort_values(cols)
                                  .reset_index(drop=True),
                                  reuse.sort_values(cols).reset_index(drop=True))
    for partial in (reuse.drop(index=9),  # fold 4 of weight 2 missing
                    reuse[~((reuse["weight"] == "2.0") & (reuse["held"] == impls[2]))],
                    reuse.assign(worst8=reuse["worst8"].where(reuse.index != 11))):
        with pytest.raises(AssertionError, match="refitted"):
            impl_descriptor.select(df, "softmax", reuse=partial)
    reuse.drop(columns=["worst8"]).to_csv(tmp_path / "r.csv", index=False)
    with pytest.raises(SystemExit):
        impl_descriptor.main(["--select", "--reuse", str(tmp_path / "r.csv")])
    assert "lacks the selection columns ['worst8']" in capsys.readouterr().err
