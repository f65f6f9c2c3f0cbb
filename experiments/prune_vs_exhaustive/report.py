"""Report step (CPU): results/prune_vs_exhaustive.{md,csv,png} from the raw run logs.

    python -m experiments.prune_vs_exhaustive.report [--raw results/raw/prune_vs_exhaustive]
        [--before runs_session3.jsonl] [--out experiments/results]

Reads ``<raw>/runs.jsonl`` (one fresh-process run per line), ``<raw>/retimes.jsonl`` (each
shape's chosen configs re-timed side by side) and ``--before`` (the same runs under earlier
code, a file in ``<raw>``; ``none`` leaves the comparison out), and the shipped dataset for the
dataset-best ratio. Lists every raw file with its runs, commits and dates.
"""

from __future__ import annotations

import argparse
import math
import sys
from functools import cache
from pathlib import Path

import pandas as pd
from scipy.stats import gmean

import costtune
from experiments import harness
from experiments.prune_vs_exhaustive.plan import (
    FAMILIES,
    QUESTION,
    RAW,
    Run,
    load_log,
    run_id,
    stage2_name,
)
from experiments.prune_vs_exhaustive.run import load_retimes

LARGE_SPACE = 250  # configs: a space like the brief's 328-config GEMM reference
MARKERS = {"exhaustive": "*", "tutorial": "s", "costtune": "o", "costtune2": "^"}
RUN_COLUMNS = ["workload", "method", "k", "n_space", "n_benchmarked", "bench", "tune_s",
               "process_s", "prune_ms", "precompile_ms", "precompiled", "commit", "chosen",
               "kernel_ms", "speed_vs_exhaustive", "retimed_ms", "speed_same_process",
               "speed_vs_torch", "speed_vs_dataset_best", "correct", "status"]


def workload_id(family: str, problem: dict, dtype: str) -> str:
    return costtune.Workload(family, problem, dtype).id


def result_table(results: list[tuple[Run, dict]], retimes: list[dict] | None = None
                 ) -> pd.DataFrame:
    """One row per run; with ``retimes``, each chosen config's same-process time and the speed
    ratio taken from those side-by-side timings."""
    df = pd.DataFrame([{"family": run.family,
                        "workload": workload_id(run.family, run.problem, run.dtype),
                        "method": run.method, "k": run.k, "n_space": run.n_space,
                        "est_s": round(run.est_s, 1),
                        "commit": (res.get("env") or {}).get("costtune_commit"),
                        **{k: v for k, v in res.items() if k != "env"}}
                       for run, res in results])
    for col in ("tune_s", "kernel_ms", "torch_ms", "n_benchmarked", "process_s", "bench"):
        if col not in df:
            df[col] = math.nan
    # Runs logged before the bench was recorded all timed with Triton's do_bench.
    df["bench"] = df["bench"].fillna("triton")
    exh = df[(df["method"] == "exhaustive") & (df["status"] == "ok")].set_index("workload")
    df["speed_vs_exhaustive"] = df["workload"].map(exh["kernel_ms"]) / df["kernel_ms"]
    df["tune_speedup_vs_exhaustive"] = df["workload"].map(exh["tune_s"]) / df["tune_s"]
    df["speed_vs_torch"] = df["torch_ms"] / df["kernel_ms"]
    same: dict[tuple[str, str], float] = {}
    for rec in retimes or []:  # later records of a shape win
        spec = rec["spec"]
        wid = workload_id(spec["family"], spec["problem"], spec["dtype"])
        same.update({(wid, key): ms for key, ms in rec["result"]["kernel_ms"].items()})
    df["retimed_ms"] = [same.get(p, math.nan) for p in zip(df["workload"], df["chosen"])]
    exh_same = {w: same.get((w, c), math.nan) for w, c in exh["chosen"].items()}
    df["speed_same_process"] = df["workload"].map(exh_same) / df["retimed_ms"]
    # The very config exhaustive chose is exactly as fast (nothing to re-time side by side).
    df.loc[df["chosen"] == df["workload"].map(exh["chosen"]), "speed_same_process"] = 1.0
    best = dataset_best()
    # Across runs only ratios hold (the brief): compare kernel/torch with the dataset's.
    df["speed_vs_dataset_best"] = df["workload"].map(best) / (df["kernel_ms"] / df["torch_ms"])
    return df


