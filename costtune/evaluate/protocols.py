"""Evaluation protocols and the leaderboard: every model and baseline scored the same way.

Protocols (``evaluate(dataset, protocol=...)``):

- ``"split"``: train on ``suite == "train"``, test on ``suite == "test"`` (disjoint shapes).
- ``"kfold"``: grouped K-fold over shapes (``sklearn.model_selection.GroupKFold``; a shape's
  fp16 and bf16 workloads share a fold), scored on the out-of-fold rankings of all workloads.
- ``"lofo"``: leave one kernel family out: a ``family="all"`` model trained on the other two
  families ranks the third (all its suites). Baselines need no training there but for
  best-static-k, which cannot transfer configs across families and is left out.
- ``"loio"``: leave one implementation out: for every implementation of a family that has
  several in the data, models trained on the train suite of every OTHER implementation (of
  every family) rank the held-out one's ``score_suite`` shapes (``"test"`` to report,
  ``"train"`` for model selection on training data only). Scores are keyed by implementation.

Models with ``family=None`` are fitted once per kernel family on that family's rows.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone

from costtune.evaluate.metrics import (
    DEFAULT_KS,
    kendall_tau,
    rankings_from_scores,
    summarize,
    topk_table,
    workload_positions,
)
from costtune.evaluate.report import format_leaderboard, leaderboard_table, plot_topk
from costtune.model.baselines import (
    BestStaticList,
    Roofline,
    TritonTutorialList,
    expected_random_scores,
)
from costtune.model.features import attach_features, feature_names
from costtune.model.registry import load_model
from costtune.model.xgb import CostModel

__all__ = ["evaluate", "leaderboard", "train_default", "default_model", "plot_topk",
           "leaderboard_table", "format_leaderboard", "PROTOCOLS", "DEFAULT_PARAMS"]

PROTOCOLS = ("split", "kfold", "lofo", "loio")
# The shipped model: one booster for every family, static features only, so the pruning hook
# can rank before anything compiles. Chosen by shape-grouped 5-fold CV on the train suite of
# datasets/h200 (2026-11-29): the four objectives and depth 4-8 / 150-600 trees were within
# ~1-2 points of top-1 of each other; per-family boosters were ~1 point better on GEMM and
# attention top-1, family="all" keeps one file.
DEFAULT_PARAMS: dict[str, Any] = {"objective": "rank:pairwise", "features": "static",
                                  "family": "all", "n_estimators": 300, "max_depth": 6,
                                  "learning_rate": 0.1}
RANDOM = "random"


def default_model(**overrides: Any) -> CostModel:
    """An unfitted ``CostModel`` with the shipped defaults (``DEFAULT_PARAMS``)."""
    return CostModel(**{**DEFAULT_PARAMS, **overrides})


def train_default(dataset: pd.DataFrame, *, suite: str | None = "train",
                  **attach_kwargs: Any) -> CostModel:
    """Fit the default model on ``dataset`` rows of ``suite`` (None: every row, for shipping
    after evaluation). Save it with ``model.save("costtune/models/h200")``.

    >>> model = train_default(costtune.load_dataset("datasets/h200"))  # doctest: +SKIP
    """
    rows = dataset if suite is None else dataset[dataset["suite"] == suite]
    if rows.empty:
        raise ValueError(f"no rows with suite == {suite!r}")
    return default_model().fit(rows, **attach_kwargs)


def evaluate(dataset: pd.DataFrame, *, protocol: str = "split",
             models: Mapping[str, CostModel] | None = None, baselines: bool = True,
             ks: Sequence[int] = DEFAULT_KS, worst: Sequence[int] = (8,), n_splits: int = 5,
             compiled: pd.DataFrame | None = None, seed: int = 0,
             score_suite: str = "test") -> dict[str, Any]:
    """Score models (unfitted ``CostModel``s, cloned per fold) and baselines under a protocol.

    ``models`` defaults to the static vs static+compiled ablation (the latter only when compiled
    features are given via ``compiled`` or already in ``dataset``). Returns ``{"protocol",
    "scores": {kernel: {name: metrics}}, "per_workload": DataFrame, "rows": the scored rows,
    "model_scores": {name: each model's score per row, out of fold}}``; metrics are
    ``metrics.summarize``'s (``top{k}``, ``worst{k}``, ``median_regret``, ``kendall_tau``...).

    >>> data = costtune.load_dataset("datasets/h200")  # doctest: +SKIP
    >>> result = evaluate(data, protocol="lofo")  # doctest: +SKIP
    >>> print(format_leaderboard(result["scores"]))  # doctest: +SKIP
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; use one of {list(PROTOCOLS)}")
    data, has_compiled = _prepare(dataset, compiled)
    if models is None:
        models = {"xgb:static": CostModel(features="static", seed=seed)}
        if has_compiled:
            models["xgb:static+compiled"] = CostModel(features="static+compiled", seed=seed)
    ks = tuple(ks)
    if protocol == "split":
        train, test = _suites(data)
        tasks = [(train, test)]
    elif protocol == "kfold":
        tasks = _kfold(data, n_splits=n_splits)
        test = data
    elif protocol == "lofo":
        tasks = [(data[data["kernel"] != k], data[data["kernel"] == k])
                 for k in sorted(data["kernel"].unique())]
        test = data
        models = {name: clone(m).set_params(family="all") for name, m in models.items()}
    else:
        tasks = loio_tasks(data, score_suite=score_suite)
        test = pd.concat([part for _, part in tasks]) if tasks else data.iloc[:0]
    test = test.reset_index(drop=True)
    rankings: dict[str, dict[str, np.ndarray]] = {}
    scores: dict[str, np.ndarray] = {}
    for train, part in tasks:
        part_pos = _positions_in(test, part)
        for name, model in models.items():
            s = _fit_predict(model, train, part)
            scores.setdefault(name, np.full(len(test), np.nan))[part_pos] = s
        if baselines:
            for name, ranker in _baselines(train, protocol, k=max(ks)).items():
                got = rankings.setdefault(name, {})
                for w, ranking in _baseline_rankings(ranker, test.iloc[part_pos]).items():
                    got[w] = np.where(ranking >= 0, part_pos[np.maximum(ranking, 0)], -1)
    for name, s in scores.items():
        rankings[name] = rankings_from_scores(test, s)
    out = _collect(test, rankings, scores, protocol=protocol, ks=ks, worst=worst,
                   random=baselines, seed=seed,
                   group="implementation" if protocol == "loio" else "kernel")
    out["rows"], out["model_scores"] = test, scores
    return out


def loio_tasks(data: pd.DataFrame, *, score_suite: str = "test"
               ) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """(train, held-out) per implementation of every family with several implementations:
    train is the train suite of every other implementation, held-out the implementation's
    ``score_suite`` rows. ValueError when no family has two implementations."""
    if score_suite not in ("train", "test"):
        raise ValueError(f"score_suite must be 'train' or 'test', got {score_suite!r}")
    _suites(data)
    impl = data["implementation"].astype(str)
    train_rows = data["suite"] == "train"
    tasks = []
    for family in sorted(data["kernel"].unique()):
        names = sorted(impl[data["kernel"] == family].unique())
        if len(names) < 2:
            continue
        for name in names:
            held = data[(impl == name) & (data["suite"] == score_suite)]
            if not held.empty:
                tasks.append((data[train_rows & (impl != name)], held))
    if not tasks:
        raise ValueError("protocol 'loio' needs a family with at least two implementations "
                         "(the dataset's 'implementation' column)")
    return tasks


def leaderboard(dataset: pd.DataFrame, *, model: CostModel | str | None = None,
                ks: Sequence[int] = DEFAULT_KS, compiled: pd.DataFrame | None = None,
                seed: int = 0) -> dict[str, dict[str, dict[str, float]]]:
    """``{kernel: {name: {"top1", ..., "top16", "worst8"}}}`` on the test suite.

    ``"costtune"`` is ``model``: a fitted ``CostModel``, a saved model's path or shipped name
    (resolved per family like the pruning hook: ``<name>_<family>`` first), or None to train
    the default on the train suite. The other names: ``xgb:static`` and
    ``xgb:static+compiled`` (per-family models trained on the train suite; the latter only with
    compiled features), ``triton-tutorial-8`` / ``-16`` (GEMM), ``best-static-<max k>``
    (entries absent from a workload's space waste their slot) and ``best-static-<max k>:skip``
    (they are skipped), ``random`` (expectation) and ``roofline``.

    >>> board = leaderboard(costtune.load_dataset("datasets/h200"))  # doctest: +SKIP
    >>> plot_topk(board, "experiments/results/leaderboard.png")  # doctest: +SKIP
    """
    ks = tuple(ks)
    worst = (8,) if 8 in ks else (max(ks),)
    data, _ = _prepare(dataset, compiled)
    train, test = _suites(data)
    if model is None:
        model = train_default(train)
    elif not isinstance(model, str | os.PathLike) and not hasattr(model, "booster_"):
        model = clone(model).fit(train)
    result = evaluate(data, protocol="split", ks=ks, worst=worst, seed=seed)
    test = test.reset_index(drop=True)
    predicted = np.full(len(test), np.nan)
    for kernel in test["kernel"].unique():
        # A shipped name serves each family as the hook does: h200_<family>, else h200.
        fitted = load_model(model, kernel) if isinstance(model, str | os.PathLike) else model
        mask = (test["kernel"] == kernel).to_numpy()
        predicted[mask] = fitted.predict(test[mask])
    extra = _collect(test, {"costtune": rankings_from_scores(test, predicted)}, {},
                     protocol="split", ks=ks, worst=worst, random=False, seed=seed)
    keys = [f"top{k}" for k in ks] + [f"worst{k}" for k in worst]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for kernel in sorted(result["scores"]):
        board = {"costtune": extra["scores"].get(kernel, {}).get("costtune", {})}
        board.update(result["scores"][kernel])
        out[kernel] = {name: {k: float(m.get(k, np.nan)) for k in keys}
                       for name, m in board.items() if m}
    return out


def _prepare(dataset: pd.DataFrame, compiled: pd.DataFrame | None
             ) -> tuple[pd.DataFrame, bool]:
    from costtune.store.parts import with_implementation

    data = with_implementation(dataset.reset_index(drop=True))
    data = attach_features(data, features="static")
    names = feature_names("static+compiled")
    if compiled is not None:
        data = attach_features(data, features="static+compiled", compiled=compiled)
    return data, all(n in data.columns for n in names)


def _suites(data: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    if "suite" not in data.columns:
        raise ValueError("protocol 'split' needs a 'suite' column (train/test)")
    train, test = data[data["suite"] == "train"], data[data["suite"] == "test"]
    if train.empty or test.empty:
        raise ValueError(f"need rows in both suites; got {len(train)} train, {len(test)} test")
    return train, test


def shape_groups(data: pd.DataFrame) -> np.ndarray:
    """Group label per row: kernel plus problem sizes, without dtype (one shape, one group)."""
    from costtune.kernels.base import PROBLEM_COLUMNS

    keys = sorted(PROBLEM_COLUMNS)
    cols = ["kernel"] + [k for k in keys if k in data.columns]
    first = data.drop_duplicates("workload")
    labels = {w: "|".join(map(str, values)) for w, values in
              zip(first["workload"], first[cols].itertuples(index=False), strict=True)}
    return data["workload"].map(labels).to_numpy()


def _kfold(data: pd.DataFrame, *, n_splits: int) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    from sklearn.model_selection import GroupKFold

    groups = shape_groups(data)
    n = min(int(n_splits), len(np.unique(groups)))
    if n < 2:
        raise ValueError("kfold needs at least 2 distinct shapes")
    folds = GroupKFold(n_splits=n).split(np.zeros(len(data)), groups=groups)
    return [(data.iloc[tr], data.iloc[te]) for tr, te in folds]


def _positions_in(test: pd.DataFrame, part: pd.DataFrame) -> np.ndarray:
    """Positions in ``test`` of ``part``'s rows, matched on (workload, config)."""
    index = pd.MultiIndex.from_frame(test[["workload", "config"]].astype(str))
    pos = index.get_indexer(pd.MultiIndex.from_frame(part[["workload", "config"]].astype(str)))
    if (pos < 0).any():
        raise ValueError("evaluation rows are not unique by (workload, config)")
    return pos


def _fit_predict(model: CostModel, train: pd.DataFrame, test: pd.DataFrame) -> np.ndarray:
    if model.family is not None:
        fitted = clone(model).fit(train)
        return fitted.predict(test)
    out = np.full(len(test), np.nan)
    kernels = test["kernel"].astype(str).to_numpy()
    for kernel in np.unique(kernels):
        rows = train[train["kernel"] == kernel]
        if rows.empty:  # nothing to learn from: every config ties, ranked by key
            continue
        mask = kernels == kernel
        out[mask] = clone(model).fit(rows).predict(test[mask])
    return out


def _baselines(train: pd.DataFrame, protocol: str, *, k: int) -> dict[str, Any]:
    out: dict[str, Any] = {"triton-tutorial-8": TritonTutorialList(which="fp16"),
                           "triton-tutorial-16": TritonTutorialList(which="all")}
    if protocol != "lofo":
        out[f"best-static-{k}"] = BestStaticList(k=k).fit(train)
        out[f"best-static-{k}:skip"] = BestStaticList(k=k, absent="skip").fit(train)
    out["roofline"] = Roofline()
    return out


def _baseline_rankings(ranker: Any, rows: pd.DataFrame) -> dict[str, np.ndarray]:
    out = {}
    families = getattr(ranker, "families", None)
    for w, pos in workload_positions(rows).items():
        part = rows.iloc[pos]
        if families is not None and str(part["kernel"].iloc[0]) not in families:
            continue
        ranking = np.asarray(ranker.rank(part), dtype=int)
        out[w] = np.where(ranking >= 0, pos[np.maximum(ranking, 0)], -1)
    return out


def _collect(test: pd.DataFrame, rankings: dict[str, dict[str, np.ndarray]],
             scores: dict[str, np.ndarray], *, protocol: str, ks: tuple[int, ...],
             worst: Sequence[int], random: bool, seed: int,
             group: str = "kernel") -> dict[str, Any]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    tables = []
    kernels = test[group].astype(str).to_numpy()
    for kernel in sorted(np.unique(kernels)):
        mask = kernels == kernel
        rows = test[mask]
        local = np.flatnonzero(mask)
        remap = np.full(len(test), -1)
        remap[local] = np.arange(len(local))
        board: dict[str, dict[str, float]] = {}
        names = set(rows["workload"])
        for name, by_w in rankings.items():
            mine = {w: np.where(r >= 0, remap[np.maximum(r, 0)], -1) for w, r in by_w.items()
                    if w in names}
            if len(mine) < len(names):
                continue  # this ranker does not cover the family (e.g. GEMM-only lists)
            s = scores[name][mask] if name in scores else None
            table = topk_table(rows, mine, ks=ks)
            taus = kendall_tau(rows, s) if s is not None else None
            board[name] = summarize(rows, mine, ks=ks, worst=worst, scores=s, table=table,
                                    taus=taus)
            if taus is not None:
                table = table.merge(taus[["workload", "tau"]], on="workload")
            tables.append(table.assign(name=name))
        if random:
            board[RANDOM] = expected_random_scores(rows, ks=ks, worst=worst, seed=seed)
        out[kernel] = board
    per_workload = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    return {"protocol": protocol, "scores": out, "per_workload": per_workload}
