"""``CostModel``: an XGBoost model of per-workload relative speed, sklearn style.

Times are only comparable inside one workload (one uninterrupted run), so every target is
relative to the workload's best OK time ``L*`` (TVM MetaSchedule's ``min_cost / cost``):

- ``reg:relthroughput``: regress ``L* / t`` in (0, 1]; failures get 0 (as MetaSchedule does).
- ``reg:logtime``: regress ``log(t / L*)`` >= 0; failures get ``log(2 * slowest / L*)``.
- ``rank:pairwise`` / ``rank:ndcg``: learning to rank with one query group per workload on
  integer grades ``max(1, 31 + round(12 * log2(L* / t)))`` (one grade per ~6% of speed,
  a config 6x slower than the best reaches grade 1); failures get grade 0.

``failures="drop"`` trains on OK rows only. Workloads without any OK row carry no target and
are skipped. ``original_weight``: in training, each workload of a family's original kernel (rows
without an ``implementation``, or naming the family) weighs this many times a workload of
another implementation (the shipped GEMM stage 1 learns every GEMM implementation with the
original's workloads at 8, chosen on training data: experiments/impl_descriptor.py).
``predict`` returns higher = predicted faster for every objective.

``n_jobs`` defaults to 1: on the shared 2-core box, XGBoost's OpenMP threads spin-wait when
another process holds a core, and nthread=2 measured 10x (rank:pairwise, 25k rows: 6.6 s vs
70 s) to 60x slower than nthread=1 under load.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
import warnings
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from costtune.evaluate.metrics import rank_positions, true_times
from costtune.kernels.base import SIZE_KEYS
from costtune.model.features import (
    FEATURE_SETS,
    config_rows,
    design_matrix,
    feature_names,
)
from costtune.model.files import (
    MODEL_FORMAT,
    MODEL_SCHEMA_VERSION,
    ModelSchemaError,  # noqa: F401  (re-exported: where tests and users find it)
    fitted_attributes,
    load_booster,
    load_for_family,
    read_meta,
    table_path,
)
from costtune.model.files import model_paths as _model_paths
from costtune.model.files import resolve as _resolve
from costtune.model.forest import write_forest
from costtune.store.checks import check_problem_sizes
from costtune.types import Config

OBJECTIVES = ("rank:pairwise", "rank:ndcg", "reg:logtime", "reg:relthroughput")
FAMILY_OPTIONS = (None, "all", "gemm", "softmax", "attention")
_GRADES_PER_OCTAVE = 12
_TOP_GRADE = 31  # XGBoost's exponential NDCG gain needs labels < 32


class CostModel(BaseEstimator):
    """Learned ranking of configs within a workload.

    >>> from costtune.model.xgb import CostModel
    >>> model = CostModel(objective="reg:relthroughput", n_estimators=50)
    >>> model.get_params()["objective"]
    'reg:relthroughput'

    Typical use: ``CostModel().fit(train_rows)``; ``model.rank(rows_of_one_workload)``;
    ``model.top_k("gemm", {"M": 512, "N": 512, "K": 512}, "float16", configs, 8)``.
    """

    def __init__(self, *, objective: str = "rank:pairwise", features: str = "static",
                 family: str | None = None, n_estimators: int = 300, max_depth: int = 6,
                 learning_rate: float = 0.1, min_child_weight: float = 1.0,
                 subsample: float = 1.0, colsample_bytree: float = 1.0,
                 reg_lambda: float = 1.0, failures: str = "worst",
                 original_weight: float = 1.0, n_jobs: int = 1, seed: int = 0) -> None:
        self.objective = objective
        self.features = features
        self.family = family
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_child_weight = min_child_weight
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.reg_lambda = reg_lambda
        self.failures = failures
        self.original_weight = original_weight
        self.n_jobs = n_jobs
        self.seed = seed

    # ----------------------------------------------------------------------------- training
    def fit(self, data: pd.DataFrame, **attach_kwargs: Any) -> CostModel:
        """Train on dataset rows (any status); returns ``self``. ``attach_kwargs`` go to
        ``attach_features`` when feature columns are missing (``compiled=``, ``cache_dir=``)."""
        import xgboost as xgb

        self._check_params()
        data = self._select_family(data)
        self.families_ = sorted(data["kernel"].astype(str).unique())
        rows, target, groups = self._targets(data)
        self.feature_names_ = feature_names(self.features)
        x = design_matrix(rows, self.feature_names_, features=self.features, **attach_kwargs)
        dmat = xgb.DMatrix(x, label=target, feature_names=self.feature_names_,
                           nthread=self.n_jobs)
        if self.objective.startswith("rank:"):
            dmat.set_group(groups)
        weights = self.weights(rows, groups)
        if weights is not None:
            dmat.set_weight(weights)
        self.booster_ = xgb.train(self._xgb_params(), dmat, num_boost_round=self.n_estimators)
        self.train_hash_ = dataset_hash(data)
        self.shape_ranges_ = shape_ranges(data)
        self.n_train_rows_ = int(len(rows))
        self.n_train_workloads_ = int(len(groups))
        gpus = data["gpu"].dropna().astype(str).unique() if "gpu" in data else []
        self.gpu_ = ", ".join(sorted(gpus)) or None
        self.triton_version_ = _version("triton")
        return self

    def _check_params(self) -> None:
        checks = {"objective": (self.objective, OBJECTIVES),
                  "features": (self.features, FEATURE_SETS),
                  "family": (self.family, FAMILY_OPTIONS),
                  "failures": (self.failures, ("worst", "drop"))}
        for name, (value, allowed) in checks.items():
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r}; use one of {list(allowed)}")
        if int(self.n_estimators) < 1:
            raise ValueError(f"n_estimators must be >= 1, got {self.n_estimators}")
        w = self.original_weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w < float("inf"):
            raise ValueError(f"original_weight must be a positive number, got {w!r}")

    def weights(self, rows: pd.DataFrame, groups: np.ndarray) -> np.ndarray | None:
        """XGBoost's weights for training ``rows`` (``_targets``' rows and groups): per query
        group for the rank objectives, else per row; ``original_weight`` for the family's
        original kernel, 1 for every other implementation. None when all are 1."""
        if float(self.original_weight) == 1.0:
            return None
        kernel = rows["kernel"].astype(str)
        impl = (rows["implementation"].fillna(rows["kernel"]).astype(str)
                if "implementation" in rows else kernel)
        per_row = np.where((impl == kernel).to_numpy(), float(self.original_weight), 1.0)
        if self.objective.startswith("rank:"):
            return per_row[np.concatenate([[0], np.cumsum(groups)[:-1]]).astype(int)]
        return per_row

    def _select_family(self, data: pd.DataFrame) -> pd.DataFrame:
        missing = int(data["kernel"].isna().sum())
        kernels = sorted(data["kernel"].dropna().astype(str).unique())
        if missing and self.family in (None, "all"):
            raise ValueError(f"{missing} rows have no kernel (e.g. harvested kernels that read "
                             "as no family): drop them or pass one family")
        if self.family not in (None, "all"):
            data = data[data["kernel"] == self.family]
        elif self.family is None and len(kernels) > 1:
            raise ValueError(f"family=None trains one kernel family but the data holds {kernels};"
                             " pass family='all' or one family's rows")
        if data.empty:
            raise ValueError(f"no rows to train on (family={self.family!r}, data has {kernels})")
        check_problem_sizes(data)
        return data

    def _targets(self, data: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
        times = true_times(data)
        ok = np.isfinite(times)
        frame = pd.DataFrame({"w": _query_groups(data), "t": times})
        best = frame.groupby("w")["t"].transform("min").to_numpy()
        worst = frame["t"].where(ok).groupby(frame["w"]).transform("max").to_numpy()
        keep = np.isfinite(best) & (ok | (self.failures == "worst"))
        rel = np.where(ok, best / np.where(ok, times, 1.0), 0.0)
        if self.objective == "reg:relthroughput":
            y = rel
        elif self.objective == "reg:logtime":
            y = np.where(ok, np.log(np.where(ok, times, 1.0) / best), np.log(2 * worst / best))
        else:
            grade = _TOP_GRADE + np.round(_GRADES_PER_OCTAVE * np.log2(np.maximum(rel, 1e-30)))
            y = np.where(ok, np.clip(grade, 1, _TOP_GRADE), 0.0)
        # Rank objectives need each query group contiguous: order rows by workload.
        idx = np.flatnonzero(keep)
        idx = idx[np.argsort(frame["w"].to_numpy()[idx], kind="stable")]
        rows = data.iloc[idx]
        _, groups = np.unique(frame["w"].to_numpy()[idx], return_counts=True)
        return rows, y[idx].astype(np.float32), groups

    def _xgb_params(self) -> dict[str, Any]:
        objective = {"reg:relthroughput": "reg:squarederror",
                     "reg:logtime": "reg:squarederror"}.get(self.objective, self.objective)
        params = {"objective": objective, "tree_method": "hist",
                  "max_depth": int(self.max_depth), "eta": float(self.learning_rate),
                  "min_child_weight": float(self.min_child_weight),
                  "subsample": float(self.subsample),
                  "colsample_bytree": float(self.colsample_bytree),
                  "lambda": float(self.reg_lambda), "nthread": int(self.n_jobs),
                  "seed": int(self.seed), "verbosity": 0}
        if self.objective == "rank:pairwise":
            params.update(lambdarank_pair_method="mean", lambdarank_num_pair_per_sample=8)
        return params

    # ---------------------------------------------------------------------------- inference
    def predict(self, data: pd.DataFrame, **attach_kwargs: Any) -> np.ndarray:
        """One score per row; higher = predicted faster. Compare scores within a workload."""
        import xgboost as xgb

        self._check_fitted()
        if len(data) == 0:
            return np.zeros(0)
        unknown = sorted(set(data["kernel"].astype(str)) - set(self.families_))
        if unknown and self.family != "all":
            raise ValueError(f"model trained on {self.families_} cannot score {unknown}; "
                             "a family='all' model can")
        x = design_matrix(data, self.feature_names_, features=self.features, **attach_kwargs)
        raw = self.booster_.predict(xgb.DMatrix(x, feature_names=self.feature_names_,
                                                nthread=self.n_jobs))
        raw = np.asarray(raw, dtype=float)
        return -raw if self.objective == "reg:logtime" else raw

    def rank(self, data: pd.DataFrame, **attach_kwargs: Any) -> np.ndarray:
        """Row positions best first (meant for one workload's rows); ties by config key."""
        scores = self.predict(data, **attach_kwargs)
        return rank_positions(scores, data["config"].astype(str).to_numpy())

    def top_k(self, kernel: str, problem: dict[str, Any], dtype: str,
              configs: Sequence[Any], k: int) -> list[Config]:
        """The ``k`` configs predicted fastest for one problem, best first (the pruning hook).

        Warns when the problem lies outside the shapes the model was trained on.
        """
        self._check_fitted()
        if kernel not in self.families_:
            raise ValueError(f"model trained on {self.families_}, not on kernel {kernel!r}")
        if int(k) < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        for message in self.out_of_range(kernel, problem):
            warnings.warn(message, stacklevel=2)
        if not configs:
            return []
        rows = config_rows(kernel, problem, dtype, configs)
        order = self.rank(rows)[: int(k)]
        return [Config.from_dict(dict(c)) if isinstance(c, dict) else
                c if isinstance(c, Config) else Config.from_triton(c)
                for c in (configs[i] for i in order)]

    def out_of_range(self, kernel: str, problem: dict[str, Any]) -> list[str]:
        """Messages for problem sizes outside the training range (log2 min/max) of ``kernel``."""
        self._check_fitted()
        ranges = self.shape_ranges_.get(kernel, {})
        out = []
        for key, (lo, hi) in ranges.items():
            if key in problem and problem[key] is not None and float(problem[key]) > 0:
                v = float(np.log2(float(problem[key])))
                if v < lo - 1e-9 or v > hi + 1e-9:
                    out.append(f"{kernel} {key}={problem[key]} is outside the trained range "
                               f"[{2 ** lo:g}, {2 ** hi:g}]; predictions may be poor")
        return out

    def _check_fitted(self) -> None:
        if not hasattr(self, "booster_"):
            raise ValueError("this CostModel is not fitted; call fit(data) or CostModel.load()")

    # -------------------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write ``<path>.json`` (metadata), ``<path>.ubj`` (booster) and
        ``<path>.forest.npz`` (the booster's trees for the pruning hook's xgboost-free
        scorer, ``model.forest``); returns the JSON path. They belong together by their stem
        (``costtune.model.files``): a copied or renamed pair loads its own booster.
        A training table of an earlier model of that name (``<path>.train.npz``) is removed:
        ``costtune.model.training.save_with_table`` writes the model with its own.

        The JSON holds the schema version, params, feature list, families, GPU, triton version,
        training data hash and per-family training shape ranges (log2 min/max).
        """
        self._check_fitted()
        json_path, ubj_path = _model_paths(path)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        # Each file written under a temporary name, then moved in place, the JSON last: an
        # interrupted save leaves the earlier model whole, not its JSON over a new booster.
        tag = uuid.uuid4().hex[:8]
        tmp_ubj = ubj_path.with_name(f".{ubj_path.stem}.{tag}.ubj")
        tmp_json = json_path.with_name(f".{json_path.stem}.{tag}.json")
        try:
            self.booster_.save_model(str(tmp_ubj))
            tmp_json.write_text(json.dumps(self._meta(ubj_path), indent=1) + "\n")
            table_path(json_path).unlink(missing_ok=True)  # an earlier model's no longer applies
            os.replace(tmp_ubj, ubj_path)  # the pair apart only between these two renames
            os.replace(tmp_json, json_path)
            # The hook's xgboost-free scorer: a forest of another booster is never used (it
            # records the booster's hash), so it is written last.
            write_forest(json_path, self.booster_)
        finally:
            tmp_ubj.unlink(missing_ok=True)
            tmp_json.unlink(missing_ok=True)
        return json_path

    def _meta(self, ubj_path: Path) -> dict[str, Any]:
        import xgboost as xgb

        return {
            "format": MODEL_FORMAT, "schema_version": MODEL_SCHEMA_VERSION,
            "params": self.get_params(), "feature_set": self.features,
            "feature_names": list(self.feature_names_), "families": list(self.families_),
            "gpu": self.gpu_, "triton_version": self.triton_version_,
            "xgboost_version": xgb.__version__, "train_hash": self.train_hash_,
            "n_train_rows": self.n_train_rows_, "n_train_workloads": self.n_train_workloads_,
            "shape_ranges": self.shape_ranges_, "booster": ubj_path.name,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }

    @classmethod
    def load_for(cls, path_or_name: str | os.PathLike, family: str
                 ) -> tuple[CostModel, str | None]:
        """The model that serves ``family``: for a shipped name such as ``"h200"``, the family's
        own ``h200_<family>`` when shipped, else the cross-family ``h200``; a path loads as is.
        Returns (model, a note when a family file was unusable and passed over)."""
        return load_for_family(cls.load, path_or_name, family)

    @classmethod
    def load(cls, path_or_name: str | os.PathLike) -> CostModel:
        """Load a saved model: a path (``.json``, ``.ubj`` or no suffix) or a shipped name such
        as ``"h200"`` (``costtune/models/h200.json``; then the user's models, see
        ``costtune.model.files``). Raises ``ModelSchemaError`` for a file made for another
        schema or feature list or a missing or unreadable booster (``<stem>.ubj`` beside the
        JSON), ``FileNotFoundError`` when the JSON is absent."""
        json_path, _ = _resolve(path_or_name)
        meta = read_meta(json_path)  # format, schema, parameter names, feature list
        model = cls(**meta["params"])
        model.booster_ = load_booster(json_path)
        for name, value in fitted_attributes(meta).items():
            setattr(model, name, value)
        return model


def dataset_hash(data: pd.DataFrame) -> str:
    """Order-independent hash of (workload, config, status, time_ms): which data trained a model.

    >>> df = pd.DataFrame({"workload": ["w", "w"], "config": ["a", "b"], "status": "ok",
    ...                    "time_ms": [1.0, 2.0]})
    >>> dataset_hash(df) == dataset_hash(df.iloc[::-1])
    True
    """
    cols = [c for c in ("workload", "config", "status", "time_ms") if c in data.columns]
    text = sorted(zip(*(data[c].astype(object).map(str) for c in cols), strict=True))
    return hashlib.sha256("\n".join(map("\t".join, text)).encode()).hexdigest()[:16]


def shape_ranges(data: pd.DataFrame) -> dict[str, dict[str, tuple[float, float]]]:
    """Per family and problem key: (min, max) of log2 size over the rows."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for kernel, group in data.groupby(data["kernel"].astype(str)):
        ranges = {}
        for key in SIZE_KEYS.get(kernel, ()):
            if key in group:
                v = pd.to_numeric(group[key], errors="coerce").astype("float64")
                v = v[v > 0]
                if len(v):
                    ranges[key] = (float(np.log2(v.min())), float(np.log2(v.max())))
        out[kernel] = ranges
    return out


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _query_groups(data: pd.DataFrame) -> np.ndarray:
    """Each row's query group: its workload, and its GPU where the rows come from several (a
    config is ranked against those timed on the same GPU, never across GPUs)."""
    workload = data["workload"].astype(str).to_numpy()
    if "gpu" not in data.columns:
        return workload
    gpu = data["gpu"].astype(str).to_numpy()
    if len(set(gpu)) < 2:
        return workload
    return np.char.add(np.char.add(workload.astype(str), " @ "), gpu.astype(str))
