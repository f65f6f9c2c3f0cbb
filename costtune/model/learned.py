"""Per-kernel models: what tuning measured for one kernel on one GPU, learned on top of the
shipped model.

A kernel's folder (``costtune.model.files.kernel_dir``: ``<user home>/kernels/<name>-<source
hash>/<gpu>/``, the user home being ``$COSTTUNE_HOME``, else ``$XDG_CACHE_HOME/costtune``,
else ``~/.cache/costtune``) holds

- ``rows.parquet``: every harvested row of the kernel (family-labelled: ``kernel`` is the
  family, the config columns carry the family's parameter names);
- ``model-<id>.json`` + ``.ubj`` (+ ``.forest.npz``, what the pruning hook scores with): a
  ``CostModel`` learned from those rows and the base model: refitted on the base's training
  table and the kernel's rows together (``"refit"``, where the base ships its table, as every
  shipped stage-1 model does: ``costtune.model.training``), else the base's booster with
  trees added on the kernel's rows (XGBoost's continued training, ``xgb_model=``);
- ``current.json``: which model is current, its base model and family, the rows it learned.

``update`` holds the folder's lock (``filelock``) while it merges the new rows into
``rows.parquet``, retrains and writes: every file is written under a temporary name and
``os.replace``d, and the new model's pair gets a fresh stem before ``current.json`` points at
it, so several processes (ranks) tuning the same kernel neither lose each other's rows nor
let a reader see a torn model. The previous model's pair is kept (a reader may have just read
the pointer); older ones are removed.

Why a refit and not continued training: trees added on a few harvested workloads either
barely move a base that ranks them poorly or overfit them; a refit weighs them against the
base's own rows. By replay on held-out implementations (``experiments/learning_curve.py``),
after two harvested shapes the refit ranked seven of ten held-out kernels' test shapes better
than continued training (softmax top1 0.827 -> 0.905, the tutorial GEMM 0.875 -> 0.942) and
two within 0.006 worse (experiments/RESULTS.md, issue 19). A residual booster fitted over
the base's scores (``base_margin``) scored identically to continued training on every row,
so it is not kept.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from costtune.model.files import POINTER, current_model

__all__ = ["METHODS", "base_top1", "current_model", "fit_update", "read_rows", "teaching",
           "update", "update_strength"]

METHODS = ("continue", "residual", "refit")
ROWS = "rows.parquet"
LOCK = ".lock"
LOCK_TIMEOUT_S = 600.0
# The trees an update adds, chosen by how well the base already ranks the harvested workloads
# (its TenSet top-1 on them): a base that finds their best within ``TRUSTED`` gets a light
# touch, so a shape or two cannot undo what it learned from thousands; one that does not gets
# a full update. By replay (experiments/learning_curve.py, held-out dtype and held-out family):
# full updates (50 trees, eta 0.1, depth 6) cost 2-4 points of GEMM top-1 after 1 shape where
# the base ranked well (held-out dtype), light ones (20, 0.05, 4) barely moved a poor base
# (held-out family, GEMM top-1 from 0.65: 0.62 light, 0.82 full after 2 exhaustive shapes).
TRUSTED = 0.98
# A harvested workload's weight against one of the base's own when a model is refitted on
# both (``"refit"``, used where the base ships its training table): chosen by replay on
# training data only (experiments/learning_curve.py --methods refit:<w>: held-out
# implementations, scored on their unharvested train-suite shapes).
# A lighter weight where the base already ranks the harvest well (its top-1 >= TRUSTED:
# ``learning_curve.py --methods refit:auto:<w>``) was not better: exhaustive / top8 harvests
# 0.9631 / 0.9386 for w = 2 and 0.9626 / 0.9358 for w = 1, against 0.9624 / 0.9391 for 10
# everywhere (thirtieth session, experiments/results/raw/learning_curve_auto/).
REFIT_WEIGHT = 10.0
LIGHT = (20, {"eta": 0.05, "max_depth": 4, "min_child_weight": 5.0})
FULL = (50, {"eta": 0.1, "max_depth": 6, "min_child_weight": 1.0})


def teaching(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows a model can learn an order from: those of workloads with two or more configs,
    one of them measured. A workload of one config (what a ``top_k=1`` call benchmarks) has
    nothing to rank; refitting on it only moved the model's histogram bins, and by replay
    (experiments/learn_user_kernels.py, tutorial 03 at k = 1) that alone took two of ten
    calls' picks from 0.987 / 0.988 of the best to 0.929 / 0.883."""
    workload = rows["workload"]
    many = rows.groupby(workload)["config"].transform("nunique") >= 2
    measured = rows["status"].eq("ok").groupby(workload).transform("any")
    return rows[many & measured]


