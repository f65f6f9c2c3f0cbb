"""The words and tables of one Dask experiment's section of results/dask_scaling.md."""

from __future__ import annotations

from typing import Any

import pandas as pd

from experiments import harness

SPLIT = (("setup", "setup"), ("compile", "compile"), ("measure", "measure"),
         ("retime", "re-time"), ("env", "env reads"), ("clock", "clock wait"),
         ("other", "rest of task"))


def header_lines(fx: dict[str, Any]) -> list[str]:
    exp, (r1, rn) = fx["exp"], fx["runs"][:2]
    a, m1, mn = exp["args"], r1["meta"], rn["meta"]
    cache = ("fresh Triton cache per run (both pay every compile)" if a["triton_cache"] == "cold"
             else f"one Triton cache filled before the runs ({exp['warm_s']:.0f} s on all "
             "cores), so both runs load every kernel from it")
    cpu = ("each GPU worker compiles on the same number of cores in both runs, as on a "
           "cluster where every GPU brings its cores)" if a["cpu_per_gpu"] == "fixed" else
           "the host's cores are split among the GPU workers, so one GPU gets them all)")
    topo = exp.get("cpu_topology") or {}
    return [
        f"- command: `{exp['command']}`",
        f"- date: {exp['date']}; host {mn.get('hostname')}; GPU {mn.get('gpu')}; driver "
        f"{mn.get('driver')}; torch {mn.get('torch')}; triton {mn.get('triton')}; costtune "
        f"{mn.get('costtune_commit') or '?'} (dirty: {mn.get('costtune_dirty')})",
        f"- workloads: {exp['workloads']} ({', '.join(a['specs'])}), max_configs "
        f"{a['max_configs']}, reps {a['reps']}, seed {a['seed']}; runs in order "
        + ", then ".join(r["label"] for r in fx["runs"]) + f"; fresh store per run; {cache}; "
        f"compile workers per GPU worker: {m1.get('compile_workers')} (1 GPU) / "
        f"{mn.get('compile_workers')} ({rn['n_gpus']} GPUs) ({a['cpu_per_gpu']} CPU per GPU: "
        + cpu,
        *([f"- CPU: {topo['logical']} usable logical CPUs on {topo['physical']} physical cores "
           "(sysfs topology as this host reports it)"] if topo else []),
        *([f"- source: {exp['source']}"] if exp.get("source") else [])]


