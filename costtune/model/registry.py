"""One loader for every cost model: the pruning hook, Optuna studies and evaluation all take a
model the same way (a fitted ``CostModel``, a saved model's path, or a shipped name such as
``"h200"``, where the family's own ``h200_<family>`` is preferred) and score configs through
the same calls.

Files load once per process (keyed by path, family, the file's modification time, so a
retrained model at the same path is picked up, and ``compact``: the pruning hook loads a
saved model as a ``CompactModel``, scored by its ``Forest`` without importing xgboost,
scikit-learn or scipy, when the model's forest file is current). Scoring calls the forest or
the booster directly on a float matrix in the model's feature order: ``CostModel.predict``'s
DataFrame path costs ~20 ms for 1,000 configs, over the hook's budget.

>>> from costtune.model.registry import load_model
>>> model = load_model("h200", "gemm")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from costtune.model.files import ModelSchemaError, is_shipped_name, resolve
from costtune.types import Config, Workload

_MODELS: dict[tuple, tuple[Any, str | None]] = {}
_LOAD_LOCK = threading.Lock()  # one load per model, whichever thread asks first


def _fresh_lock_in_child() -> None:
    # A lock held by the parent's preload thread at a fork would stay held in the child.
    global _LOAD_LOCK
    _LOAD_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_in_child)


def is_loaded(model: str | os.PathLike, family: str | None = None) -> bool:
    """Whether ``model`` (a path or shipped name) for ``family`` is already in memory."""
    text = os.fspath(model)
    return any(k[0] == text and k[1] == family for k in _MODELS)


def load_model(model: Any, family: str | None = None) -> Any:
    """A fitted model for ``family`` (any family with ``family=None``); see ``load_noted``."""
    return load_noted(model, family)[0]


def load_noted(model: Any, family: str | None = None, *,
               kernel_dir: str | os.PathLike | None = None,
               compact: bool = False) -> tuple[Any, str | None]:
    """(fitted model, a note when a family model was passed over).

    ``model``: a ``CostModel`` (checked against this code's feature schema), any other object
    with ``predict(rows)`` (used as it is), a saved model's path or a shipped name. Raises
    (FileNotFoundError, ModelSchemaError, ...) when no model loads. ``kernel_dir``: a
    per-kernel model folder (``costtune.model.learned``); when it holds a current model
    learned from ``model`` (a name or path) for ``family``, that one is returned instead (an
    unusable one is passed over with a note). ``compact``: a name or path loads as a
    ``CompactModel`` (scored without xgboost) when its forest file is current, else as a
    ``CostModel``.
    """
    if kernel_dir is not None and family and isinstance(model, str | os.PathLike):
        learned, note = _load_learned(os.fspath(model), family, kernel_dir, compact)
        if learned is not None:
            return learned, None
        loaded, other = load_noted(model, family, compact=compact)
        return loaded, note or other

    if _is_cost_model(model):
        model._check_fitted()
        _check_features(model)
        return _single_threaded(model), None
    if not isinstance(model, str | os.PathLike):
        if not hasattr(model, "predict"):
            raise ValueError(f"a cost model needs predict(rows); got {type(model).__name__}")
        return model, None
    text = os.fspath(model)
    candidates = [f"{text}_{family}", text] if family and is_shipped_name(text) else [text]
    stamps = []
    for name in candidates:
        try:
            stamps.append(os.stat(resolve(name)[0]).st_mtime_ns)
        except (OSError, FileNotFoundError):
            stamps.append(None)
    key = (text, family, tuple(stamps), bool(compact))
    with _LOAD_LOCK:
        if key not in _MODELS:
            loaded = _load_compact(text, family) if compact else None
            if loaded is None:
                from costtune.model.xgb import CostModel

                loaded = (CostModel.load_for(text, family) if family
                          else (CostModel.load(text), None))
            _MODELS[key] = (_single_threaded(loaded[0]), loaded[1])
        return _MODELS[key]


def _is_cost_model(model: Any) -> bool:
    # Only a loaded costtune.model.xgb can have made a CostModel: never import it to ask.
    xgb = sys.modules.get("costtune.model.xgb")
    return xgb is not None and isinstance(model, xgb.CostModel)


def _load_compact(text: str, family: str | None) -> tuple[Any, str | None] | None:
    """(CompactModel, note) of a name or path; None when it has no current forest file."""
    from costtune.model.compact import CompactModel, ForestUnavailable

    try:
        return (CompactModel.load_for(text, family) if family
                else (CompactModel.load(text), None))
    except ForestUnavailable:
        return None


def _load_learned(base: str, family: str, folder: str | os.PathLike, compact: bool
                  ) -> tuple[Any, str | None]:
    """(the folder's current model, None) when it was learned from ``base`` for ``family``;
    (None, a note) when it is unusable; (None, None) when there is none."""
    from costtune.model.files import current_model

    found = current_model(folder)
    if found is None:
        return None, None
    path, record = found
    if record.get("base") != base or record.get("family") != family:
        return None, None
    try:
        loaded = load_noted(str(path), compact=compact)[0]
        loaded.learned_path_ = str(path)
        return loaded, None
    except Exception as exc:  # e.g. removed between the pointer's read and the load
        return None, f"per-kernel model {path} is unusable ({type(exc).__name__}: {exc})"


def default_stage2(model: Any) -> Any:
    """The stage-2 model when none is given: a shipped name's compiled-feature sibling
    (``"h200"`` -> ``"h200_compiled"``), else ``model`` itself."""
    if isinstance(model, str) and is_shipped_name(model):
        return f"{model}_compiled"
    return model


def _check_features(model: Any) -> None:
    """What ``CostModel.load`` checks for a file, for a model handed over in memory."""
    from costtune.model.features import feature_names

    lacking = sorted(set(model.feature_names_) - set(feature_names(model.features)))
    if lacking:
        raise ModelSchemaError(f"model was trained on another feature schema: features this "
                               f"costtune does not compute ({lacking[:8]}); retrain it")


def _single_threaded(model: Any) -> Any:
    # One thread: on a shared or busy host XGBoost's OpenMP threads spin-wait (see xgb.py).
    if hasattr(model, "booster_") and not getattr(model, "_hook_threads_set", False):
        model.booster_.set_param({"nthread": int(model.n_jobs)})
        model._hook_threads_set = True
    return model


def score(model: Any, features: pd.DataFrame) -> np.ndarray:
    """Scores (higher = predicted faster) of feature rows; absent columns count as missing,
    except a static+src model's source features (what tells implementations apart: without
    them it would rank every kernel as some other one): ValueError."""
    if "+src" in getattr(model, "features", "") and "src_loops" not in features.columns:
        raise ValueError("this model reads the kernel's source features (static+src); attach "
                         "them (costtune.model.features.attach_features(rows, "
                         "features=model.features)) before scoring")
    if list(features.columns) != model.feature_names_:
        features = features.reindex(columns=model.feature_names_)
    x = features.to_numpy(dtype=np.float32)
    forest = getattr(model, "forest_", None)
    raw = forest.predict(x) if forest is not None else model.booster_.inplace_predict(x)
    raw = np.asarray(raw, dtype=float)
    return -raw if model.objective == "reg:logtime" else raw


def model_scores(model: Any, workload: Workload, *, configs: Sequence[Config]) -> np.ndarray:
    """The model's score of each config for ``workload`` (higher = predicted faster).

    ``model`` is anything with ``predict(rows)`` over dataset-shaped rows (a ``CostModel``).
    """
    from costtune.model.features import config_rows

    if not hasattr(model, "predict"):
        raise ValueError(f"a warm-start model needs predict(rows); got {type(model).__name__}")
    rows = config_rows(workload.kernel, workload.sizes, workload.dtype, list(configs),
                       implementation=workload.implementation)
    scores = np.asarray(model.predict(rows), dtype=float)
    if scores.shape != (len(configs),):
        raise ValueError(f"model returned {scores.shape} scores for {len(configs)} configs")
    return scores


def rank_configs(model: Any, workload: Workload, *, configs: Sequence[Config]) -> list[Config]:
    """``configs`` ordered best-predicted first (ties by config key, so the order is stable)."""
    configs = list(configs)
    scores = model_scores(model, workload, configs=configs)
    order = sorted(range(len(configs)), key=lambda i: (-scores[i], configs[i].key))
    return [configs[i] for i in order]