def base_top1(base: Any, rows: pd.DataFrame) -> float:
    """``base``'s TenSet top-1 on ``rows`` (the harvested workloads): 1.0 where its first pick
    of every workload is the best measured there."""
    from costtune.evaluate.metrics import rankings_from_scores, topk_scores, topk_table
    from costtune.model.features import attach_features
    from costtune.model.registry import score

    scores = score(base, attach_features(rows, features=base.features))
    table = topk_table(rows, rankings_from_scores(rows, scores), ks=(1,))
    return float(topk_scores(table, ks=(1,), worst=(1,))["top1"])


def _teaches(rows: pd.DataFrame, teach: pd.DataFrame) -> bool:
    """Whether any of the new ``rows`` is among the ``teach`` rows (else a refit would fit
    what the current model was fitted on, or nothing)."""
    keys = rows[["workload", "config"]].astype(str).drop_duplicates()
    return not keys.merge(teach[["workload", "config"]].astype(str)).empty


def update_strength(base: Any, rows: pd.DataFrame) -> tuple[str, int, dict[str, Any]]:
    """("light" | "full", trees, their parameters) for updating ``base`` on ``rows``."""
    top1 = base_top1(base, rows)
    name, (rounds, params) = ("light", LIGHT) if top1 >= TRUSTED else ("full", FULL)
    return name, rounds, params


def fit_update(base: Any, rows: pd.DataFrame, *, method: str = "continue",
               rounds: int | None = None, params: dict[str, Any] | None = None,
               table: Any = None, weight: float = REFIT_WEIGHT,
               per_heaviest: bool = False) -> Any:
    """A model that ranks like ``base`` corrected by ``rows`` (dataset rows of one family).

    ``"continue"``: ``base``'s booster plus ``rounds`` trees of its objective, ``params``
    over its parameters (a ``CostModel``); both None: ``update_strength`` picks them.
    ``"residual"``: a separate booster of the same trees fitted over ``base``'s scores
    (``base_margin``), the two summed at scoring (in memory only; compared with continued
    training by replay). ``"refit"``: ``base``'s parameters fitted afresh on its training
    ``table`` (``costtune.model.training.TrainingTable``) and ``rows``, each workload of
    ``rows`` weighing ``weight`` table workloads (``per_heaviest``: ``weight`` of the table's
    heaviest workloads, e.g. the original kernel's at ``original_weight``)."""
    import xgboost as xgb

    from costtune.model.features import design_matrix
    from costtune.model.training import learned_from
    from costtune.model.xgb import CostModel

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use one of {list(METHODS)}")
    base._check_fitted()
    if method == "refit":
        from costtune.model.training import refit

        if table is None:
            raise ValueError("method 'refit' needs the base model's training table")
        return refit(base, table, rows, weight=weight, per_heaviest=per_heaviest)
    model = CostModel(**base.get_params())
    target_rows, target, groups = model._targets(rows)
    x = design_matrix(target_rows, base.feature_names_, features=base.features)
    dmat = xgb.DMatrix(x, label=target, feature_names=base.feature_names_, nthread=1)
    if model.objective.startswith("rank:"):
        dmat.set_group(groups)
    if rounds is None and params is None:
        _, rounds, params = update_strength(base, rows)
    rounds = LIGHT[0] if rounds is None else rounds
    params = {**model._xgb_params(), **(params or {})}
    if method == "continue":
        booster = xgb.train(params, dmat, num_boost_round=int(rounds),
                            xgb_model=base.booster_.copy())
    else:
        dmat.set_base_margin(np.asarray(base.booster_.inplace_predict(x), dtype=np.float32))
        delta = xgb.train(params, dmat, num_boost_round=int(rounds))
        booster = _SumBooster(base.booster_, delta)
    model.booster_ = booster
    return learned_from(model, base, rows,
                        n_rows=int(base.n_train_rows_ or 0) + len(target_rows),
                        n_workloads=int(base.n_train_workloads_ or 0) + len(groups))

