"""The model's view of ``costtune.features``: which columns a feature set means, attaching them to
dataset rows, and building rows for bare ``Config`` objects (the pruning hook has no dataset).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from costtune.build.ir import IR_OK  # 1.0 when the TTIR and TTGIR stages ran
from costtune.types import Config, Workload

FEATURE_SETS = ("static", "static+src", "static+compiled", "static+ir", "static+ir+compiled")
KEY_COLUMNS = ("workload", "config")
# 1.0 when the AOT compile for sm_90 succeeded: OutOfResources and friends are known on CPU.
COMPILE_OK = "compile_ok"


def feature_names(features: str) -> list[str]:
    """Model input columns of a feature set, in booster order.

    >>> feature_names("static")[:3]
    ['kernel_gemm', 'kernel_softmax', 'kernel_attention']
    """
    _check_feature_set(features)
    from costtune.features.static import STATIC_FEATURES

    names = list(STATIC_FEATURES)
    if "+src" in features:
        from costtune.features.source import SOURCE_FEATURES

        names += SOURCE_FEATURES
    if "+ir" in features:
        from costtune.build.ir import IR_FEATURES

        names += [c for c in (IR_FEATURES + [IR_OK]) if c not in names]
    if features.endswith("+compiled"):
        from costtune.features.compiled import COMPILED_FEATURES

        names += [c for c in (COMPILED_FEATURES + [COMPILE_OK]) if c not in names]
    return names


def attach_features(data: pd.DataFrame, *, features: str = "static",
                    compiled: pd.DataFrame | None = None, ir: pd.DataFrame | None = None,
                    workers: int | None = None,
                    cache_dir: str | os.PathLike | None = None) -> pd.DataFrame:
    """``data`` plus the feature set's columns (those it lacks), same rows and order.

    ``compiled``: a precomputed ``compiled_features`` table keyed by (workload, config); without
    it compiled features are computed (AOT compile on CPU, cached under ``cache_dir``). ``ir``:
    the same for the ``+ir`` sets (an ``ir_features`` table; computed when absent). Static
    features that share a name with a dataset column (``num_warps``, ``causal``) hold the same
    value and are not duplicated.

    >>> row = {"kernel": "softmax", "workload": "w", "dtype": "float16", "rows": 8, "cols": 100,
    ...        "BLOCK_N": 128, "ROWS_PER_PROG": 1, "num_warps": 4, "num_stages": 1,
    ...        "config": "BLOCK_N=128,ROWS_PER_PROG=1,num_warps=4,num_stages=1"}
    >>> float(attach_features(pd.DataFrame([row]))["num_programs"].iloc[0])
    8.0
    """
    _check_feature_set(features)
    from costtune.features.static import STATIC_FEATURES, static_features

    out = data
    todo = [c for c in STATIC_FEATURES if c not in data.columns]
    if todo:
        feats = static_features(data)
        out = pd.concat([data, feats[todo].set_index(data.index)], axis=1)
    if "+src" in features:
        from costtune.features.source import SOURCE_FEATURES, source_features

        todo = [c for c in SOURCE_FEATURES if c not in out.columns]
        if todo:
            out = pd.concat([out, source_features(out)[todo]], axis=1)
    if "+ir" in features:
        names = [c for c in feature_names("static+ir") if c not in STATIC_FEATURES]
        todo = [c for c in names if c not in out.columns]
        if todo:
            if ir is None:
                from costtune.features.ir import ir_features

                ir = ir_features(data, workers=workers, cache_dir=cache_dir)
            out = _merge_table(out, ir, todo, status="ir_status", ok=IR_OK, what="IR")
    if features.endswith("+compiled"):
        names = [c for c in feature_names("static+compiled") if c not in STATIC_FEATURES]
        todo = [c for c in names if c not in out.columns]
        if todo:
            if compiled is None:
                from costtune.features.compiled import compiled_features

                compiled = compiled_features(data, workers=workers, cache_dir=cache_dir)
            out = _merge_compiled(out, compiled, todo)
    return out


def _merge_compiled(data: pd.DataFrame, table: pd.DataFrame, todo: list[str]) -> pd.DataFrame:
    return _merge_table(data, table, todo, status="compile_status", ok=COMPILE_OK,
                        what="compiled")


def _merge_table(data: pd.DataFrame, table: pd.DataFrame, todo: list[str], *, status: str,
                 ok: str, what: str) -> pd.DataFrame:
    """``data`` plus ``todo`` columns looked up in ``table`` by (workload, config); ``ok`` is
    derived from the ``status`` column when the table lacks it."""
    missing = [c for c in KEY_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"{what} feature table lacks key column(s) {missing}")
    table = table.drop_duplicates(list(KEY_COLUMNS))
    if ok in todo and ok not in table.columns:
        if status not in table.columns:
            raise ValueError(f"{what} feature table lacks {status!r}")
        table = table.assign(**{ok: (table[status] == "ok").astype(float)})
    absent = [c for c in todo if c not in table.columns]
    if absent:
        raise ValueError(f"{what} feature table lacks column(s) {absent[:5]}")
    keys = pd.MultiIndex.from_frame(data[list(KEY_COLUMNS)].astype(str))
    lookup = table.set_index([table[c].astype(str) for c in KEY_COLUMNS])[todo]
    lookup.index.names = list(KEY_COLUMNS)
    values = lookup.reindex(keys)
    values.index = data.index
    return pd.concat([data, values], axis=1)


def design_matrix(data: pd.DataFrame, names: Sequence[str], *, features: str,
                  **attach_kwargs: Any) -> np.ndarray:
    """Float32 matrix of ``names`` for ``data``, attaching the feature set's columns if absent.
    NaN stays NaN (XGBoost treats it as missing)."""
    if any(n not in data.columns for n in names):
        data = attach_features(data, features=features, **attach_kwargs)
    cols = [pd.to_numeric(data[n], errors="coerce").astype("float64") for n in names]
    if not cols:
        return np.zeros((len(data), 0), dtype=np.float32)
    return np.column_stack([c.to_numpy(na_value=np.nan) for c in cols]).astype(np.float32)


def config_rows(kernel: str, problem: dict[str, Any], dtype: str,
                configs: Sequence[Any], *, implementation: str | None = None) -> pd.DataFrame:
    """Dataset-shaped rows (kernel, workload, dtype, sizes, params, config key) for configs given
    as ``Config``, flat dicts or ``triton.Config``.

    >>> config_rows("softmax", {"rows": 8, "cols": 100}, "float16",
    ...             [Config({"BLOCK_N": 128, "ROWS_PER_PROG": 1}, num_warps=4)])["config"][0]
    'BLOCK_N=128,ROWS_PER_PROG=1,num_warps=4,num_stages=3'
    """
    workload = Workload(kernel, dict(problem), dtype, implementation=implementation)
    rows = []
    for c in configs:
        if isinstance(c, Config):
            cfg = c
        elif isinstance(c, dict):
            cfg = Config.from_dict(c)
        else:  # triton.Config
            cfg = Config.from_triton(c)
        rows.append({"kernel": workload.kernel, "implementation": workload.implementation,
                     "workload": workload.id, "dtype": dtype, **workload.sizes,
                     **cfg.as_dict(), "config": cfg.key})
    return pd.DataFrame(rows)


def _check_feature_set(features: str) -> None:
    if features not in FEATURE_SETS:
        raise ValueError(f"unknown feature set {features!r}; use one of {list(FEATURE_SETS)}")
