"""Does Dask collection scale across GPUs? The same workloads collected on 1 and on N GPUs.

Each run is a fresh ``collect_dask`` (its own LocalCluster, one worker per GPU), a fresh store and
a fresh Triton cache, same seed and configs. Reports the speed-up (goal >= 1.8x on 2 GPUs) and
whether the two runs' rows agree within the measured noise: per-config time ratio, raw and
normalised by each run's reference op, against the dataset's second-pass spread (p90 1.7%,
datasets/h200/DATASHEET.md). Writes experiments/results/dask_scaling.{md,csv}.

    python experiments/dask_scaling.py --gpus 2                 # on a machine with >= 2 GPUs
    python experiments/dask_scaling.py --dry-run                # CPU plumbing check, see below

``--dry-run`` replays recorded rows with an artificial sleep per task: it checks the plumbing
only, writes to a temp folder, and its numbers are never a result.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shlex
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

import costtune
from costtune.collect import suite_workloads
from costtune.collect.dask import collect_dask
from costtune.env import cpu_topology, host_cpu_times, host_cpu_use

RESULTS = Path(__file__).resolve().parent / "results"
DATASET = Path(__file__).resolve().parents[1] / "datasets" / "h200"
CITED_RETIME_P90 = 0.017  # DATASHEET.md, "Noise": second pass vs first, p90
GOAL = 1.8


def run(workloads, n_gpus: int, args, work: Path, *, tag: str = "",
        cache_of: str | None = None, order: str = "spread") -> tuple[pd.DataFrame, dict, dict]:
    """One collection on ``n_gpus``; ``tag`` names a repeat's store, ``cache_of`` the earlier
    run whose Triton cache it loads its kernels from (its timings do not depend on that),
    ``order`` is collect_dask's ("given": in the order of ``workloads``)."""
    store = costtune.Store(work / f"store_{n_gpus}gpu{tag}")
    kw = {"gpus": list(range(n_gpus)), "max_configs": args.max_configs, "seed": args.seed,
          "reps": args.reps, "order": order,
          "meta": {"experiment": "dask_scaling", "n_gpus": n_gpus,
                   "cpu_per_gpu": args.cpu_per_gpu, "order": order}}
    if args.cpu_per_gpu == "fixed" and not args.dry_run:
        # Every GPU worker compiles with the same cores in both runs, as on a cluster where
        # each GPU brings its own; "shared" lets collect_dask split this host's cores.
        kw["compile_workers"] = fixed_compile_workers(args)
    if args.dry_run:
        kw.update(runner="replay", replay_dataset=DATASET, replay_delay_s=args.dry_sleep)
    elif args.triton_cache == "warm":  # both runs load every kernel from one filled cache
        kw.update(worker_env={"TRITON_CACHE_DIR": str(work / "triton_shared")})
    else:  # a cold cache per run: both runs pay the same compiles
        cache = cache_of or f"{n_gpus}gpu{tag}"
        kw.update(worker_env={"TRITON_CACHE_DIR": str(work / f"triton_{cache}")})
    before = host_cpu_times()
    summary = collect_dask(workloads, store, **kw)
    summary["host_cpu"] = host_cpu_use(before, host_cpu_times())
    metas = [store.part_meta(p) for p in store.parts()]
    device = {m["workload"]: m.get("cuda_visible_devices") for m in metas}
    rows = store.load()
    per_task = {k: {m["workload"]: m.get(k) for m in metas}
                for k in ("task_wall_s", "task_env_s", "task_clock_wait_s")}
    rows = rows.assign(gpu_index=rows["workload"].map(device),
                       **{k: rows["workload"].map(v) for k, v in per_task.items()})
    return rows, summary, metas[0] if metas else {}


