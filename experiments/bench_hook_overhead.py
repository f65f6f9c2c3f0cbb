"""How long does the pruning hook take? ``early_config_prune`` over 1,000 GEMM configs.

Calls the hook exactly as Triton does (configs, named args, ``grid=``, ``warmup=``) for every
GEMM test-suite shape, repeatedly, and reports the first call (model load, config keys) and the
steady state per tuning call (static features + one batched prediction + ranking). Goal: <= 10 ms.
This is a host-CPU measurement: the hook runs on the CPU in real use as well, but a GPU host's
CPU is not this one. Writes experiments/results/hook_overhead.md.

    python experiments/bench_hook_overhead.py [--model h200|PATH] [--configs 1000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import triton

import costtune
from costtune.env import environment
from costtune.features import static_features_for
from costtune.features.static import config_columns
from costtune.model import CostModel

ROOT = Path(__file__).resolve().parents[1]
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
    return {"first": first, "median": statistics.median(wall),
            "p90": float(np.percentile(wall, 90)), "min": min(wall),
            "cpu_median": statistics.median(cpu), "n": len(wall)}


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
    return statistics.median(feats), statistics.median(infer)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="h200", help="shipped model name or saved path")
    parser.add_argument("--configs", type=int, default=1000, help="GEMM configs per call")
    parser.add_argument("--repeats", type=int, default=20, help="passes over the shapes")
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results"
                        / "hook_overhead.md")
    args = parser.parse_args(argv)

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
    load_after = os.getloadavg()
    env = environment()
    ok = hook["median"] <= GOAL_MS
    print(f"early_config_prune, {len(configs)} GEMM configs: median {hook['median']:.2f} ms "
          f"wall, {hook['cpu_median']:.2f} ms process CPU (p90 wall {hook['p90']:.2f}, min "
          f"{hook['min']:.2f}; first call {hook['first']:.0f} ms) -> goal <= {GOAL_MS:g} ms "
          f"{'met' if ok else 'NOT met'} on wall time; static features {features_ms:.2f} ms, "
          f"model inference {inference_ms:.2f} ms CPU")
    for message in fallbacks:
        print("fallback warning:", message)

    lines = [
        "# Pruning-hook overhead (CPU measurement)",
        "",
        f"`early_config_prune` of `costtune.prune_configs_by(top_k={args.top_k}, "
        f"family=\"gemm\")` over **{len(configs)} GEMM configs** (seeded sample of the full "
        "GEMM space), called as Triton calls it (named args, `grid=`, `warmup=`), once per GEMM "
        f"test-suite shape ({len(shapes)} shapes) x {args.repeats} passes.",
        "",
        "| what | ms |", "|---|---:|",
        f"| per tuning call, wall, median ({hook['n']} calls) | **{hook['median']:.2f}** |",
        f"| per tuning call, wall, p90 | {hook['p90']:.2f} |",
        f"| per tuning call, wall, min | {hook['min']:.2f} |",
        f"| per tuning call, process CPU time, median | **{hook['cpu_median']:.2f}** |",
        f"| part: static features (CPU, median) | {features_ms:.2f} |",
        f"| part: model inference, one batch (CPU, median) | {inference_ms:.2f} |",
        f"| first call (lazy imports, config keys; model in memory) | {hook['first']:.0f} |",
        "",
        f"Goal <= {GOAL_MS:g} ms per call: **{'met' if ok else 'not met'}** on median wall time"
        f"; process CPU time {'meets' if hook['cpu_median'] <= GOAL_MS else 'misses'} it. "
        "On a shared machine wall time includes waiting for a core (see the load average "
        "below); process CPU time leaves that out but still runs slower on a core whose "
        "sibling is busy. Model inference grows with the number of trees: it is the part a "
        "smaller model would cut (on the 2-core development VM, 150 instead of 300 trees: "
        "~5.9 instead of ~10.5 ms; 2 XGBoost threads: ~6.8 ms). The shipped GEMM model keeps "
        "300 trees: cross-validation on the train suite scored 150 trees lower (top1 0.954 "
        "vs 0.969, experiments/results/model_selection.md), and a few ms are small against the "
        "seconds of compiling even one config.",
        "",
        "## Provenance",
        "",
        "This is a **CPU measurement** of host-side work: the hook runs on the host CPU before "
        "anything compiles, so no GPU is involved, but a GPU host's CPU differs from this one "
        "and the figure moves with machine load.",
        "",
        f"- model: {source}",
        f"- CPU: {cpu_name()}, {os.cpu_count()} cores visible; load average "
        f"{load_avg[0]:.2f} before, {load_after[0]:.2f} after (1-min)",
        f"- host {env['hostname']}, python {env['python']}, torch {env['torch']}, "
        f"triton {env['triton']}, numpy {env['numpy']}, GPU: {env['gpu']}",
        f"- costtune commit {env['costtune_commit'] or 'unknown'}"
        f"{' (uncommitted changes)' if env['costtune_dirty'] else ''}, {env['date']}",
        f"- command: `{env['command']}`",
        f"- fallback warnings during the run: {'; '.join(fallbacks) if fallbacks else 'none'}",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return {**hook, "features_ms": features_ms, "inference_ms": inference_ms}


if __name__ == "__main__":
    main()
