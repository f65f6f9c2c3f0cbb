"""What the Dask experiment's raw rows say: how two runs' timings agree, each run's own
noise, and where each run's worker time went. Pure functions of the rows (CPU)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd


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
