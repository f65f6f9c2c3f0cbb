"""Plan step (CPU): which runs to make, in priority order, and their estimated seconds.

    python -m experiments.prune_vs_exhaustive.plan [--budget-s 450] [--families gemm,softmax]
        [--shapes-per-family 2] [--ks 1,4,8] [--methods exhaustive,costtune,costtune2,tutorial]

Prints the plan (runs within the time budget, then those left out and why); nothing needs a
GPU. The run step takes the same flags and measures what this prints.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import costtune
from experiments import harness

QUESTION = "prune_vs_exhaustive"
RAW = harness.raw_dir(QUESTION)
FAMILIES = ("gemm", "softmax", "attention")
# Test-suite shapes with modest spaces (cold exhaustive tuning is the expensive part).
SHAPES = {
    # The third: the test suite's square nearest the brief's 4096^3 reference (300 configs).
    "gemm": [{"M": 16, "N": 6144, "K": 4096}, {"M": 512, "N": 4608, "K": 3584},
             {"M": 5120, "N": 5120, "K": 5120}],
    "softmax": [{"rows": 4096, "cols": 4096}, {"rows": 4, "cols": 32000}],
    "attention": [{"B": 1, "H": 32, "S": 512, "D": 128, "causal": 1},
                  {"B": 8, "H": 12, "S": 1024, "D": 64, "causal": 0}],
}
# Rough seconds for planning: the brief's cold autotune of 328 GEMM configs took 178 s (~0.4 s
# compile + ~0.13 s do_bench each); attention compiles took ~1-4 s per config in the dataset.
EST_START_S = 7.0  # process start to finish less the tuning (costtune runs took 7.5-11.5 s)
EST_PRUNE_S = 2.0  # first pruning call: imports xgboost (and scikit-learn), loads the model
EST_THREAD_SLOWDOWN = 1.5  # threaded compiles share the GIL for Triton's Python frontend
EST_RETIME_S = 15.0  # one shape's same-process re-timing (process start, inputs, timings)
EST_COMPILE_S = {"gemm": 0.45, "softmax": 0.3, "attention": 1.5}
EST_BENCH_S = 0.13  # Triton's do_bench per config
EST_GRAPH_BENCH_S = 0.02  # costtune's graph_bench per config
# Priority, for every family before the next method: the exhaustive reference, costtune's
# default k=8 (static, then two-stage), then the variants.
METHODS = [("exhaustive", None), ("costtune", 8), ("costtune2", 8), ("costtune", 1),
           ("tutorial", None), ("costtune", 4), ("costtune2", 1), ("costtune2", 4),
           ("costtune", 16)]


@dataclass
class Run:
    family: str
    problem: dict[str, int]
    method: str
    k: int | None
    n_space: int
    est_s: float
    dtype: str = "float16"

    @property
    def label(self) -> str:
        return self.method if self.k is None else f"{self.method} k={self.k}"


def plan(families: list[str], shapes_per_family: int, *, ks: list[int], methods: list[str],
         two_stage_ok: bool, cores: int) -> tuple[list[Run], list[tuple[Run, str]]]:
    """Runs in priority order, and runs left out with the reason."""
    runs, dropped = [], []
    for i in range(shapes_per_family):
        for method, k in METHODS:
            for fam in families:
                if i >= len(SHAPES[fam]) or method not in methods or (
                        k is not None and k not in ks):
                    continue
                if method == "tutorial" and fam != "gemm":
                    continue
                problem = SHAPES[fam][i]
                n = len(costtune.get_family(fam).config_space(problem))
                run = Run(fam, problem, method, k, n, 0.0)
                run.est_s = estimate(run, cores)
                if method == "costtune2" and not two_stage_ok:
                    dropped.append((run, "stage-2 model has no compiled features"))
                    continue
                runs.append(run)
    return runs, dropped


def estimate(run: Run, cores: int) -> float:
    compile_s = EST_COMPILE_S[run.family]
    if run.method in ("exhaustive", "tutorial"):
        n = run.n_space if run.method == "exhaustive" else 8
        return EST_START_S + n * (compile_s + EST_BENCH_S)
    # Survivors compile in threads (costtune.tune.precompile), stage 2's shortlist too.
    k = min(run.k, run.n_space)
    est = EST_START_S + EST_PRUNE_S + k * EST_GRAPH_BENCH_S
    est += math.ceil(k / cores) * compile_s * EST_THREAD_SLOWDOWN
    if run.method == "costtune2":
        est += math.ceil(min(32, run.n_space) / cores) * compile_s * EST_THREAD_SLOWDOWN
    return est


def select(runs: list[Run], budget_s: float) -> tuple[list[Run], list[tuple[Run, str]]]:
    chosen, dropped, total = [], [], 0.0
    for run in runs:
        if total + run.est_s <= budget_s:
            chosen.append(run)
            total += run.est_s
        else:
            dropped.append((run, "over the time budget"))
    return chosen, dropped


def run_id(run: Run) -> tuple:
    return (run.family, json.dumps(run.problem, sort_keys=True), run.method, run.k, run.dtype)


def load_log(path: Path) -> list[tuple[Run, dict[str, Any]]]:
    """The (run, result) records of a runs log (JSON lines); [] when it does not exist."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            out.append((Run(**rec["run"]), rec["result"]))
    return out


