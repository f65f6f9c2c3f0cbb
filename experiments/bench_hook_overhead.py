"""How long does the pruning hook take? ``early_config_prune`` over 1,000 GEMM configs.

Calls the hook exactly as Triton does (configs, named args, ``grid=``, ``warmup=``) for every
GEMM test-suite shape, repeatedly, and reports the first call (model load, config keys) and the
steady state per tuning call (static features + one batched prediction + ranking). Goal: <= 10 ms.
This is a host-CPU measurement: the hook runs on the CPU in real use as well, but a GPU host's
CPU is not this one. Each run is a record in results/raw/hook_overhead/<label>_<date>.json
(the H200 host's among them); hook_overhead.{md,csv} show this run and every record.

    python -m experiments.bench_hook_overhead [--model h200|PATH] [--configs 1000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import triton

import costtune
from costtune.features import static_features_for
from costtune.features.static import config_columns
from costtune.model import CostModel
from experiments import harness

GOAL_MS = 10.0


def load_model(name: str) -> tuple[CostModel, str]:
    """The model to time, as the hook loads it for GEMM, and a line describing it."""
    model = CostModel.load_for(name, "gemm")[0]
    return model, (f"`{name}` for gemm (loaded): {model.n_estimators} trees of depth "
                   f"{model.max_depth}, {model.objective}, {model.features} features, "
                   f"families {', '.join(model.families_)}")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def time_calls(prune, configs, *, shapes, repeats: int) -> dict[str, float]:
    """Per-call wall and process-CPU milliseconds; the first call is reported apart."""
    a = torch.empty(1, dtype=torch.float16)  # the hook reads only its dtype
    first, wall, cpu = None, [], []
    for _ in range(repeats):
        for s in shapes:
            grid = lambda meta, s=s: (triton.cdiv(s["M"], meta["BLOCK_M"])
                                      * triton.cdiv(s["N"], meta["BLOCK_N"]), meta["SPLIT_K"])
            w0, c0 = time.perf_counter(), time.process_time()
            prune(configs, {"a_ptr": a, **s}, grid=grid, warmup=False)
            w, c = (time.perf_counter() - w0) * 1e3, (time.process_time() - c0) * 1e3
            if first is None:
                first = w
            else:
                wall.append(w)
                cpu.append(c)
    return {"first": first, "median": float(np.median(wall)),
            "p90": float(np.percentile(wall, 90)), "min": min(wall),
            "cpu_median": float(np.median(cpu)), "n": len(wall)}


def time_parts(model, configs, *, shapes, repeats: int) -> tuple[float, float]:
    """Median process-CPU ms of the two big parts alone: static features, model inference."""
    feats, infer = [], []
    columns = config_columns(configs)  # the hook keeps these per config list
    for _ in range(repeats):
        for s in shapes:
            c0 = time.process_time()
            x = static_features_for("gemm", s, "float16", configs, columns=columns)
            c1 = time.process_time()
            model.booster_.inplace_predict(
                x.reindex(columns=model.feature_names_).to_numpy(dtype=np.float32))
            c2 = time.process_time()
            feats.append((c1 - c0) * 1e3)
            infer.append((c2 - c1) * 1e3)
    return float(np.median(feats)), float(np.median(infer))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One run: the hook timed over the GEMM test shapes, its parts, and where it ran."""
    gemm = costtune.get_family("gemm")
    configs = [c.to_triton() for c in gemm.config_space().sample(args.configs, seed=0)]
    shapes = list(gemm.TEST_SHAPES)
    model, source = load_model(args.model)
    load_avg = os.getloadavg()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prune = costtune.prune_configs_by(model, args.top_k, family="gemm")[
            "early_config_prune"]
        hook = time_calls(prune, configs, shapes=shapes, repeats=args.repeats)
    fallbacks = sorted({str(w.message) for w in caught
                        if issubclass(w.category, costtune.CosttuneWarning)})
    features_ms, inference_ms = time_parts(model, configs, shapes=shapes,
                                           repeats=max(1, args.repeats // 2))
    env = harness.environment()
    return {"host": args.label or default_label(env), **hook, "features_ms": features_ms,
            "inference_ms": inference_ms, "configs": len(configs), "shapes": len(shapes),
            "repeats": args.repeats, "top_k": args.top_k, "model": source,
            "cpu": cpu_name(), "cores": os.cpu_count(), "load_before": load_avg[0],
            "load_after": os.getloadavg()[0], "fallbacks": fallbacks,
            **{k: env.get(k) for k in ("hostname", "python", "torch", "triton", "numpy", "gpu",
                                       "costtune_commit", "costtune_dirty", "date")},
            "command": harness.command()}


def default_label(env: dict[str, Any]) -> str:
    """A record's host label: GPU host or CPU machine, and its cores (hostnames repeat)."""
    kind = "cpu" if env.get("gpu") in (None, "cpu") else "gpu"
    return f"{kind}_host_{os.cpu_count()}cores"


def run_table(r: dict[str, Any]) -> pd.DataFrame:
    rows = [(f"per tuning call, wall, median ({r['n']} calls)", f"**{r['median']:.2f}**"),
            ("per tuning call, wall, p90", f"{r['p90']:.2f}"),
            ("per tuning call, wall, min", f"{r['min']:.2f}"),
            ("per tuning call, process CPU time, median", f"**{r['cpu_median']:.2f}**"),
            ("part: static features (CPU, median)", f"{r['features_ms']:.2f}"),
            ("part: model inference, one batch (CPU, median)", f"{r['inference_ms']:.2f}"),
            ("first call (lazy imports, config keys; model in memory)", f"{r['first']:.0f}")]
    return pd.DataFrame(rows, columns=["what", "ms"])


def report_lines(r: dict[str, Any], records: pd.DataFrame) -> list[str]:
    ok = r["median"] <= GOAL_MS
    hosts = records[["host", "date", "median", "p90", "min", "cpu_median", "features_ms",
                     "inference_ms", "first", "n", "cpu", "cores", "costtune_commit"]]
    hosts = hosts.assign(costtune_commit=hosts["costtune_commit"].fillna("").str[:7])
    return [
        "# Pruning-hook overhead (CPU measurement)", "", harness.provenance(), "",
        f"`early_config_prune` of `costtune.prune_configs_by(top_k={r['top_k']}, "
        f"family=\"gemm\")` over **{r['configs']} GEMM configs** (seeded sample of the full "
        "GEMM space), called as Triton calls it (named args, `grid=`, `warmup=`), once per GEMM "
        f"test-suite shape ({r['shapes']} shapes) x {r['repeats']} passes.", "",
        f"## This run ({r['host']})", "",
        harness.md_table(run_table(r), colalign=("left", "right")), "",
        f"Goal <= {GOAL_MS:g} ms per call: **{'met' if ok else 'not met'}** on median wall time"
        f"; process CPU time {'meets' if r['cpu_median'] <= GOAL_MS else 'misses'} it. "
        "On a shared machine wall time includes waiting for a core (see the load average "
        "below); process CPU time leaves that out but still runs slower on a core whose "
        "sibling is busy. Model inference grows with the number of trees: it is the part a "
        "smaller model would cut (on the 2-core development VM, 150 instead of 300 trees: "
        "~5.9 instead of ~10.5 ms; 2 XGBoost threads: ~6.8 ms). The shipped GEMM model keeps "
        "300 trees: cross-validation on the train suite scored 150 trees lower (per-family "
        "GEMM top1 0.952 vs 0.965, experiments/results/model_selection.md), and a few ms are "
        "small against the "
        "seconds of compiling even one config.", "",
        "## Every run recorded (ms; one record per run in results/raw/hook_overhead/)", "",
        harness.md_table(hosts, floatfmt=".2f"), "",
        "## Provenance of this run", "",
        "This is a **CPU measurement** of host-side work: the hook runs on the host CPU before "
        "anything compiles, so no GPU is involved, but a GPU host's CPU differs from this one "
        "and the figure moves with machine load.", "",
        f"- model: {r['model']}",
        f"- CPU: {r['cpu']}, {r['cores']} cores visible; load average "
        f"{r['load_before']:.2f} before, {r['load_after']:.2f} after (1-min)",
        f"- host {r['hostname']}, python {r['python']}, torch {r['torch']}, "
        f"triton {r['triton']}, numpy {r['numpy']}, GPU: {r['gpu']}",
        f"- costtune commit {r['costtune_commit'] or 'unknown'}"
        f"{' (uncommitted changes)' if r['costtune_dirty'] else ''}, {r['date']}",
        f"- command: `{r['command']}`",
        f"- fallback warnings during the run: "
        f"{'; '.join(r['fallbacks']) if r['fallbacks'] else 'none'}", ""]


def load_records(raw: Path) -> pd.DataFrame:
    """Every run's record (results/raw/hook_overhead/<host>_<date>.json), one row each."""
    recs = [json.loads(p.read_text()) for p in sorted(raw.glob("*.json"))]
    return pd.DataFrame(recs).sort_values(["host", "date"]).reset_index(drop=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="h200", help="shipped model name or saved path")
    parser.add_argument("--configs", type=int, default=1000, help="GEMM configs per call")
    parser.add_argument("--repeats", type=int, default=20, help="passes over the shapes")
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--label", default=None, help="this host's record name (default "
                        "<cpu|gpu>_host_<N>cores)")
    parser.add_argument("--out", type=Path, default=harness.RESULTS,
                        help="folder of hook_overhead.{md,csv}; the record goes to "
                        "<out>/raw/hook_overhead/<label>_<date>.json")
    args = parser.parse_args(argv)
    r = measure(args)
    print(f"early_config_prune, {r['configs']} GEMM configs: median {r['median']:.2f} ms "
          f"wall, {r['cpu_median']:.2f} ms process CPU (p90 wall {r['p90']:.2f}, min "
          f"{r['min']:.2f}; first call {r['first']:.0f} ms) -> goal <= {GOAL_MS:g} ms "
          f"{'met' if r['median'] <= GOAL_MS else 'NOT met'} on wall time; static features "
          f"{r['features_ms']:.2f} ms, model inference {r['inference_ms']:.2f} ms CPU")
    raw = args.out / "raw" / "hook_overhead"
    raw.mkdir(parents=True, exist_ok=True)
    stamp = r["date"][:16].replace(":", "")  # one record per run: none is overwritten
    (raw / f"{r['host']}_{stamp}.json").write_text(json.dumps(r, indent=1, default=str) + "\n")
    records = load_records(raw)
    md = harness.write_report("hook_overhead", report_lines(r, records), records, out=args.out)
    print(f"wrote {md} and .csv")
    return r


if __name__ == "__main__":
    main()
