"""Issue 17 on the H200: costtune vs exhaustive ``triton.autotune`` on kernels written as
Triton's tutorials and Inductor write them (``experiments/user_kernels.py``), cold.

Per style (tutorial 02 softmax, 03 matmul, 06 attention, 09 TMA persistent matmul, Inductor's
looped softmax), two tunings, each in a fresh process with a fresh Triton cache
(TRITON_CACHE_DIR in a new temp dir):

- ``exhaustive``: plain ``triton.autotune`` over the style's whole GPU config list, Triton's
  ``do_bench``, as users run it today;
- ``costtune``: ``costtune.autotune`` over the same list with the shipped model, ``--top-k``
  (default 8) and no user mapping (no ``family=`` / ``params=`` / ``problem=``), timing the
  kept configs as it does by default (``bench="graph"``).

Each child reports the first call's seconds (pruning, compiles, benchmarks, the run), the
configs benchmarked, the chosen config and its error against the fp32 reference, and the
hook's reading (family, sizes, k, every note). Then one process re-times every chosen config
side by side (``costtune.graph_bench``: CUDA-graph replay after L2 flushes; ``--rounds``
interleaved passes, median) beside the torch op. Sizes and config lists (GPU):

- tutorial02_softmax: 8192 x 3000 fp32, BLOCK_SIZE at the launch, 24 configs (num_warps 1-32
  x num_stages 1-4), grid min(rows, 4 x SMs)
- tutorial03_matmul: 4096^3 fp16, 32 configs (BLOCK_SIZE_M/N 64-128, K 32-64, 4-8 warps,
  3-4 stages, GROUP_SIZE_M 8)
- tutorial06_attention: B4 H16 S2048 D64 causal fp16 over host TensorDescriptors, 21 configs
  (the tutorial's Hopper list)
- tutorial09_tma_matmul: 4096^3 fp16 persistent over host TensorDescriptors, 32 configs (the
  tutorial's list, EPILOGUE_SUBTILE on / off)
- inductor_softmax: 32768 x 2048 fp16, 32 configs (XBLOCK x R0_BLOCK in [512, 8192], 4-8 warps)
- persistent_attention: B4 H16 S2048 D64 causal fp16, pointer loads, min(SMs, tiles) programs,
  36 configs (BLOCK_M 64-128 x BLOCK_N 32-128 x 2-4 stages x 4-8 warps)

Writes ``runs.jsonl`` (appended as it goes; ``--resume`` keeps the ok runs), ``retime.jsonl``
and ``user_kernels_h200.md`` under ``--out`` (default ``$OUT``, else
experiments/results/user_kernels_h200).

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 experiments/device/user_kernels_h200.py
    python3 experiments/device/user_kernels_h200.py --dry-run       # the plan (no GPU)
    python3 experiments/device/user_kernels_h200.py --cpu-check     # tiny shapes, interpreter
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
if "--cpu-check" in sys.argv:  # before triton is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
from user_kernels import STYLES, relative_error  # noqa: E402

import costtune  # noqa: E402

METHODS = ("exhaustive", "costtune")
# Rough seconds, for the plan: a fresh process (imports, CUDA), one compile per config, one
# do_bench / graph_bench per config; costtune's first call also loads the model.
EST_START_S = 8.0
EST_COMPILE_S = {"tutorial02_softmax": 0.35, "tutorial03_matmul": 0.5,
                 "tutorial06_attention": 1.2, "tutorial09_tma_matmul": 0.7,
                 "inductor_softmax": 0.35, "persistent_attention": 1.2, "inductor_mm": 0.6,
                 "inductor_linear": 0.6, "flashattn_bshd": 1.2}
EST_BENCH_S = {"exhaustive": 0.13, "costtune": 0.03}
EST_MODEL_S = 2.5
EST_RETIME_S = 40.0


def provenance() -> dict[str, Any]:
    from costtune.env import git_state

    # The launcher's COSTTUNE_COMMIT wins: a device copy's .git can be stale.
    commit = git_state()[0][:7] or "unknown"
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none (CPU)"
    return {"gpu": gpu, "torch": torch.__version__, "triton": triton.__version__,
            "costtune": costtune.__version__, "commit": commit,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": "python3 " + " ".join(sys.argv), "cpus": os.cpu_count()}


def estimate(style: str, method: str, *, top_k: int) -> float:
    n = len(STYLES[style].configs("gpu"))
    k = n if method == "exhaustive" else min(top_k, n)
    model = EST_MODEL_S if method == "costtune" else 0.0
    return EST_START_S + model + k * (EST_COMPILE_S[style] + EST_BENCH_S[method])


def plan(styles: list[str], *, top_k: int, budget_s: float, done: set[tuple[str, str]]
         ) -> tuple[list[tuple[str, str, float]], list[str]]:
    """(runs to do with their estimates, lines about runs left out), exhaustive first."""
    runs, skipped, total = [], [], EST_RETIME_S
    for style in styles:
        for method in METHODS:
            if (style, method) in done:
                skipped.append(f"{style} {method}: already in runs.jsonl")
                continue
            est = estimate(style, method, top_k=top_k)
            if total + est > budget_s:
                skipped.append(f"{style} {method}: over the {budget_s:.0f} s budget")
                continue
            runs.append((style, method, est))
            total += est
    return runs, skipped


def run_one(style_name: str, method: str, *, top_k: int, size: str = "gpu",
            device: str = "cuda", do_bench: Any = None) -> dict[str, Any]:
    """One cold tuning in this process: decorate, build inputs, time the first call."""
    style = STYLES[style_name]
    configs = style.configs(size)
    benched: list[int] = []
    if do_bench is None:
        do_bench = (costtune.graph_bench if method == "costtune"
                    else triton.runtime.driver.active.get_benchmarker())

    def counting(fn: Any, quantiles: Any = None) -> Any:
        benched.append(1)
        return do_bench(fn, quantiles=quantiles)

    # As a program does: the kernel is decorated first (costtune starts loading its model
    # then), inputs come after, the first call tunes.
    if method == "costtune":
        tuner = costtune.autotune(configs, key=list(style.key), top_k=top_k,
                                  do_bench=counting)(style.kernel)
    else:
        tuner = triton.autotune(configs, key=list(style.key), do_bench=counting)(style.kernel)
    inputs = style.inputs(size, device=device)
    ref = style.reference(inputs)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sync()
        start = time.perf_counter()
        out = style.launch(tuner, inputs)
        sync()
        first_call_s = time.perf_counter() - start
    err = relative_error(out, ref)
    last = getattr(tuner.early_config_prune, "last", None)
    return {
        "style": style_name, "method": method, "first_call_s": first_call_s,
        "n_configs": len(configs), "n_benchmarked": len(benched),
        "chosen": str(tuner.best_config), "rel_err": err, "correct": err <= style.tolerance,
        "family": getattr(last, "family", None), "problem": getattr(last, "problem", None),
        "k": getattr(last, "k", None), "notes": [list(n) for n in getattr(last, "notes", [])],
        "prune_ms": getattr(last, "elapsed_ms", None),
        "precompiled": list(last.precompiled) if last and last.precompiled else None,
        "warnings": [str(w.message) for w in caught
                     if issubclass(w.category, costtune.CosttuneWarning)],
    }


def retime(chosen: dict[str, list[str]], *, rounds: int, reps: int) -> dict[str, Any]:
    """Every style's chosen configs (by ``str(config)``) timed side by side in this process,
    interleaved over ``rounds`` shuffled passes, beside the torch op; medians in ms."""
    rng = random.Random(0)
    out: dict[str, Any] = {}
    for style_name, keys in chosen.items():
        style = STYLES[style_name]
        by_key = {str(c): c for c in style.configs("gpu")}
        inputs = style.inputs("gpu", device="cuda")
        calls = {}
        for key in keys:
            single = triton.autotune([by_key[key]], key=[])(style.kernel)
            calls[key] = (lambda s=single, st=style, x=inputs: st.launch(s, x))
            calls[key]()  # compile before any timing
        calls["torch"] = lambda st=style, x=inputs: st.torch_op(x)
        torch.cuda.synchronize()
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(rounds):
            for key in rng.sample(list(calls), len(calls)):
                times[key].append(float(costtune.graph_bench(calls[key], reps=reps)))
        out[style_name] = {k: {"ms": statistics.median(v),
                               "spread": (max(v) - min(v)) / statistics.median(v)}
                           for k, v in times.items()}
    return out


def child(cmd: list[str], *, timeout_s: float, env: dict[str, str]) -> dict[str, Any]:
    from harness import run_child  # experiments/ is on sys.path (above)

    return run_child(cmd, env=env, timeout_s=timeout_s, tail=1200)


def child_env(tmp: str) -> dict[str, str]:
    from harness import fresh_env

    return fresh_env(tmp)


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_report(out: Path, runs: list[dict[str, Any]], timing: dict[str, Any] | None,
                 env: dict[str, Any]) -> Path:
    lines = ["# User kernels on the H200: costtune vs exhaustive triton.autotune (issue 17)",
             "", f"- GPU {env['gpu']}; torch {env['torch']}, triton {env['triton']}, "
             f"costtune {env['costtune']} at commit {env['commit']}; {env['date']}",
             f"- Command: `{env['command']}`", "- Each tuning cold, in a fresh process with "
             "a fresh Triton cache; re-timing of the chosen configs side by side in one "
             "process (CUDA-graph replay, L2 flushed).", "",
             "| style | configs | exhaustive first call s | costtune first call s | "
             "benchmarked (ex / ct) | exhaustive pick us | costtune pick us | ct speed vs ex "
             "| torch us | costtune read as | notes |", "|" + "---|" * 11]
    by = {(r["style"], r["method"]): r for r in runs if r.get("status") == "ok"}
    for style in dict.fromkeys(r["style"] for r in runs):
        ex, ct = by.get((style, "exhaustive")), by.get((style, "costtune"))
        t = (timing or {}).get(style, {})
        us = {m: t.get(r["chosen"], {}).get("ms", math.nan) * 1e3 if r else math.nan
              for m, r in (("ex", ex), ("ct", ct))}
        ratio = us["ex"] / us["ct"] if us["ct"] else math.nan
        read = f"{ct['family']} {ct['problem']} k={ct['k']}" if ct else "-"
        notes = "; ".join(f"[{c}] {m}" for c, m in (ct or {}).get("notes", [])) or "none"
        cell = lambda r, key, f: (f.format(r[key]) if r else "failed")  # noqa: E731
        lines.append(f"| {style} | {(ex or ct or {}).get('n_configs', '?')} | "
                     f"{cell(ex, 'first_call_s', '{:.1f}')} | "
                     f"{cell(ct, 'first_call_s', '{:.1f}')} | "
                     f"{cell(ex, 'n_benchmarked', '{}')} / {cell(ct, 'n_benchmarked', '{}')} | "
                     f"{us['ex']:.1f} | {us['ct']:.1f} | {ratio:.3f} | "
                     f"{t.get('torch', {}).get('ms', math.nan) * 1e3:.1f} | {read} | {notes} |")
    bad = [r for r in runs if r.get("status") != "ok" or not r.get("correct", True)]
    lines += ["", "Failed or wrong runs: " + ("none" if not bad else "; ".join(
        f"{r['style']} {r['method']}: {r.get('status')} {r.get('error', '')[-200:]}"
        f"{'' if r.get('correct', True) else ' (wrong result, rel_err ' + str(r['rel_err'])}"
        for r in bad)), "", "Chosen configs: " + "; ".join(
        f"{r['style']} {r['method']}: {r['chosen']}" for r in runs if r.get("status") == "ok")]
    path = out / "user_kernels_h200.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def cpu_check(styles: list[str], *, top_k: int) -> list[dict[str, Any]]:
    """Each style at its tiny CPU shape under the interpreter, both methods, in this process
    (a host-clock do_bench): the kernels' results and the benchmark counts."""
    def bench(fn: Any, quantiles: Any = None) -> list[float]:
        start = time.perf_counter()
        fn()
        ms = (time.perf_counter() - start) * 1e3
        return [ms, ms, ms]

    results = []
    for style in styles:
        for method in METHODS:
            res = run_one(style, method, top_k=top_k, size="cpu", device="cpu", do_bench=bench)
            print(f"  {style:22s} {method:10s} benchmarked {res['n_benchmarked']:2d} of "
                  f"{res['n_configs']:2d}  rel_err {res['rel_err']:.1e}  "
                  f"{'ok' if res['correct'] else 'WRONG'}  {res['family']} {res['problem']}")
            results.append(res)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get(
        "OUT") else ROOT / "experiments" / "results" / "user_kernels_h200")
    ap.add_argument("--styles", default=",".join(STYLES))
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=480.0, help="planned seconds in all")
    ap.add_argument("--deadline-s", type=float, default=560.0, help="no run ends later")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--resume", action="store_true", help="keep the ok runs of runs.jsonl")
    ap.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    ap.add_argument("--cpu-check", action="store_true",
                    help="tiny shapes under TRITON_INTERPRET=1, in this process")
    ap.add_argument("--run-one", nargs=2, metavar=("STYLE", "METHOD"), help=argparse.SUPPRESS)
    ap.add_argument("--retime", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    styles = [s for s in args.styles.split(",") if s]
    unknown = sorted(set(styles) - set(STYLES))
    if unknown:
        ap.error(f"unknown styles {unknown}; known: {list(STYLES)}")
    if args.run_one:
        print("RESULT " + json.dumps(run_one(*args.run_one, top_k=args.top_k), default=str))
        return 0
    if args.retime:
        print("RESULT " + json.dumps(retime(json.loads(args.retime), rounds=args.rounds,
                                            reps=args.reps)))
        return 0
    env = provenance()
    print("provenance: " + json.dumps(env))
    if args.cpu_check:
        results = cpu_check(styles, top_k=min(args.top_k, 2))
        return 0 if all(r["correct"] for r in results) else 1
    return drive(args, styles, env)


def drive(args: argparse.Namespace, styles: list[str], env: dict[str, Any]) -> int:
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "runs.jsonl"
    done = [r for r in load_jsonl(log) if r.get("status") == "ok"] if args.resume else []
    runs, skipped = plan(styles, top_k=args.top_k, budget_s=args.budget_s,
                         done={(r["style"], r["method"]) for r in done})
    print(f"plan: {len(runs)} cold runs, ~{sum(e for *_, e in runs) + EST_RETIME_S:.0f} s "
          f"with the re-timing, budget {args.budget_s:.0f} s")
    for style, method, est in runs:
        n = len(STYLES[style].configs("gpu"))
        print(f"  {style:22s} {method:10s} {n:3d} configs ~{est:4.0f} s  problem "
              f"{STYLES[style].gpu_problem}")
    for line in skipped:
        print(f"  skip {line}")
    if args.dry_run:
        return 0
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (use --dry-run or --cpu-check here)", file=sys.stderr)
        return 2
    results = list(done)
    for style, method, _ in runs:
        left = args.deadline_s - (time.perf_counter() - start) - EST_RETIME_S
        if left < 20:
            print(f"{style} {method}: skipped, deadline")
            continue
        with tempfile.TemporaryDirectory(prefix="ct-users-") as tmp:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--run-one", style, method,
                   "--top-k", str(args.top_k)]
            res = {"style": style, "method": method,
                   **child(cmd, timeout_s=left, env=child_env(tmp)), "env": env}
        with log.open("a") as f:
            f.write(json.dumps(res, default=str) + "\n")
        results.append(res)
        print(f"{style} {method}: {res['status']} " + (
            f"first call {res['first_call_s']:.1f} s, benchmarked {res['n_benchmarked']}, "
            f"chosen {res['chosen']}, rel_err {res['rel_err']:.1e}"
            if res["status"] == "ok" else res.get("error", "")[-300:]), flush=True)
    chosen: dict[str, list[str]] = {}
    for r in results:
        if r.get("status") == "ok":
            chosen.setdefault(r["style"], [])
            if r["chosen"] not in chosen[r["style"]]:
                chosen[r["style"]].append(r["chosen"])
    timing = None
    left = args.deadline_s - (time.perf_counter() - start)
    if chosen and left > 15:
        with tempfile.TemporaryDirectory(prefix="ct-users-") as tmp:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--retime",
                   json.dumps(chosen), "--rounds", str(args.rounds), "--reps", str(args.reps)]
            res = child(cmd, timeout_s=left, env=child_env(tmp))
        with (args.out / "retime.jsonl").open("a") as f:
            f.write(json.dumps({"chosen": chosen, **res, "env": env}, default=str) + "\n")
        timing = {k: v for k, v in res.items() if k in STYLES} if res["status"] == "ok" else None
        print(f"retime: {res['status']} {res.get('error', '')[-300:]}")
    path = write_report(args.out, results, timing, env)
    print(path.read_text())
    print(f"wall {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