@cache
def dataset_best() -> dict[str, float]:
    """Per workload: best OK time / torch time in datasets/h200 (same kernel, same timing)."""
    out = {}
    for fam in FAMILIES:
        try:
            df = harness.load_dataset(kernel=fam)
        except FileNotFoundError:
            continue
        ok = df[df["status"] == "ok"]
        best = ok.loc[ok.groupby("workload")["time_ms"].idxmin()]
        out.update(zip(best["workload"], best["time_ms"] / best["ref_time_ms"], strict=True))
    return out


def label(method: str, k: float) -> str:
    return method if k != k else f"{method} k={int(k)}"


def goal_lines(ok: pd.DataFrame) -> list[str]:
    """Per pruned method and k, over the shapes that also have an exhaustive run. Kernel speed
    is the same-process re-timing where there is one (else the runs' own timings)."""
    out = []
    ok = ok.assign(speed=ok["speed_same_process"].fillna(ok["speed_vs_exhaustive"]))
    ok = ok.assign(hit=(ok["tune_speedup_vs_exhaustive"] >= 35) & (ok["speed"] >= 0.99))
    paired = ok[ok["speed"].notna() & (ok["method"] != "exhaustive")]
    for (method, k), g in paired.groupby(["method", "k"], dropna=False):
        up = g["tune_speedup_vs_exhaustive"]
        n_same = int(g["speed_same_process"].notna().sum())
        out.append(f"- {label(method, k)} ({len(g)} shapes, {n_same} re-timed side by side): "
                   f"tune time {up.min():.1f}-{up.max():.1f}x less, kernel speed "
                   f"{g['speed'].min():.3f}-{g['speed'].max():.3f} of exhaustive: "
                   f"**{'met' if g['hit'].all() else 'NOT met'}**")
        out += [f"  - {r['workload']}: {r['tune_speedup_vs_exhaustive']:.1f}x, "
                f"speed {r['speed']:.3f}{' (met)' if r['hit'] else ''}" for _, r in g.iterrows()]
    large = paired[paired["n_space"] >= LARGE_SPACE]
    if len(large):
        out += ["", f"On large spaces only (>= {LARGE_SPACE} configs, the design brief's "
                "reference: 178 s for one 4096^3 GEMM over 328 configs):", ""]
        out += [f"- {label(method, k)}: met on {int(g['hit'].sum())}/{len(g)} shapes "
                f"({', '.join(g['workload'])}) -> **{'met' if g['hit'].all() else 'NOT met'}**"
                for (method, k), g in large.groupby(["method", "k"], dropna=False)]
    small = ok[(ok["n_space"] < LARGE_SPACE) & (ok["method"] == "exhaustive")]
    pruned = paired[(paired["n_space"] < LARGE_SPACE)
                    & paired["method"].str.startswith("costtune")]
    if len(small) and len(pruned):
        out += ["", f"On smaller spaces ({int(small['n_space'].min())}-"
                f"{int(small['n_space'].max())} configs) exhaustive tuning took "
                f"{small['tune_s'].min():.0f}-{small['tune_s'].max():.0f} s: 35x less would "
                f"need a cold tune of {small['tune_s'].min() / 35:.1f}-"
                f"{small['tune_s'].max() / 35:.1f} s, while costtune's fastest run on them took "
                f"{pruned['tune_s'].min():.1f} s (the model's load and at least one "
                "compile)."]
    return out


def geomean(values: pd.Series) -> float:
    """Geometric mean of the positive values (NaN and non-positive left out)."""
    v = values[values > 0].dropna()
    return float(gmean(v)) if len(v) else math.nan


def summary_table(ok: pd.DataFrame) -> pd.DataFrame:
    return ok.groupby(["method", "k"], dropna=False).agg(
        runs=("workload", "size"), benchmarked=("n_benchmarked", "median"),
        median_tune_s=("tune_s", "median"),
        speed_vs_exhaustive=("speed_vs_exhaustive", geomean),
        speed_same_process=("speed_same_process", geomean),
        tune_speedup=("tune_speedup_vs_exhaustive", geomean),
        speed_vs_dataset_best=("speed_vs_dataset_best", geomean),
        all_correct=("correct", "all")).reset_index()