def wall_table(fx: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for run, t in zip(fx["runs"][:2], fx["times"], strict=True):
        s, sp, n = run["summary"], fx["split"][run["label"]], run["n_gpus"]
        rows.append({"run": "1 GPU" if n == 1 else f"{n} GPUs", "workloads": s["workloads"],
                     "configs": s["configs"], "failed workloads": len(s["failed_workloads"]),
                     "cluster start s": s["startup_s"], "collection s": t,
                     # recorded experiments keep their report's idle figure (from unrounded
                     # task sums); otherwise collection s x GPUs - sum task wall
                     "idle worker s": sp.get("idle", n * t - sp["task"]),
                     "sum task wall s": sp["task"],
                     **{title: sp[key] for key, title in SPLIT}})
    return pd.DataFrame(rows)


def host_lines(host: dict[str, dict] | None, probe: pd.DataFrame | None) -> list[str]:
    """The host CPU tables: what the CPUs did during each run, and the probe."""
    lines = []
    if host and any(host.values()):
        use = pd.DataFrame([{"run": k, "wall s": f"{u['wall_s']:.1f}",
                             "busy CPUs": f"{u['busy_cpus']:.1f}",
                             "of which niced": f"{u['niced_cpus']:.1f}",
                             "steal": f"{u['steal_share']:.1%}"} for k, u in host.items() if u])
        lines += [
            "Host CPU during each run (/proc/stat from cluster start to the last row): busy "
            "CPUs on average, of which niced (the compile pools run at nice 5), and steal (CPU "
            "time this machine wanted but the hypervisor gave to something else).", "",
            harness.md_table(use, disable_numparse=True), ""]
    if probe is not None and len(probe):
        again = probe["repeat"] if "repeat" in probe else pd.Series(False, index=probe.index)
        slow = (probe["slowest_vs_first"] if "slowest_vs_first" in probe
                else probe["slowest"] / probe["per_process"].iloc[0])
        shown = pd.DataFrame({
            "processes": [f"{p}{' (again)' if r else ''}"
                          for p, r in zip(probe["processes"], again, strict=True)],
            "per-process rate": probe["per_process_vs_first"].map("{:.2f}".format),
            "slowest process": slow.map("{:.2f}".format),
            "total": probe["total_vs_first"].map("{:.1f}".format)})
        lines += [
            "Host CPU probe before the runs (k spawned processes of one pure-Python loop, "
            "started together; rates relative to one process alone"
            + (", the mean of a run first and one last" if again.any() else "")
            + "): a rate that falls with k is contention every CPU-side part of a task meets "
            "when more workers run.", "",
            harness.md_table(shown, disable_numparse=True), ""]
    return lines


def pct(d: dict[str, Any], key: str) -> str:
    return f"{d[key]:.2%}"


def noise_lines(fx: dict[str, Any], *, noise: float, cited: float, n: int) -> list[str]:
    stats, between, other = fx["stats"], fx["between"], fx["other_order"]
    within = stats["p90_abs_dev_rel"] <= noise
    a = fx["exp"]["args"]
    lines = [
        f"Agreement over {stats['configs_compared']} OK configs (status mismatches: "
        f"{stats['status_mismatch']}): |t_{n}/t_1 - 1| median {pct(stats, 'p50_abs_dev')}, "
        f"p90 {pct(stats, 'p90_abs_dev')}; over each run's reference op: median "
        f"{pct(stats, 'p50_abs_dev_rel')}, p90 {pct(stats, 'p90_abs_dev_rel')}. Noise: the "
        f"dataset's second-pass p90 spread {noise:.2%} (computed here; DATASHEET.md cites "
        f"{cited:.1%}) -> {'within' if within else 'OUTSIDE'} the measured noise."]
    if between is not None:
        second = ("replaying the same recorded rows" if a["dry_run"] else
                  "its kernels loaded from the shared Triton cache, as both runs"
                  if a["triton_cache"] == "warm" else
                  "its kernels loaded from the first 1-GPU run's Triton cache, so it timed "
                  "with no compiles running beside it, the first run with them")
        inside = stats["p90_abs_dev_rel"] <= between["p90_abs_dev_rel"]
        lines += ["", f"Between-run noise: a second 1-GPU run of the same workloads after the "
                  f"{n}-GPU one ({second}) against the first: |t_1b/t_1a - 1| median "
                  f"{pct(between, 'p50_abs_dev')}, p90 {pct(between, 'p90_abs_dev')}; over "
                  f"each run's reference op: median {pct(between, 'p50_abs_dev_rel')}, p90 "
                  f"{pct(between, 'p90_abs_dev_rel')} ({between['status_mismatch']} status "
                  f"mismatches). The {n}-GPU rows against the first 1-GPU run (p90 "
                  f"{pct(stats, 'p90_abs_dev_rel')} over the reference op) are "
                  f"**{'within' if inside else 'OUTSIDE'}** the noise between two 1-GPU runs."]
    if other is not None:
        inside = stats["p90_abs_dev_rel"] <= other["p90_abs_dev_rel"]
        lines += ["", "Between-run noise with another queue: a 1-GPU run that measured the "
                  "workloads in a seeded shuffled order (kernels from the first run's cache) "
                  f"against the first: |t_1s/t_1a - 1| median {pct(other, 'p50_abs_dev')}, p90 "
                  f"{pct(other, 'p90_abs_dev')}; over each run's reference op: median "
                  f"{pct(other, 'p50_abs_dev_rel')}, p90 {pct(other, 'p90_abs_dev_rel')}. The "
                  f"{n}-GPU rows (p90 {pct(stats, 'p90_abs_dev_rel')}) are "
                  f"**{'within' if inside else 'OUTSIDE'}** the noise between two 1-GPU runs "
                  "whose worker measured different sequences (what any re-collection with "
                  "another queue, split or resume sees)."]
    return lines


def pick_lines(fx: dict[str, Any], n: int) -> list[str]:
    per, stats = fx["per"], fx["stats"]
    if per is not None:
        best = {"same": int(per["same_best"].sum()), "of": len(per),
                "regret_median": per["regret_of_pick"].median(),
                "regret_max": per["regret_of_pick"].max()}
    else:  # recorded by an experiment that kept neither rows nor its CSV
        best = fx["best"]
    by_gpu = ", ".join(f"GPU {k}: {v:.4f}" for k, v in stats["median_ratio_by_gpu"].items())
    lines = [f"Median raw ratio by GPU of the {n}-GPU run: {by_gpu}",
             f"Best config: the same in {best['same']}/{best['of']} workloads; the "
             f"{n}-GPU run's pick is slower in the 1-GPU run by median "
             f"{best['regret_median']:.2%}, max {best['regret_max']:.2%}."]
    pairs, own = fx["noise"]
    if own:
        shown = pd.DataFrame({"run a": pairs["run_a"], "run b": pairs["run_b"],
                              "configs": pairs["configs"],
                              "p50": pairs["p50_abs_log"].map("{:.2%}".format),
                              "p90": pairs["p90_abs_log"].map("{:.2%}".format)})
        lines += [
            "", "Every run against every other (|ln(t_a/t_b)| over common OK configs) and each "
            "run's own per-config noise solved from those pairs (least squares over "
            "s_a^2 + s_b^2 = (p90 / 1.645)^2; the three-cornered hat): a run whose own noise "
            "stands out is the noisy one, whichever run it is compared with.", "",
            harness.md_table(shown, disable_numparse=True), "",
            "Own noise (SD of ln t per config): "
            + ", ".join(f"{k} {v:.2%}" for k, v in own.items()) + "."]
    for run in fx["runs"][:2]:
        name = "1 GPU" if run["n_gpus"] == 1 else f"{run['n_gpus']} GPUs"
        s = run["summary"]
        lines += [f"- {name}: {text}" for text in s.get("errors", []) + s.get("warnings", [])]
    return lines


def section_lines(fx: dict[str, Any], times: tuple[float, float, float], *, noise: float,
                  cited: float, goal: float) -> list[str]:
    """One experiment: its header, the wall-time split, host CPU, speed-up and agreement."""
    t1, tn, up = times
    fx = {**fx, "times": (t1, tn)}
    exp, (r1, rn) = fx["exp"], fx["runs"][:2]
    n = rn["n_gpus"]
    title = ("PLUMBING CHECK (dry run) - not a measurement" if exp["args"]["dry_run"]
             else f"1 vs {n} GPUs")
    host = {("1 GPU" if r["n_gpus"] == 1 and not r["tag"] else
             f"{r['n_gpus']} GPUs" if not r["tag"] else r["label"]): r["summary"].get("host_cpu")
            for r in fx["runs"]}
    end_to_end = r1["summary"]["seconds"] / rn["summary"]["seconds"]
    recorded = (["", "*Rows not kept: the agreement, split and best-config figures below are "
                 "the ones this experiment's report recorded (see its source above); the "
                 "collection seconds come from the collect_dask summaries in its log.*"]
                if fx["recorded"] else [])
    return [
        f"## {exp['name']}: {title}", "", *header_lines(fx), *recorded, "",
        harness.md_table(wall_table(fx), floatfmt=".1f", missing="n/a"), "",
        *host_lines(host, fx["probe"]),
        f"**Speed-up {up:.2f}x** on collection time (goal >= {goal}x: "
        f"{'met' if up >= goal else 'NOT met'}); end to end with cluster start "
        f"{end_to_end:.2f}x.", "",
        *noise_lines(fx, noise=noise, cited=cited, n=n), "", *pick_lines(fx, n), ""]
