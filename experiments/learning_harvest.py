"""What a tuning call of ``costtune.autotune(learn=True)`` measures and records, replayed on a
held-out kernel's recorded rows (``experiments/learning_curve.py``): the pruning hook's kept
list at top_k (``top_rows``, ``hook_kept``; scored by ``tuned_scores``) or the adaptive
budget's benchmarks (``adaptive_rows``), and the config values a model learned from
(``learned_values``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from costtune.evaluate.metrics import tenset_score, true_times
from costtune.features.static import static_features
from costtune.tune.adaptive import Adaptive, replay_search
from costtune.tune.trained import hook_order, trained_from_rows

__all__ = ["KS", "adaptive_rows", "hook_kept", "learned_values", "model_scores", "top_rows",
           "tuned_scores"]

KS = (1, 4, 8)  # the top_k scored


def model_scores(model, rows: pd.DataFrame, feats: pd.DataFrame) -> np.ndarray:
    """``model``'s scores of ``rows``: from their static features, or with the kernel-source
    features (``static+src``, the shipped softmax model's set) through ``predict``."""
    from costtune.model.registry import score

    return score(model, feats) if model.features == "static" else model.predict(rows)


def hook_kept(rows: pd.DataFrame, feats: pd.DataFrame, order: np.ndarray, k: int,
              trained: dict) -> tuple[np.ndarray, int]:
    """(``order`` as the pruning hook measures it, how many of it it keeps) at ``k``: the k
    best-ranked configs with trained values, moved into the cap where needed, plus every
    untrained one ranked above the last of them (``tune.trained.hook_order``, cap 4k: the
    hook's default ``widen``)."""
    family = next(iter(trained))
    cols = {c: pd.to_numeric(rows[c], errors="coerce").to_numpy(dtype=float)[order]
            for c in trained[family]["values"] if c in rows}
    elems, waves = (feats[c].to_numpy(dtype=float)[order] for c in ("elems_per_thread", "waves"))
    cap = min(len(order), 4 * k)
    local, n, _ = hook_order(family, cols, elems, np.arange(len(order)), k=k, cap=cap,
                             trained=trained, waves=waves)
    return np.asarray(order)[local], n


def tuned_scores(test: pd.DataFrame, feats: pd.DataFrame, rankings: dict,
                 trained: dict) -> dict:
    """Top-k as the pruning hook keeps it (``hook_kept``): the TenSet score of what that
    measures and the mean configs it measures per workload."""
    times = true_times(test)
    out = {}
    for k in KS:
        l_star, l_k, kept = [], [], []
        for order in rankings.values():
            order = np.asarray(order, dtype=int)
            if not np.isfinite(times[order]).any():
                continue
            measured, n = hook_kept(test, feats, order, k, trained)
            l_star.append(times[order].min())
            l_k.append(times[measured[:n]].min())
            kept.append(n)
        out[f"tuned_top{k}"] = tenset_score(np.array(l_star), np.array(l_k))
        out[f"tuned_configs{k}"] = float(np.mean(kept)) if kept else float("nan")
    return out


def learned_values(base: dict, taken: list[pd.DataFrame]) -> dict:
    """The config values a case's model learned from: ``base`` (``trained_from_rows`` of the
    base's training rows, computed once per case) widened by the harvested rows (status ok)."""
    family = next(iter(base))
    rows = pd.concat(taken, ignore_index=True) if taken else None
    if rows is None or not (rows["status"] == "ok").any():
        return base
    old, new = base[family], trained_from_rows(rows[rows["status"] == "ok"], family)[family]
    values = {n: sorted(set(old["values"].get(n, [])) | set(new["values"].get(n, [])))
              for n in {**old["values"], **new["values"]}}
    gap = [np.nan, np.nan]  # a range one side lacks (no split in its rows) is the other's
    ranges = {c: [float(np.fmin(old["ranges"].get(c, gap)[0], new["ranges"].get(c, gap)[0])),
                  float(np.fmax(old["ranges"].get(c, gap)[1], new["ranges"].get(c, gap)[1]))]
              for c in {**old["ranges"], **new["ranges"]}}
    return {family: {"values": values, "ranges": ranges, "rows": old["rows"] + new["rows"]}}


def top_rows(model, rows: pd.DataFrame, k: int, trained: dict | None = None) -> pd.DataFrame:
    """The rows of one workload a top-k call measures and records: the ``k`` that ``model``
    ranks best or, with ``trained``, the hook's kept list (the k best trained configs and the
    untrained ones ranked above them, at most 4k)."""
    feats = static_features(rows)
    s = model_scores(model, rows, feats)
    order = np.lexsort((rows["config"].astype(str).to_numpy(), -s))
    if trained is None:
        return rows.iloc[order[:k]]
    measured, n = hook_kept(rows, feats, order, k, trained)
    return rows.iloc[measured[:n]]


def adaptive_rows(model, rows: pd.DataFrame, budget: Adaptive, margin: float) -> pd.DataFrame:
    """The rows of one workload ``budget="adaptive"`` benchmarks and records (failing configs
    too): the loop replayed in ``model``'s order on the recorded times, stopping when the
    model is confident by ``margin``, extending along the measured best's neighbours when the
    measured order disagrees (``costtune.tune.adaptive``). The hook's own reordering of
    configs with untrained values is left out here."""
    rows = rows.reset_index(drop=True)
    result = replay_search(rows, model_scores(model, rows, static_features(rows)),
                           budget=budget, margin=margin)
    return rows.iloc[result.measured + result.failed]