def before_after(before: list[tuple[Run, dict]], after: list[tuple[Run, dict]],
                 name: str) -> list[str]:
    """The same runs measured under earlier code (e.g. before a change to the hook)."""
    now = {run_id(r): res for r, res in after}
    rows = []
    for run, old in before:
        if old.get("status") != "ok":
            continue
        new = now.get(run_id(run))
        row = {"shape": f"{run.family} {run.problem}", "run": run.label,
               "commit before": (old.get("env") or {}).get("costtune_commit"),
               "tune_s before": f"{old['tune_s']:.1f}",
               "precompiled before": str(old.get("precompiled"))}
        if new is None:  # not re-measured after the change
            row.update({"commit after": "not re-measured", "tune_s after": "",
                        "precompiled after": "",
                        "kernel µs before / after": f"{old['kernel_ms'] * 1e3:.1f} /"})
        else:
            row.update({"commit after": (new.get("env") or {}).get("costtune_commit"),
                        "tune_s after": f"{new['tune_s']:.1f}",
                        "precompiled after": str(new.get("precompiled")),
                        "kernel µs before / after": f"{old['kernel_ms'] * 1e3:.1f} / "
                                                    f"{new['kernel_ms'] * 1e3:.1f}"})
        rows.append(row)
    if not rows:
        return []
    return [f"## Same runs under earlier code (`{name}`)", "",
            f"Before: the runs in `{name}` (their commits are named per row); after: the "
            "runs of this report.", "",
            harness.md_table(pd.DataFrame(rows), disable_numparse=True)]