def agreement(one: pd.DataFrame, many: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Per-config ratios many/one (raw, and over each run's reference-op time) and per-workload
    best-config regret: how much slower, in run one, the config run many picks is."""
    cols = ["workload", "config", "status", "time_ms", "ref_time_ms"]
    both = one[cols].merge(many[cols + ["gpu_index"]], on=["workload", "config"],
                           suffixes=("_1", "_n"))
    status_mismatch = int((both["status_1"] != both["status_n"]).sum())
    ok = both[(both["status_1"] == "ok") & (both["status_n"] == "ok")].copy()
    ok["ratio"] = ok["time_ms_n"] / ok["time_ms_1"]
    if ok["ref_time_ms_1"].notna().all() and ok["ref_time_ms_n"].notna().all():
        ok["ratio_rel"] = ok["ratio"] / (ok["ref_time_ms_n"] / ok["ref_time_ms_1"])
    else:  # replayed rows of the dry run may lack the reference op
        ok["ratio_rel"] = ok["ratio"]
    per = []
    for wid, g in ok.groupby("workload"):
        pick = g.loc[g["time_ms_n"].idxmin()]
        per.append({"workload": wid, "configs": len(g), "gpu_index_n": pick["gpu_index"],
                    "median_ratio": g["ratio"].median(),
                    "p90_abs_dev_rel": (g["ratio_rel"] - 1).abs().quantile(0.9),
                    "regret_of_pick": pick["time_ms_1"] / g["time_ms_1"].min() - 1,
                    "same_best": pick["config"] == g.loc[g["time_ms_1"].idxmin(), "config"]})
    dev, dev_rel = (ok["ratio"] - 1).abs(), (ok["ratio_rel"] - 1).abs()
    stats = {"configs_compared": len(ok), "status_mismatch": status_mismatch,
             "p50_abs_dev": dev.median(), "p90_abs_dev": dev.quantile(0.9),
             "p50_abs_dev_rel": dev_rel.median(), "p90_abs_dev_rel": dev_rel.quantile(0.9),
             "median_ratio_by_gpu": ok.groupby("gpu_index")["ratio"].median().to_dict()}
    return pd.DataFrame(per), stats


def own_noise(runs: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, dict[str, float]]:
    """Every pair of runs: |ln(t_a/t_b)| over their common OK configs (p50, p90); and each
    run's own per-config noise, from the pairs' robust variances ((p90 / 1.645)^2 = s_a^2 +
    s_b^2, solved by least squares over all pairs: the three-cornered hat of clock metrology).
    A run whose own noise stands out is the noisy one, whichever run it is compared with."""
    names = list(runs)
    logs = {}
    for name, rows in runs.items():
        ok = rows[rows["status"] == "ok"]
        logs[name] = np.log(ok.set_index(["workload", "config"])["time_ms"])
    pairs, design, target = [], [], []
    for a, b in itertools.combinations(names, 2):
        d = (logs[a] - logs[b]).dropna().abs()
        pairs.append({"run_a": a, "run_b": b, "configs": len(d), "p50_abs_log": d.median(),
                      "p90_abs_log": d.quantile(0.9)})
        design.append([float(n in (a, b)) for n in names])
        target.append((d.quantile(0.9) / 1.645) ** 2)
    own = {}
    if len(names) >= 3:
        var = np.linalg.lstsq(np.array(design), np.array(target), rcond=None)[0]
        own = {n: float(np.sign(v) * np.sqrt(abs(v))) for n, v in zip(names, var, strict=True)}
    return pd.DataFrame(pairs), own


def _ready(barrier) -> int:
    barrier.wait(timeout=120)  # returns once all k processes hold one task each
    return os.getpid()


def _spin(start_at: float, seconds: float) -> float:
    """Pure-Python work from ``start_at`` for ``seconds`` (wall); returns loops per second."""
    while time.time() < start_at:
        time.sleep(0.001)
    n, x, end = 0, 0, start_at + seconds
    while time.time() < end:
        for i in range(1000):
            x ^= i * i
        n += 1
    return n / seconds


def cpu_probe(levels: list[int], seconds: float = 3.0) -> pd.DataFrame:
    """The host's CPU throughput with 1, ..., k busy processes at once: each level runs k
    spawned processes of the same pure-Python loop for ``seconds``, started together. A
    process's rate falling with k is the contention (shared cores, another tenant) that slows
    every CPU-side part of a task when more GPU workers and their compile pools run. The first
    level runs again at the end (``repeat``) and rates are relative to the mean of its two
    runs, so a drifting host shows as two different baselines."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    out = []
    ctx = multiprocessing.get_context("spawn")
    for i, k in enumerate([*levels, levels[0]]):
        with ctx.Manager() as manager, ProcessPoolExecutor(k, mp_context=ctx) as pool:
            # every process up, this module imported, before the clock starts
            pids = set(pool.map(_ready, [manager.Barrier(k)] * k))
            if len(pids) != k:
                raise RuntimeError(f"cpu_probe: {len(pids)} of {k} processes came up")
            start_at = time.time() + 0.5
            rates = list(pool.map(_spin, [start_at] * k, [seconds] * k))
        out.append({"processes": k, "repeat": i == len(levels),
                    "per_process": float(np.mean(rates)), "slowest": float(np.min(rates))})
    df = pd.DataFrame(out)
    base = df["per_process"].iloc[[0, -1]].mean()
    return df.assign(per_process_vs_first=df["per_process"] / base,
                     slowest_vs_first=df["slowest"] / base,
                     total_vs_first=df["per_process"] * df["processes"] / base)


def fixed_compile_workers(args) -> int:
    """Compile processes per GPU worker in both runs: --compile-workers, else this host's
    usable cores / --gpus."""
    return args.compile_workers or max(1, len(os.sched_getaffinity(0)) // args.gpus)


def wall_split(rows: pd.DataFrame) -> dict[str, float]:
    """Summed per-workload wall seconds on the workers: the whole task; its setup (inputs,
    reference output), compiling, timing, the re-time pass; environment and clock reads;
    and the rest of the task."""
    per = rows.drop_duplicates("workload")

    def total(column: str) -> float:
        if column not in per:
            return float("nan")
        return float(pd.to_numeric(per[column], errors="coerce").sum(min_count=1))

    out = {"task": total("task_wall_s"), "setup": total("workload_setup_wall_s"),
           "compile": total("workload_compile_wall_s"),
           "measure": total("workload_measure_wall_s"), "env": total("task_env_s"),
           "clock": total("task_clock_wait_s")}
    out["retime"] = total("workload_wall_s") - out["compile"] - out["measure"]
    parts = [out[k] for k in ("setup", "compile", "measure", "retime", "env", "clock")]
    out["other"] = out["task"] - sum(p for p in parts if p == p)
    return out


def fill_cache(workloads, args, work: Path) -> float:
    """--triton-cache warm: compile every workload's configs once into the cache both runs
    share (all of this host's cores); returns the seconds it took."""
    from costtune.build.pool import shutdown_pool
    from costtune.build.workload import precompile
    from costtune.collect import workload_configs
    from costtune.kernels import get_family

    start = time.perf_counter()
    os.environ["TRITON_CACHE_DIR"] = str(work / "triton_shared")  # the pool inherits it
    cores = len(os.sched_getaffinity(0))
    for w in workloads:
        inputs = get_family(w.kernel).make_inputs(w.sizes, w.dtype)  # shapes only matter
        precompile(w, workload_configs(w, max_configs=args.max_configs, seed=args.seed),
                   inputs, workers=cores)
    shutdown_pool(wait=True)
    return time.perf_counter() - start


def dataset_retime_p90() -> float | None:
    if not DATASET.exists():
        return None
    df = costtune.load_dataset(DATASET)
    ok = df[(df["status"] == "ok") & df["retime_ms"].notna()]
    return float((ok["retime_ms"] / ok["time_ms"] - 1).abs().quantile(0.9))


def report(args, workloads, runs, per: pd.DataFrame, stats: dict, retime_p90,
           warm_s: float = float("nan"), between: dict | None = None,
           run_noise: tuple[pd.DataFrame, dict[str, float]] | None = None,
           other_order: dict | None = None, host: dict[str, dict] | None = None,
           probe: pd.DataFrame | None = None) -> str:
    (rows1, s1, meta1), (rows_n, sn, meta_n) = runs
    split1, split_n = wall_split(rows1), wall_split(rows_n)
    topo = cpu_topology()
    t1, tn = s1["seconds"] - s1["startup_s"], sn["seconds"] - sn["startup_s"]
    speedup = t1 / tn if tn else float("nan")
    noise = retime_p90 if retime_p90 is not None else CITED_RETIME_P90
    within = stats["p90_abs_dev_rel"] <= noise
    if between is not None:  # two 1-GPU runs measured the noise between runs directly
        within_runs = stats["p90_abs_dev_rel"] <= between["p90_abs_dev_rel"]  # NaN: outside
        second = ("replaying the same recorded rows" if args.dry_run else
                  "its kernels loaded from the shared Triton cache, as both runs"
                  if args.triton_cache == "warm" else
                  "its kernels loaded from the first 1-GPU run's Triton cache, so it timed "
                  "with no compiles running beside it, the first run with them")
    lines = []
    if args.dry_run:
        lines += ["# PLUMBING CHECK (dry run) - not a measurement", "",
                  f"Replayed rows from {DATASET} with an artificial {args.dry_sleep} s sleep per "
                  "task on CPU workers. The speed-up below is the sleep divided over workers; "
                  "the rows agree because they are the same recorded rows. Never cite these.",
                  ""]
    else:
        lines += [f"# Dask collection: 1 vs {args.gpus} GPUs", ""]
    lines += [
        f"- command: `{shlex.join(['python', *sys.argv])}`",
        f"- date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}; host "
        f"{meta_n.get('hostname')}; GPU {meta_n.get('gpu')}; driver {meta_n.get('driver')}; "
        f"torch {meta_n.get('torch')}; triton {meta_n.get('triton')}; costtune "
        f"{meta_n.get('costtune_commit') or '?'} (dirty: {meta_n.get('costtune_dirty')})",
        f"- workloads: {len(workloads)} ({', '.join(args.specs)}), max_configs "
        f"{args.max_configs}, reps {args.reps}, seed {args.seed}; runs in order 1 GPU, then "
        f"{args.gpus}; fresh store per run; "
        + ("fresh Triton cache per run (both pay every compile)" if args.triton_cache == "cold"
           else f"one Triton cache filled before the runs ({warm_s:.0f} s on all cores), so "
           "both runs load every kernel from it")
        + "; compile workers per GPU worker: "
        f"{meta1.get('compile_workers')} (1 GPU) / {meta_n.get('compile_workers')} "
        f"({args.gpus} GPUs) ({args.cpu_per_gpu} CPU per GPU: "
        + ("each GPU worker compiles on the same number of cores in both runs, as on a "
           "cluster where every GPU brings its cores)" if args.cpu_per_gpu == "fixed" else
           "the host's cores are split among the GPU workers, so one GPU gets them all)"),
        "",
        f"- CPU: {topo['logical']} usable logical CPUs on {topo['physical']} physical cores "
        "(sysfs topology as this host reports it)",
        "",
        "| run | workloads | configs | failed workloads | cluster start s | collection s "
        "| idle worker s | sum task wall s | setup | compile | measure | re-time | env reads "
        "| clock wait | rest of task |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(f"| {name} | {s['workloads']} | {s['configs']} | {len(s['failed_workloads'])} | "
          f"{s['startup_s']:.1f} | {t:.1f} | {n * t - sp['task']:.1f} | {sp['task']:.1f} | "
          + " | ".join(f"{sp[k]:.1f}" for k in ("setup", "compile", "measure", "retime",
                                                 "env", "clock", "other")) + " |"
          for name, n, s, t, sp in (("1 GPU", 1, s1, t1, split1),
                                    (f"{args.gpus} GPUs", args.gpus, sn, tn, split_n))),
        "",
        "Idle worker s: collection s x GPUs - sum task wall (scheduling, stragglers at the "
        "end, a worker's first-task imports are inside its task). Sum task wall: per workload, "
        "the whole task on its worker, split into: setup (inputs, reference output), compile "
        "(waiting for its configs to compile), measure (timing them), re-time (the second "
        "pass over 5% of them), env reads (versions, git, driver), clock wait (nvidia-smi SM "
        "clock reads not hidden behind work) and the rest (task start, CUDA init on a "
        "worker's first task, returning rows). A GPU worker does one part after the other, "
        "so with compiles bound by the CPU, more GPUs help only as far as the CPU scales.",
        "",
        *host_lines(host, probe),
        f"**Speed-up {speedup:.2f}x** on collection time (goal >= {GOAL}x: "
        f"{'met' if speedup >= GOAL else 'NOT met'}); end to end with cluster start "
        f"{s1['seconds'] / sn['seconds']:.2f}x.",
        "",
        f"Agreement over {stats['configs_compared']} OK configs (status mismatches: "
        f"{stats['status_mismatch']}): |t_{args.gpus}/t_1 - 1| median "
        f"{stats['p50_abs_dev']:.2%}, p90 {stats['p90_abs_dev']:.2%}; over each run's "
        f"reference op: median {stats['p50_abs_dev_rel']:.2%}, p90 "
        f"{stats['p90_abs_dev_rel']:.2%}. Noise: the dataset's second-pass p90 spread "
        f"{noise:.2%} (computed here; DATASHEET.md cites {CITED_RETIME_P90:.1%}) -> "
        f"{'within' if within else 'OUTSIDE'} the measured noise.",
        *([] if between is None else [
            "",
            f"Between-run noise: a second 1-GPU run of the same workloads after the "
            f"{args.gpus}-GPU one ({second}) against the first: |t_1b/t_1a - 1| median "
            f"{between['p50_abs_dev']:.2%}, p90 {between['p90_abs_dev']:.2%}; over each run's "
            f"reference op: median {between['p50_abs_dev_rel']:.2%}, p90 "
            f"{between['p90_abs_dev_rel']:.2%} ({between['status_mismatch']} status "
            f"mismatches). The {args.gpus}-GPU rows against the first 1-GPU run (p90 "
            f"{stats['p90_abs_dev_rel']:.2%} over the reference op) are "
            f"**{'within' if within_runs else 'OUTSIDE'}** the noise between two 1-GPU runs."]),
        *([] if other_order is None else [
            "",
            "Between-run noise with another queue: a 1-GPU run that measured the workloads in "
            "a seeded shuffled order (kernels from the first run's cache) against the first: "
            f"|t_1s/t_1a - 1| median {other_order['p50_abs_dev']:.2%}, p90 "
            f"{other_order['p90_abs_dev']:.2%}; over each run's reference op: median "
            f"{other_order['p50_abs_dev_rel']:.2%}, p90 {other_order['p90_abs_dev_rel']:.2%}. "
            f"The {args.gpus}-GPU rows (p90 {stats['p90_abs_dev_rel']:.2%}) are **"
            + ("within" if stats["p90_abs_dev_rel"] <= other_order["p90_abs_dev_rel"]
               else "OUTSIDE")
            + "** the noise between two 1-GPU runs whose worker measured different "
            "sequences (what any re-collection with another queue, split or resume sees).",
            ""]),
        f"Median raw ratio by GPU of the {args.gpus}-GPU run: "
        + ", ".join(f"GPU {k}: {v:.4f}" for k, v in stats["median_ratio_by_gpu"].items()),
        f"Best config: the same in {int(per['same_best'].sum())}/{len(per)} workloads; the "
        f"{args.gpus}-GPU run's pick is slower in the 1-GPU run by median "
        f"{per['regret_of_pick'].median():.2%}, max {per['regret_of_pick'].max():.2%}.",
    ]
    if run_noise is not None and run_noise[1]:
        pairs, own = run_noise
        lines += [
            "", "Every run against every other (|ln(t_a/t_b)| over common OK configs) and each "
            "run's own per-config noise solved from those pairs (least squares over "
            "s_a^2 + s_b^2 = (p90 / 1.645)^2; the three-cornered hat): a run whose own noise "
            "stands out is the noisy one, whichever run it is compared with.", "",
            "| run a | run b | configs | p50 | p90 |", "|---|---|---|---|---|",
            *(f"| {r.run_a} | {r.run_b} | {r.configs} | {r.p50_abs_log:.2%} | "
              f"{r.p90_abs_log:.2%} |" for r in pairs.itertuples()), "",
            "Own noise (SD of ln t per config): "
            + ", ".join(f"{k} {v:.2%}" for k, v in own.items()) + "."]
    for name, s in (("1 GPU", s1), (f"{args.gpus} GPUs", sn)):
        for text in s["errors"] + s["warnings"]:
            lines.append(f"- {name}: {text}")
    return "\n".join(lines) + "\n"


def host_lines(host: dict[str, dict] | None, probe: pd.DataFrame | None) -> list[str]:
    """The report's host CPU tables: what the CPUs did during each run, and the probe."""
    lines = []
    if host and any(host.values()):
        lines += [
            "Host CPU during each run (/proc/stat from cluster start to the last row): busy "
            "CPUs on average, of which niced (the compile pools run at nice 5), and steal (CPU "
            "time this machine wanted but the hypervisor gave to something else).", "",
            "| run | wall s | busy CPUs | of which niced | steal |", "|---|---|---|---|---|",
            *(f"| {k} | {u['wall_s']:.1f} | {u['busy_cpus']:.1f} | {u['niced_cpus']:.1f} | "
              f"{u['steal_share']:.1%} |" for k, u in host.items() if u), ""]
    if probe is not None and len(probe):
        lines += [
            "Host CPU probe before the runs (k spawned processes of one pure-Python loop, "
            "started together; rates relative to one process alone, the mean of a run first and "
            "one last): a rate that falls with k "
            "is contention every CPU-side part of a task meets when more workers run.", "",
            "| processes | per-process rate | slowest process | total |", "|---|---|---|---|",
            *(f"| {r.processes}{' (again)' if r.repeat else ''} | "
              f"{r.per_process_vs_first:.2f} | {r.slowest_vs_first:.2f} | "
              f"{r.total_vs_first:.1f} |" for r in probe.itertuples()), ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("specs", nargs="*", default=None, help="kernel:suite pairs")
    ap.add_argument("--gpus", type=int, default=2, help="GPUs of the multi-GPU run")
    ap.add_argument("--max-configs", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-workloads", type=int, default=None, help="first N per spec")
    ap.add_argument("--out", type=Path, default=None, help="results folder")
    ap.add_argument("--cpu-per-gpu", choices=("fixed", "shared"), default="fixed",
                    help="fixed: each GPU worker compiles on cores/--gpus processes in both "
                    "runs; shared: collect_dask's default split of this host's cores")
    ap.add_argument("--compile-workers", type=int, default=None,
                    help="with --cpu-per-gpu fixed: compile processes per GPU worker (default "
                    "usable cores / --gpus)")
    ap.add_argument("--triton-cache", choices=("cold", "warm"), default="cold",
                    help="cold: a fresh Triton cache per run; warm: one cache filled before "
                    "both runs (GPU-bound collection: what scales with GPUs alone)")
    ap.add_argument("--noise-run", action="store_true",
                    help="then a second 1-GPU run: the noise between two runs, measured "
                    "(the same as --extra-runs 1)")
    ap.add_argument("--extra-runs", nargs="*", default=[],
                    help="GPU counts of further runs after the first two, each loading its "
                    "kernels from the first 1-GPU run's Triton cache (e.g. 1 2: a warm 1-GPU "
                    "and a warm 2-GPU run); a count ending in s measures the workloads in a "
                    "seeded shuffled order (1s: the noise between two 1-GPU runs whose "
                    "workers measured different sequences); with three or more runs the "
                    "report solves each run's own noise")
    ap.add_argument("--cpu-probe", action="store_true",
                    help="first measure the host's per-process CPU rate with 1, one GPU "
                    "worker's, all GPU workers' and all cores' worth of busy processes")
    ap.add_argument("--dry-run", action="store_true", help="replay + sleep on CPU (plumbing)")
    ap.add_argument("--dry-sleep", type=float, default=1.0, help="seconds per replayed task")
    args = ap.parse_args()
    if args.dry_run:
        args.specs = args.specs or ["softmax:test"]
        args.max_configs, args.max_workloads = 8, args.max_workloads or 8
        out = args.out or Path(tempfile.mkdtemp(prefix="dask_scaling_dryrun_"))
    else:
        args.specs = args.specs or ["gemm:test", "softmax:test"]
        out = args.out or RESULTS
    workloads = []
    for spec in args.specs:
        kernel, suite = spec.split(":")
        workloads += suite_workloads(kernel, suite)[:args.max_workloads]
    out.mkdir(parents=True, exist_ok=True)
    name = "dask_scaling_dryrun" if args.dry_run else "dask_scaling"
    if args.cpu_per_gpu == "shared":
        name += "_shared_cpu"
    elif args.compile_workers:
        name += f"_cw{args.compile_workers}"
    if args.triton_cache == "warm":
        name += "_warm"

    def save(rows: pd.DataFrame, label: str) -> None:  # each run's rows as soon as it ends
        rows.to_parquet(out / f"{name}_rows_{label}.parquet", index=False)

    probe = None
    if args.cpu_probe:
        per_gpu = fixed_compile_workers(args) + 1  # a GPU worker and its compile pool
        cores = len(os.sched_getaffinity(0))
        probe = cpu_probe(sorted({1, per_gpu, args.gpus * per_gpu, cores}))
        probe.to_csv(out / f"{name}_cpu_probe.csv", index=False)
        print(probe.to_string(index=False), flush=True)
    with tempfile.TemporaryDirectory(prefix="dask_scaling_") as tmp:
        warm_s = float("nan")
        if args.triton_cache == "warm" and not args.dry_run:
            warm_s = fill_cache(workloads, args, Path(tmp))
            print(f"filled the shared Triton cache in {warm_s:.1f} s", flush=True)
        runs = []
        for n in (1, args.gpus):
            t = time.perf_counter()
            runs.append(run(workloads, n, args, Path(tmp)))
            save(runs[-1][0], f"{n}gpu")
            print(f"{n} GPU(s): {time.perf_counter() - t:.1f} s, {runs[-1][1]}", flush=True)
        if args.noise_run and "1" not in args.extra_runs:
            args.extra_runs = ["1", *args.extra_runs]
        extra: dict[str, tuple] = {}  # label -> run: "1gpu_b", "2gpu_b", "1gpu_shuffled", ...
        seen: dict[str, int] = {}  # extra runs so far per spec
        for spec in args.extra_runs:
            n, shuffled = int(spec.rstrip("s")), spec.endswith("s")
            same = seen[spec] = seen.get(spec, 0) + 1
            tag = (f"_shuffled{same if same > 1 else ''}" if shuffled
                   else "_" + "bcdefgh"[same - 1])
            todo = list(workloads)
            if shuffled:
                random.Random(args.seed + len(extra) + 1).shuffle(todo)
            t = time.perf_counter()
            extra[f"{n}gpu{tag}"] = run(todo, n, args, Path(tmp), tag=tag, cache_of="1gpu",
                                        order="given" if shuffled else "spread")
            save(extra[f"{n}gpu{tag}"][0], f"{n}gpu{tag}")
            print(f"{n} GPU(s) again ({tag[1:]}): {time.perf_counter() - t:.1f} s, "
                  f"{extra[f'{n}gpu{tag}'][1]}", flush=True)
        between = (agreement(runs[0][0], extra["1gpu_b"][0])[1] if "1gpu_b" in extra
                   else None)
        other_order = (agreement(runs[0][0], extra["1gpu_shuffled"][0])[1]
                       if "1gpu_shuffled" in extra else None)
    (one, _, _), (many, _, _) = runs
    per, stats = agreement(one, many)
    every = {"1gpu": one, f"{args.gpus}gpu": many, **{k: v[0] for k, v in extra.items()}}
    text = report(args, workloads, runs, per, stats, dataset_retime_p90(), warm_s, between,
                  own_noise(every), other_order,
                  {"1 GPU": runs[0][1].get("host_cpu"),
                   f"{args.gpus} GPUs": runs[1][1].get("host_cpu"),
                   **{k: v[1].get("host_cpu") for k, v in extra.items()}}, probe)
    (out / f"{name}.md").write_text(text)
    meta = runs[1][2]
    per.assign(dry_run=args.dry_run, n_gpus=args.gpus, gpu=meta.get("gpu"),
               costtune_commit=meta.get("costtune_commit"), date=meta.get("date")
               ).to_csv(out / f"{name}.csv", index=False)
    print(text)
    print(f"wrote {out / name}.md and .csv")


if __name__ == "__main__":
    main()
