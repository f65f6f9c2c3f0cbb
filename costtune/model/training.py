"""A model's training table: the design matrix, targets and query groups it was fitted on,
saved beside the model as ``<stem>.train.npz``, so that ``learn=True`` can refit the model
on those rows and the user's harvested ones together (``costtune.model.learned``).

A refit with no harvested rows is the shipped model again (same rows, parameters and seed;
tests/test_training.py checks it). The table records the feature names it was built with;
loading it for a model with other names is a ``ModelSchemaError``.

>>> import pandas as pd
>>> from costtune.model.xgb import CostModel
>>> rows = pd.DataFrame({"kernel": "softmax", "workload": "w", "dtype": "float16",
...     "rows": 8, "cols": 100, "BLOCK_N": [128, 256], "ROWS_PER_PROG": 1, "num_warps": 4,
...     "num_stages": 1, "status": "ok", "time_ms": [1.0, 2.0],
...     "config": ["BLOCK_N=128", "BLOCK_N=256"]})
>>> model = CostModel(n_estimators=2, family="softmax").fit(rows)
>>> table = TrainingTable.from_rows(model, rows)
>>> table.x.shape[0], list(table.groups)
(2, [2])
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from costtune.model.files import ModelSchemaError, resolve, table_path

__all__ = ["TrainingTable", "learned_from", "refit", "save_with_table", "table_path"]


@dataclass(frozen=True)
class TrainingTable:
    """Rows a ``CostModel`` learns from, as XGBoost sees them: ``x`` (float32, one column per
    name of ``feature_names``), ``y`` (the objective's targets), ``groups`` (rows per
    workload, in row order; the query groups of the rank objectives) and ``weights``
    (``CostModel.weights``: per group for the rank objectives, else per row; None: all 1)."""

    x: np.ndarray
    y: np.ndarray
    groups: np.ndarray
    feature_names: tuple[str, ...]
    weights: np.ndarray | None = None

    @classmethod
    def from_rows(cls, model: Any, rows: pd.DataFrame, **attach_kwargs: Any) -> TrainingTable:
        """``rows`` (dataset rows, any status) as ``model``'s objective and features see them;
        ``model`` needs its parameters only (fitted or not)."""
        from costtune.model.features import design_matrix, feature_names

        names = (list(model.feature_names_) if hasattr(model, "feature_names_")
                 else feature_names(model.features))
        target_rows, y, groups = model._targets(model._select_family(rows))
        x = design_matrix(target_rows, names, features=model.features, **attach_kwargs)
        weights = model.weights(target_rows, groups)
        return cls(x=x, y=np.asarray(y, np.float32), groups=np.asarray(groups, np.int64),
                   feature_names=tuple(names),
                   weights=None if weights is None else np.asarray(weights, np.float64))

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def save(self, model_path: str | os.PathLike) -> Path:
        """Write ``<stem>.train.npz`` beside the model ``model_path`` (atomically)."""
        path = table_path(model_path)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.npz")
        try:
            extra = {} if self.weights is None else {"weights": self.weights}
            np.savez_compressed(tmp, x=self.x, y=self.y, groups=self.groups,
                                feature_names=np.array(self.feature_names), **extra)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    @classmethod
    def load(cls, model_path: str | os.PathLike, *, names: Any = None) -> TrainingTable | None:
        """The table beside a model (a path or shipped name); None when it has none.
        ``names``: the model's feature names, which the table must have been built with."""
        try:
            json_path, _ = resolve(model_path)
        except FileNotFoundError:
            return None
        path = table_path(json_path)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as f:
                table = cls(x=f["x"], y=f["y"], groups=f["groups"],
                            feature_names=tuple(str(n) for n in f["feature_names"]),
                            weights=f["weights"] if "weights" in f.files else None)
        except (OSError, ValueError, KeyError) as exc:
            raise ModelSchemaError(f"{path}: not a readable training table ({exc})") from None
        if int(table.groups.sum()) != len(table) or len(table.y) != len(table):
            raise ModelSchemaError(f"{path}: groups, targets and rows disagree")
        if table.weights is not None and len(table.weights) not in (len(table.groups),
                                                                    len(table)):
            raise ModelSchemaError(f"{path}: {len(table.weights)} weights for "
                                   f"{len(table.groups)} groups of {len(table)} rows")
        if names is not None and tuple(names) != table.feature_names:
            raise ModelSchemaError(f"{path}: built with other features than its model "
                                   f"({len(table.feature_names)} vs {len(tuple(names))})")
        return table