def raw_files(raw: Path) -> pd.DataFrame:
    """Every raw log of this question: what it holds (runs or re-timings), commits, dates."""
    rows = []
    for path in sorted(raw.glob("*.jsonl")):
        recs = pd.read_json(path, lines=True)
        envs = [(r.get("env") or {}) for r in recs["result"]]
        kind = "re-timings" if "spec" in recs else "runs"
        rows.append({"file": path.name, "records": len(recs), "holds": kind,
                     "commits": ", ".join(sorted({str(e.get("costtune_commit")) for e in envs})),
                     "first": min(str(e.get("date")) for e in envs)[:16],
                     "last": max(str(e.get("date")) for e in envs)[:16]})
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, png: Path) -> None:
    """Cold tuning time vs kernel speed, one point per (shape, method, k) with an exhaustive
    run; speed from the same-process re-timing where there is one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = df[(df["status"] == "ok") & df["speed_vs_exhaustive"].notna()]
    runs = runs.assign(speed=runs["speed_same_process"].fillna(runs["speed_vs_exhaustive"]))
    families = sorted(runs["family"].unique())
    fig, axes = plt.subplots(1, len(families), figsize=(5 * len(families), 4), squeeze=False)
    for ax, fam in zip(axes[0], families, strict=True):
        part = runs[runs["family"] == fam]
        for method, g in part.groupby("method"):
            ax.scatter(g["tune_s"], g["speed"], marker=MARKERS.get(method, "x"),
                       s=60, label=method)
            for r in g.itertuples():
                if r.k == r.k:
                    ax.annotate(f"k={int(r.k)}", (r.tune_s, r.speed),
                                textcoords="offset points", xytext=(4, 3), fontsize=7)
        ax.set_xscale("log")
        ax.axhline(0.99, color="grey", lw=0.8, ls="--")
        ax.set_title(f"{fam} ({part['workload'].nunique()} shapes)")
        ax.set_xlabel("measured cold tuning s (first call)")
        ax.set_ylabel("kernel speed / exhaustive's")
        ax.legend(fontsize=7)
    fig.suptitle("H200, measured: cold tuning time vs kernel speed (prune_vs_exhaustive)")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def method_lines(results: list[tuple[Run, dict]], retimes: list[dict], model: str) -> list[str]:
    reps = sorted({res["reps"] for _, res in results if "reps" in res}
                  or {r["result"]["reps"] for r in retimes})
    rounds = sorted({r["result"]["rounds"] for r in retimes})
    models = sorted({(res.get("model", model), stage2_name(res.get("model", model),
                                                            res.get("stage2_model")))
                     for _, res in results})
    return [
        "Each run tunes costtune's own kernel in a fresh process with a fresh Triton cache and "
        "a fresh compiled-feature cache. `tune_s`: cold wall time of the first tuned call "
        "(pruning, compiles, benchmarks, first launch); `process_s`: the whole process. "
        "Kernel times: GPU-only, CUDA-graph replay with L2 flushed before each of "
        f"{'/'.join(map(str, reps))} reps, median, the torch op timed beside it in the same "
        "process. `speed_vs_exhaustive`: exhaustive's kernel time / this one (same shape, runs "
        "minutes apart); `retimed_ms` / `speed_same_process`: the chosen configs of a shape "
        f"timed side by side in one process ({'/'.join(map(str, rounds))} interleaved passes, "
        "median; retimes.jsonl), which the goal uses where present; "
        "`speed_vs_dataset_best`: (dataset best / its torch) / (this / its torch), "
        "against datasets/h200. GEMM tunes into one fp32 split-K workspace (zeroed before "
        "each benchmark); the chosen config is then timed through the family's own launch. "
        "Models: " + "; ".join(f"`{m}`, stage-2 `{s}`" for m, s in models) + ".",
        "", "![cold tuning time vs kernel speed](prune_vs_exhaustive.png)"]


def provenance_lines(results: list[tuple[Run, dict]], raw: Path) -> list[str]:
    env = next((res["env"] for _, res in results if "env" in res), {})
    return [
        "## Provenance", "",
        f"- Raw files: `{harness.relative(raw)}/` (below); per run (date, commit): the "
        "`date`/`costtune_commit` of each run's environment in runs.jsonl",
        f"- GPU {env.get('gpu')} ({env.get('sm_count')} SMs, driver {env.get('driver')}, "
        f"CUDA {env.get('cuda')}), torch {env.get('torch')}, triton {env.get('triton')}, "
        f"host {env.get('hostname')}, {env.get('date')}; costtune commit "
        f"{env.get('costtune_commit') or 'unknown'}"
        f"{' (uncommitted changes)' if env.get('costtune_dirty') else ''}",
        "- The runs were made on the device calls logged in experiments/results/logs/"
        "prune*_call*.log (16-core H200 host, one run per fresh process)", "",
        harness.md_table(raw_files(raw)), ""]


def build(raw: Path, *, before: str, model: str) -> tuple[list[str], pd.DataFrame]:
    results = [(r, res) for r, res in load_log(raw / "runs.jsonl") if res.get("status") == "ok"]
    if not results:
        raise SystemExit(f"prune_vs_exhaustive report: no ok runs in {raw / 'runs.jsonl'}")
    retimes = load_retimes(raw / "retimes.jsonl")
    df = result_table(results, retimes)
    ok = df[df["status"] == "ok"]
    lines = [
        "# Pruned vs exhaustive autotuning (GPU)", "", harness.provenance(), "",
        *method_lines(results, retimes, model), "",
        "## Summary (geomeans over shapes)", "",
        harness.md_table(summary_table(ok), floatfmt=".3g"), "",
        "## Goal: >= 35x less cold tuning time than exhaustive at >= 0.99 of its kernel speed",
        "", *goal_lines(ok), "",
        "## Runs", "", harness.md_table(df[[c for c in RUN_COLUMNS if c in df]],
                                        floatfmt=".4g"), "",
        *provenance_lines(results, raw)]
    if before != "none":
        if not (raw / before).exists():
            raise SystemExit(f"prune_vs_exhaustive report: --before {raw / before} not found")
        lines += ["", *before_after(load_log(raw / before), results, before)]
    notes = sorted({w for _, res in results for w in res.get("warnings", [])})
    if notes:
        lines += ["", "## costtune warnings", ""] + [f"- {w}" for w in notes]
    return lines, df


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", type=Path, default=RAW, help="folder of runs.jsonl/retimes.jsonl")
    ap.add_argument("--before", default="runs_session3.jsonl",
                    help="runs of the same plan under earlier code, in --raw ('none': skip)")
    ap.add_argument("--model", default="h200", help="the runs' model where they lack a record")
    ap.add_argument("--out", type=Path, default=harness.RESULTS)
    args = ap.parse_args(argv)
    lines, df = build(args.raw, before=args.before, model=args.model)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(df, args.out / f"{QUESTION}.png")
    md = harness.write_report(QUESTION, lines, df, out=args.out)
    print(f"wrote {md} and .csv, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