class _SumBooster:
    """Scores of a base booster plus a residual booster (``fit_update(method="residual")``)."""

    def __init__(self, base: Any, delta: Any) -> None:
        self.base, self.delta = base, delta

    def inplace_predict(self, x: Any, **kw: Any) -> np.ndarray:
        return (np.asarray(self.base.inplace_predict(x, **kw), dtype=float)
                + np.asarray(self.delta.inplace_predict(x, **kw), dtype=float))

    def predict(self, dmat: Any, **kw: Any) -> np.ndarray:
        return (np.asarray(self.base.predict(dmat, **kw), dtype=float)
                + np.asarray(self.delta.predict(dmat, **kw), dtype=float))

    def set_param(self, params: Any) -> None:
        self.base.set_param(params)
        self.delta.set_param(params)


def read_rows(folder: str | os.PathLike) -> pd.DataFrame:
    """Every row a kernel folder learned from (empty when none). A file that cannot be read
    (cut short, zero bytes) is moved aside with a warning naming where, and learning goes on
    from the rows that come next (it failed on every later update)."""
    path = Path(folder) / ROWS
    if not path.exists():
        return pd.DataFrame()
    try:
        return pd.read_parquet(path)
    except FileNotFoundError:  # another process moved it aside meanwhile
        return pd.DataFrame()
    except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError: the file is bad
        import time
        import warnings

        from costtune.types import CosttuneWarning

        aside = path.with_name(f"{ROWS}.unreadable-{time.strftime('%Y%m%dT%H%M%S')}")
        try:
            os.replace(path, aside)
        except FileNotFoundError:  # another process moved it first
            return pd.DataFrame()
        warnings.warn(f"costtune learn: {path} could not be read ({type(exc).__name__}); "
                      f"moved to {aside.name}, learning goes on from the rows that come next",
                      CosttuneWarning, stacklevel=2)
        return pd.DataFrame()