def save_with_table(model: Any, path: str | os.PathLike, rows: pd.DataFrame) -> Path:
    """``model.save(path)`` and the table of ``rows``, the rows it was fitted on, beside it
    (what lets ``learn=True`` refit it); returns the JSON path. ValueError when ``rows`` are
    not the fit's (another row count as the model sees them)."""
    table = TrainingTable.from_rows(model, rows)
    if len(table) != model.n_train_rows_:
        raise ValueError(f"training rows: {len(table)} as the model sees them, but it was "
                         f"fitted on {model.n_train_rows_}; pass the fit's rows")
    json_path = model.save(path)
    table.save(json_path)
    return json_path


def learned_from(model: Any, base: Any, rows: pd.DataFrame, *, n_rows: int,
                 n_workloads: int) -> Any:
    """``model`` (its booster set) with what it knows as ``base`` updated by ``rows``: the
    base's features, families and triton version, shape ranges and GPUs widened by ``rows``,
    their training hash, and ``n_rows`` / ``n_workloads`` trained on in all."""
    from costtune.model.xgb import dataset_hash, shape_ranges

    ranges = {f: dict(r) for f, r in base.shape_ranges_.items()}
    for family, new in shape_ranges(rows).items():
        old = ranges.setdefault(family, {})
        for key, (lo, hi) in new.items():
            a, b = old.get(key, (lo, hi))
            old[key] = (min(a, lo), max(b, hi))
    gpus = {g.strip() for g in (base.gpu_ or "").split(",") if g.strip()}
    if "gpu" in rows:
        gpus |= set(rows["gpu"].dropna().astype(str))
    model.feature_names_ = list(base.feature_names_)
    model.families_ = list(base.families_)
    model.shape_ranges_ = ranges
    model.train_hash_ = dataset_hash(rows)
    model.n_train_rows_ = int(n_rows)
    model.n_train_workloads_ = int(n_workloads)
    model.gpu_ = ", ".join(sorted(gpus)) or None
    model.triton_version_ = base.triton_version_
    return model


def refit(base: Any, table: TrainingTable, rows: pd.DataFrame, *, weight: float,
          per_heaviest: bool = False) -> Any:
    """A new ``CostModel`` with ``base``'s parameters fitted on ``table`` and ``rows``
    together, each workload of ``rows`` weighing ``weight`` times a table workload of weight 1
    (XGBoost's per-group weights; the table's own as the base was fitted, e.g. its original
    kernel's at ``original_weight``), or with ``per_heaviest`` ``weight`` times the table's
    heaviest workload. ``rows``: dataset rows of one family (any status)."""
    import xgboost as xgb

    from costtune.model.features import design_matrix
    from costtune.model.xgb import CostModel

    if not weight > 0:
        raise ValueError(f"weight must be > 0, got {weight}")
    base._check_fitted()
    names = list(base.feature_names_)
    if tuple(names) != table.feature_names:
        raise ModelSchemaError("the training table was built with other features than the "
                               "model")
    model = CostModel(**base.get_params())
    if len(rows):
        new_rows, new_y, new_groups = model._targets(rows)
        new_x = design_matrix(new_rows, names, features=base.features)
    else:
        new_rows, new_y = rows, np.zeros(0, np.float32)
        new_groups, new_x = np.zeros(0, np.int64), np.zeros((0, len(names)), np.float32)
    x = np.concatenate([table.x, new_x])
    dmat = xgb.DMatrix(x, label=np.concatenate([table.y, new_y]), feature_names=names,
                       nthread=model.n_jobs)
    rank = model.objective.startswith("rank:")
    old_w = table.weights if table.weights is not None else np.ones(
        len(table.groups) if rank else len(table))
    if per_heaviest and len(old_w):
        weight = float(weight) * float(np.max(old_w))
    if rank:
        dmat.set_group(np.concatenate([table.groups, new_groups]))
        dmat.set_weight(np.concatenate([old_w, np.full(len(new_groups), float(weight))]))
    else:
        dmat.set_weight(np.concatenate([old_w, np.full(len(new_y), float(weight))]))
    model.booster_ = xgb.train(model._xgb_params(), dmat, num_boost_round=model.n_estimators)
    return learned_from(model, base, rows, n_rows=len(table) + len(new_rows),
                        n_workloads=len(table.groups) + len(new_groups))