def stage2_name(model: str, stage2_model: str | None) -> str:
    """--stage2-model, else the hook's default for --model."""
    from costtune.tune.ranking import default_stage2

    return stage2_model or default_stage2(model)


def check_models(model: str, stage2_model: str | None) -> tuple[str | None, bool, str]:
    """(why the model cannot load or None, stage-2 model has compiled features, note). The
    costtune runs would only measure the hook's keep-everything fallback without a model
    (the device image, for one, lacks xgboost unless a wheel is carried)."""
    from costtune.model import CostModel

    try:
        CostModel.load(model)
    except Exception as exc:
        return f"cannot load model {model!r}: {type(exc).__name__}: {exc}", False, ""
    try:
        stage2 = CostModel.load(stage2_name(model, stage2_model))
    except Exception as exc:
        return None, False, f"stage-2 model: {type(exc).__name__}: {exc}"
    return None, stage2.features != "static", f"stage-2 feature set {stage2.features!r}"


def add_plan_args(ap: argparse.ArgumentParser) -> None:
    """The flags plan and run share."""
    ap.add_argument("--budget-s", type=float, default=450.0, help="planned GPU seconds")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--shapes-per-family", type=int, default=2)
    ap.add_argument("--ks", default="1,4,8")
    ap.add_argument("--methods", default="exhaustive,costtune,costtune2,tutorial")
    ap.add_argument("--model", default="h200")
    ap.add_argument("--stage2-model", default=None,
                    help="default: <model>_compiled for a shipped name, else --model")


def make_plan(ap: argparse.ArgumentParser, args: argparse.Namespace, *, require_model: bool
              ) -> tuple[list[Run], list[tuple[Run, str]], str]:
    """All planned runs, those left out (reason) and a note on the models; bad flags end in
    ``ap.error``."""
    families = [f for f in args.families.split(",") if f]
    methods = [m for m in args.methods.split(",") if m]
    bad = sorted(set(families) - set(FAMILIES)) + sorted(
        set(methods) - {m for m, _ in METHODS})
    if bad:
        ap.error(f"unknown families/methods {bad}")
    ks = [int(k) for k in args.ks.split(",") if k]
    broken, two_ok, why = check_models(args.model, args.stage2_model)
    if broken and any(m.startswith("costtune") for m in methods):
        if require_model:
            ap.error(broken)
        print(f"WARNING: {broken}")
    runs, dropped = plan(families, args.shapes_per_family, ks=ks, methods=methods,
                         two_stage_ok=two_ok, cores=os.cpu_count() or 1)
    return runs, dropped, why


def print_plan(chosen: list[Run], dropped: list[tuple[Run, str]], *, budget_s: float,
               note: str) -> None:
    print(f"plan: {len(chosen)} runs, ~{sum(r.est_s for r in chosen):.0f} s estimated of "
          f"{budget_s:.0f} s budget; {note}")
    for run in chosen:
        print(f"  {run.family:9s} {run.problem} {run.label:14s} space {run.n_space:4d} "
              f"~{run.est_s:5.0f} s")
    for run, reason in dropped:
        print(f"  skip {run.family} {run.problem} {run.label}: {reason}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_plan_args(ap)
    args = ap.parse_args(argv)
    runs, dropped, note = make_plan(ap, args, require_model=False)
    chosen, over = select(runs, args.budget_s)
    print_plan(chosen, dropped + over, budget_s=args.budget_s, note=note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