def update(folder: str | os.PathLike, rows: pd.DataFrame, *, base: Any = "h200",
           family: str, method: str = "continue", rounds: int | None = None) -> Path | None:
    """Merge ``rows`` (family-labelled dataset rows of one kernel) into the folder's rows and
    retrain its model from ``base`` (a model name or path) on all of them; returns the new
    model's JSON path. Safe across processes (see the module docstring).

    Where the base ships its training table (``costtune.model.training``; every shipped
    stage-1 model does) and ``rounds`` is None, the model is refitted on that table and the
    kernel's rows (each of its workloads weighing ``REFIT_WEIGHT``); otherwise continued
    training adds ``rounds`` trees (None: ``update_strength``). Only the ``teaching`` rows
    are learned from; when none of ``rows`` is among them (e.g. a top_k=1 tuning of a new
    shape), the rows are kept, no model is written and None is returned (the current model,
    if any, stays)."""
    from costtune.model.registry import load_model
    from costtune.store.locks import acquire

    if method != "continue":
        raise ValueError(f"update() refits or continues by the base it is given; method "
                         f"{method!r} is for replay comparisons only (fit_update)")
    if rows.empty:
        raise ValueError("no rows to learn from")
    if set(rows["kernel"].astype(str)) != {family}:
        raise ValueError(f"rows must be {family} rows; got kernels "
                         f"{sorted(set(rows['kernel'].astype(str)))}")
    folder = Path(folder)
    lock = acquire(folder / LOCK, timeout=LOCK_TIMEOUT_S, stale_s=LOCK_TIMEOUT_S)
    try:
        merged = pd.concat([read_rows(folder), rows], ignore_index=True)
        merged = merged.drop_duplicates(["workload", "config"], keep="last")
        merged = merged.reset_index(drop=True)
        teach = teaching(merged).reset_index(drop=True)
        if not _teaches(rows, teach):  # no order in them yet: keep them for a later call's
            _write_atomic(folder / ROWS, lambda p: merged.to_parquet(p, index=False))
            return None
        base_model = load_model(os.fspath(base) if not hasattr(base, "booster_") else base,
                                family)
        table = None if rounds is not None else base_table(base, base_model)
        if table is not None:
            strength, rounds, method = (f"weight {REFIT_WEIGHT:g}", base_model.n_estimators,
                                        "refit")
            model = fit_update(base_model, teach, method="refit", table=table)
        else:
            strength, auto_rounds, params = update_strength(base_model, teach)
            rounds = auto_rounds if rounds is None else rounds
            model = fit_update(base_model, teach, method="continue", rounds=rounds,
                               params=params)
        stem = f"model-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        path = model.save(folder / stem)
        # The rows only once a model was fitted on them: rows no fit can take are not kept
        # (rows that teach nothing yet are kept above unfitted; they are fitted, and checked,
        # once their shape has a second config).
        _write_atomic(folder / ROWS, lambda p: merged.to_parquet(p, index=False))
        record = {"model": stem, "base": base if isinstance(base, str) else "given",
                  "family": family, "method": method, "strength": strength,
                  "rounds": int(rounds),
                  "rows": int(len(teach)), "workloads": int(teach["workload"].nunique()),
                  "updated": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        previous = current_model(folder)
        _write_atomic(folder / POINTER,
                      lambda p: Path(p).write_text(json.dumps(record, indent=1) + "\n"))
        _remove_old(folder, keep={stem, previous[1]["model"] if previous else stem})
        return path
    finally:
        lock.release()


def base_table(base: Any, model: Any) -> Any:
    """The training table of the base model file ``base`` (a name or path) that serves
    ``model``'s family (``h200`` -> ``h200_<family>`` when that file is the one loaded);
    None when it ships none, or when it was given as an object."""
    from costtune.model.training import TrainingTable

    if hasattr(base, "booster_"):
        return None
    from costtune.model.files import is_shipped_name, resolve

    name = os.fspath(base)
    if is_shipped_name(name) and len(model.families_) == 1:
        try:  # the family's own file is what load_for_family loaded when it exists
            resolve(f"{name}_{model.families_[0]}")
            name = f"{name}_{model.families_[0]}"
        except FileNotFoundError:
            pass
    try:
        table = TrainingTable.load(name, names=model.feature_names_)
    except Exception:  # noqa: BLE001 - a stale or torn table: learn by continuing
        return None
    # The table of the very fit that made the model: as many rows as it was trained on.
    return table if table is not None and len(table) == model.n_train_rows_ else None


def _write_atomic(path: Path, write: Any) -> None:
    """Write through ``write(temp path)`` beside ``path``, then ``os.replace`` it there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _remove_old(folder: Path, *, keep: set[str]) -> None:
    """Models other than ``keep`` (each stem's .json, .ubj and .forest.npz), and the temp files
    of writers killed mid-write (dot files: every writer here holds the folder's lock, which
    the caller holds now, so none is being written); never a lock file (``.lock``, or
    ``.lock.soft`` where the file system has no flock)."""
    old = [p for p in folder.glob("model-*") if p.name.split(".")[0] not in keep]
    temp = [p for p in folder.glob(".*") if not p.name.startswith(LOCK) and p.is_file()]
    for path in old + temp:
        try:
            path.unlink()
        except OSError:
            pass
