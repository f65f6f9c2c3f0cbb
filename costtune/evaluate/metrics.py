"""How good is a ranking of configs: TenSet top-k score, per-workload scores, regret, Kendall tau.

A *ranking* of one workload is an array of row positions into the evaluated frame, best first.
It may be shorter than the workload's space (a fixed list of 8 configs proposes only 8), and
may hold ``-1`` for a slot spent on a config that is not in this workload's measured space
(a fixed list entry that does not exist here): the slot counts towards k but can never win.

Definitions (TenSet, ``tlc-pack/tenset`` ``scripts/eval_model.py``, with unit task weights):

- ``L*_w``: best (smallest) ``time_ms`` among the workload's OK rows. Only ``status == "ok"``
  rows with a finite time are eligible: a failing config is never the truth.
- ``L_w(k)``: best true time among the first k entries of the ranking; failing, unmeasured and
  ``-1`` entries count as ``inf``. A top-k without any OK config has ``L_w(k) = inf``.
- per-workload score ``s_w(k) = L*_w / L_w(k)`` in [0, 1] (0 when ``L_w(k) = inf``); regret
  ``L_w(k) / L*_w - 1`` (inf then).
- kernel score ``top{k} = (|W_ok| / |W|) * sum_{w in W_ok} L*_w / sum_{w in W_ok} L_w(k)``
  where ``W_ok`` are the workloads whose top-k holds an OK config.

Deviation from TenSet: TenSet clamps a failed config's throughput to 1e-5 (latency 1e5 * L*),
so one workload whose top-k only fails drives the whole score to ~0. Here such a workload
scores 0 and weighs 1/|W| (coverage factor); with no failures in any top-k both agree exactly.
Workloads with no OK row at all have no truth and are left out (``n_no_truth``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

DEFAULT_KS = (1, 2, 4, 8, 16)


def true_times(data: pd.DataFrame) -> np.ndarray:
    """``time_ms`` of OK rows, ``inf`` for every other row (failures can never be best)."""
    t = pd.to_numeric(data["time_ms"], errors="coerce").to_numpy(dtype=float)
    ok = (data["status"].astype(str) == "ok").to_numpy() & np.isfinite(t) & (t > 0)
    return np.where(ok, t, np.inf)


def workload_positions(data: pd.DataFrame) -> dict[str, np.ndarray]:
    """Row positions of each workload, workloads in order of first appearance."""
    codes, names = pd.factorize(data["workload"], sort=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    return {str(n): order[bounds[i]:bounds[i + 1]] for i, n in enumerate(names)}


def rank_positions(scores: np.ndarray, keys: Sequence[str]) -> np.ndarray:
    """Positions sorted by score (higher first), ties broken by config key (ascending).

    >>> rank_positions(np.array([0.5, 0.9, 0.9]), ["c", "b", "a"]).tolist()
    [2, 1, 0]
    """
    scores = np.asarray(scores, dtype=float)
    # NaN scores rank last; lexsort's last key is the primary one.
    primary = np.where(np.isnan(scores), np.inf, -scores)
    return np.lexsort((np.asarray(keys, dtype=object).astype(str), primary))


def rankings_from_scores(data: pd.DataFrame, scores: np.ndarray) -> dict[str, np.ndarray]:
    """Per workload: its row positions ranked by ``scores`` (higher = predicted faster)."""
    scores = np.asarray(scores, dtype=float)
    if len(scores) != len(data):
        raise ValueError(f"{len(scores)} scores for {len(data)} rows")
    keys = data["config"].astype(str).to_numpy()
    return {w: pos[rank_positions(scores[pos], keys[pos])]
            for w, pos in workload_positions(data).items()}


def topk_table(data: pd.DataFrame, rankings: Mapping[str, Sequence[int]], *,
               ks: Sequence[int] = DEFAULT_KS) -> pd.DataFrame:
    """One row per workload: ``kernel``, ``workload``, ``n_configs``, ``L_star`` and, per k,
    ``L{k}`` and ``score{k}``. Workloads without an OK row are left out.

    >>> df = pd.DataFrame({"kernel": "gemm", "workload": "w", "config": ["a", "b", "c"],
    ...                    "status": ["ok", "ok", "compile_error"], "time_ms": [2.0, 1.0, 0.1]})
    >>> topk_table(df, {"w": [2, 0, 1]}, ks=(1, 2, 3))[["score1", "score2", "score3"]].values
    array([[0. , 0.5, 1. ]])
    """
    ks = _check_ks(ks)
    times = true_times(data)
    positions = workload_positions(data)
    missing = sorted(set(positions) - set(rankings))
    if missing:
        raise ValueError(f"no ranking for workload(s) {missing[:5]}")
    kernels = data["kernel"].astype(str).to_numpy() if "kernel" in data else None
    rows = []
    for w, pos in positions.items():
        l_star = times[pos].min()
        if not np.isfinite(l_star):
            continue
        ranking = np.asarray(rankings[w], dtype=int)
        _check_ranking(w, ranking, pos)
        ranked = np.where(ranking >= 0, times[np.maximum(ranking, 0)], np.inf)
        best = np.minimum.accumulate(ranked) if len(ranked) else ranked
        row = {"kernel": kernels[pos[0]] if kernels is not None else "",
               "workload": w, "n_configs": len(pos), "L_star": l_star}
        for k in ks:
            lk = best[min(k, len(best)) - 1] if len(best) else np.inf
            row[f"L{k}"] = lk
            row[f"score{k}"] = l_star / lk if np.isfinite(lk) else 0.0
        rows.append(row)
    cols = ["kernel", "workload", "n_configs", "L_star",
            *[c for k in ks for c in (f"L{k}", f"score{k}")]]
    return pd.DataFrame(rows, columns=cols)


def topk_scores(table: pd.DataFrame, *, ks: Sequence[int] = DEFAULT_KS,
                worst: Sequence[int] = (8,)) -> dict[str, float]:
    """Kernel-level summary of a ``topk_table``: ``top{k}`` (TenSet score with the coverage
    factor above) and ``worst{k}`` (the lowest per-workload score) for k in ``worst``.

    >>> t = pd.DataFrame({"L_star": [1.0, 2.0], "L1": [2.0, 2.0], "score1": [0.5, 1.0]})
    >>> topk_scores(t, ks=(1,), worst=(1,))
    {'top1': 0.75, 'worst1': 0.5}
    """
    ks = _check_ks(ks)
    out: dict[str, float] = {}
    if table.empty:
        return {**{f"top{k}": float("nan") for k in ks},
                **{f"worst{k}": float("nan") for k in worst}}
    l_star = table["L_star"].to_numpy(dtype=float)
    for k in ks:
        out[f"top{k}"] = tenset_score(l_star, table[f"L{k}"].to_numpy(dtype=float))
    for k in worst:
        if f"score{k}" not in table:
            raise ValueError(f"worst{k} needs k={k} in ks {list(ks)}")
        out[f"worst{k}"] = float(table[f"score{k}"].min())
    return out


def tenset_score(l_star: np.ndarray, l_k: np.ndarray) -> float:
    """``sum L* / sum L(k)`` over workloads whose top-k holds an OK config, times their share.

    >>> tenset_score(np.array([1.0, 1.0]), np.array([2.0, np.inf]))
    0.25
    """
    l_star = np.asarray(l_star, dtype=float)
    l_k = np.asarray(l_k, dtype=float)
    found = np.isfinite(l_k)
    if not found.any():
        return 0.0
    return float(found.mean() * l_star[found].sum() / l_k[found].sum())


def regret(table: pd.DataFrame, k: int) -> np.ndarray:
    """Per-workload regret ``L(k) / L* - 1`` (``inf`` where the top-k holds no OK config)."""
    return table[f"L{k}"].to_numpy(dtype=float) / table["L_star"].to_numpy(dtype=float) - 1.0


def kendall_tau(data: pd.DataFrame, scores: np.ndarray) -> pd.DataFrame:
    """Per workload: Kendall's tau-b between ``scores`` and true speed ``1 / time_ms`` over the
    OK rows (``scipy.stats.kendalltau``); NaN with fewer than 2 OK rows or constant scores.

    >>> df = pd.DataFrame({"workload": "w", "status": "ok", "time_ms": [1.0, 2.0, 4.0]})
    >>> float(kendall_tau(df, np.array([3.0, 2.0, 1.0]))["tau"].iloc[0])
    1.0
    """
    from scipy.stats import kendalltau

    scores = np.asarray(scores, dtype=float)
    times = true_times(data)
    rows = []
    for w, pos in workload_positions(data).items():
        ok = pos[np.isfinite(times[pos])]
        tau = np.nan
        if len(ok) >= 2 and np.ptp(scores[ok]) > 0 and np.ptp(times[ok]) > 0:
            tau = float(kendalltau(scores[ok], 1.0 / times[ok]).statistic)
        rows.append({"workload": w, "n_ok": len(ok), "tau": tau})
    return pd.DataFrame(rows, columns=["workload", "n_ok", "tau"])


def summarize(data: pd.DataFrame, rankings: Mapping[str, Sequence[int]], *,
              ks: Sequence[int] = DEFAULT_KS, worst: Sequence[int] = (8,),
              scores: np.ndarray | None = None, table: pd.DataFrame | None = None,
              taus: pd.DataFrame | None = None) -> dict[str, float]:
    """``topk_scores`` plus ``median_regret{k}`` for the largest k and, with ``scores``, the
    mean per-workload ``kendall_tau``; ``n_workloads`` and ``n_no_truth`` count workloads.
    ``table`` / ``taus``: ``topk_table`` / ``kendall_tau`` of the same inputs, when the caller
    has them already."""
    table = topk_table(data, rankings, ks=ks) if table is None else table
    out = topk_scores(table, ks=ks, worst=worst)
    k_max = max(ks)
    out[f"median_regret{k_max}"] = (float(np.median(regret(table, k_max)))
                                    if len(table) else float("nan"))
    if scores is not None:
        tau = (kendall_tau(data, scores) if taus is None else taus)["tau"].to_numpy(dtype=float)
        out["kendall_tau"] = float(np.nanmean(tau)) if np.isfinite(tau).any() else np.nan
    out["n_workloads"] = float(len(table))
    out["n_no_truth"] = float(data["workload"].nunique() - len(table))
    return out


def _check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    ks = tuple(int(k) for k in ks)
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive integers, got {list(ks)}")
    return ks


def _check_ranking(workload: str, ranking: np.ndarray, positions: np.ndarray) -> None:
    real = ranking[ranking >= 0]
    if (ranking < -1).any():
        raise ValueError(f"ranking of {workload} holds negative positions other than -1")
    if len(np.unique(real)) != len(real):
        raise ValueError(f"ranking of {workload} repeats a row")
    if not np.isin(real, positions).all():
        raise ValueError(f"ranking of {workload} holds rows of another workload")
