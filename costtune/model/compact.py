"""``CompactModel``: a saved ``CostModel`` for scoring only, without xgboost or scikit-learn.

It reads the model's JSON (checked as ``CostModel.load`` checks it) and its
``<stem>.forest.npz`` (``costtune.model.forest``), which must have been made from the very
``<stem>.ubj`` beside the JSON (its sha256). The pruning hook loads shipped and saved models
this way (``model.registry.load_noted(..., compact=True)``), so a fresh process's first tuning
call does not import xgboost, scikit-learn or scipy; a model without a current forest file
raises ``ForestUnavailable`` and the caller falls back to ``CostModel``.

>>> model = CompactModel.load("h200")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from costtune.model.files import (
    check_booster,
    fitted_attributes,
    load_for_family,
    read_meta,
)
from costtune.model.files import resolve as _resolve
from costtune.model.forest import Forest, file_sha256, forest_path


class ForestUnavailable(LookupError):
    """A saved model has no forest file made from its current booster (missing or stale)."""


class CompactModel:
    """A saved model's metadata and its ``Forest``: what the pruning hook reads and scores.

    ``predict(rows)`` scores dataset-shaped rows like ``CostModel.predict`` (higher = predicted
    faster); ``registry.score`` scores feature tables through ``forest_``.
    """

    def __init__(self, meta: dict[str, Any], forest: Forest, path: Path) -> None:
        params = meta.get("params", {})
        self.path_ = path
        self.features = meta["feature_set"]
        self.objective = params.get("objective", "rank:pairwise")
        self.n_jobs = params.get("n_jobs", 1)
        self.family = params.get("family")
        for name, value in fitted_attributes(meta).items():
            setattr(self, name, value)
        if forest.n_features != len(self.feature_names_):
            raise ForestUnavailable(f"{path}: forest has {forest.n_features} features, the "
                                    f"model {len(self.feature_names_)}")
        self.forest_ = forest

    def __repr__(self) -> str:
        return (f"CompactModel({str(self.path_)!r}, objective={self.objective!r}, "
                f"features={self.features!r}, {self.forest_.n_trees} trees)")

    @classmethod
    def load(cls, path_or_name: str | os.PathLike) -> CompactModel:
        """A saved model (path or shipped name, as ``CostModel.load`` takes) with its forest.
        ``ModelSchemaError`` as ``CostModel.load``; ``ForestUnavailable`` when the forest file
        is missing, unreadable or made from another booster than the ``.ubj`` beside it."""
        json_path, _ = _resolve(path_or_name)
        meta = read_meta(json_path)
        booster = check_booster(json_path)
        npz = forest_path(json_path)
        if not npz.is_file():
            raise ForestUnavailable(f"{json_path}: no forest file {npz.name}")
        try:
            forest = Forest.load(npz)
        except ValueError as exc:
            raise ForestUnavailable(str(exc)) from None
        if forest.booster_sha256 != file_sha256(booster):
            raise ForestUnavailable(f"{npz}: made from another booster than {booster.name}")
        return cls(meta, forest, json_path)

    @classmethod
    def load_for(cls, path_or_name: str | os.PathLike, family: str
                 ) -> tuple[CompactModel, str | None]:
        """``CostModel.load_for``'s choice (a shipped name's ``<name>_<family>`` first, else
        ``<name>``), loaded compact; (model, a note when the family file was unusable)."""
        return load_for_family(cls.load, path_or_name, family)

    def predict(self, data: pd.DataFrame, **attach_kwargs: Any) -> np.ndarray:
        """One score per row; higher = predicted faster. Compare scores within a workload."""
        from costtune.model.features import design_matrix

        if len(data) == 0:
            return np.zeros(0)
        unknown = sorted(set(data["kernel"].astype(str)) - set(self.families_))
        if unknown and self.family != "all":
            raise ValueError(f"model trained on {self.families_} cannot score {unknown}; "
                             "a family='all' model can")
        x = design_matrix(data, self.feature_names_, features=self.features, **attach_kwargs)
        raw = np.asarray(self.forest_.predict(x), dtype=float)
        return -raw if self.objective == "reg:logtime" else raw
