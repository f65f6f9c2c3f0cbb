"""What ``Store.append`` checks in the rows it is given, before anything is written.

Each failure is one line naming the row (its position, workload and config) and the field:

>>> import pandas as pd
>>> rows = pd.DataFrame([{"kernel": "gemm", "workload": "w", "dtype": "float16", "M": 8,
...                       "N": 8, "K": 8, "config": "c", "status": "ok", "time_ms": "2.5"}])
>>> check_rows(rows)
Traceback (most recent call last):
...
ValueError: row 0 (workload 'w', config 'c'): field 'time_ms' is '2.5' (str); expected a number
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from costtune.types import Status

REQUIRED_COLUMNS = ("kernel", "workload", "dtype", "config", "status", "time_ms")
KEY_COLUMNS = ("workload", "config")
TEXT_COLUMNS = ("kernel", "workload", "dtype", "config", "status")
# Figures that must be numbers (or missing) whenever a row carries them.
NUMBER_COLUMNS = ("time_ms", "time_p20_ms", "time_p80_ms", "rel_err", "compile_s",
                  "ref_time_ms")
STORABLE_STATUS = frozenset(s.value for s in Status) - {Status.NOT_MEASURED.value}


def check_rows(df: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """(kernel family, rows with figure columns as float64); ValueError naming the first bad
    row and field otherwise."""
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"rows lack required column(s) {missing}")
    for col in TEXT_COLUMNS:
        bad = [i for i, v in enumerate(df[col]) if not isinstance(v, str) or not v.strip()]
        if bad:
            value = _show(df[col].iloc[bad[0]])
            raise ValueError(f"{_where(df, bad[0])}: field {col!r} is {value}; expected a "
                             "non-empty string")
    kernels = sorted(df["kernel"].unique())
    if len(kernels) != 1:
        raise ValueError(f"one part holds one kernel family; rows have kernel {kernels}")
    kernel = kernels[0]
    if kernel != Path(kernel).name or kernel.startswith("."):
        raise ValueError(f"kernel {kernel!r} is not a usable folder name")
    unknown = [i for i, s in enumerate(df["status"]) if s not in STORABLE_STATUS]
    if unknown:
        status = df["status"].iloc[unknown[0]]
        raise ValueError(f"{_where(df, unknown[0])}: field 'status' is {status!r}, not a storable"
                         f" status; expected one of {sorted(STORABLE_STATUS)}")
    _check_problem(df, kernel)
    df = df.copy()
    for col in NUMBER_COLUMNS:
        if col in df.columns:
            df[col] = _numbers(df, col)
    _check_times(df)
    dup = df.duplicated(list(KEY_COLUMNS))
    if dup.any():
        first = int(np.flatnonzero(dup.to_numpy())[0])
        raise ValueError(f"{_where(df, first)}: rows repeat this (workload, config)")
    if "gpu" in df.columns:
        bad = [i for i, v in enumerate(df["gpu"]) if not (v is None or isinstance(v, str)
                                                          or _is_nan(v))]
        if bad:
            raise ValueError(f"{_where(df, bad[0])}: field 'gpu' is "
                             f"{_show(df['gpu'].iloc[bad[0]])}; expected a GPU name")
    return kernel, df


def _check_problem(df: pd.DataFrame, kernel: str) -> None:
    """Rows of a suite family carry its problem sizes (features and replay are built on them);
    other kernels (a user's, harvested) are not checked."""
    from costtune.kernels import PROBLEM_KEYS

    keys = PROBLEM_KEYS.get(kernel, ())
    missing = [k for k in keys if k not in df.columns]
    if missing:
        raise ValueError(f"{kernel} rows lack problem column(s) {missing} (a {kernel} row needs "
                         f"{list(keys)})")
    for key in keys:
        bad = [i for i, v in enumerate(df[key]) if not _is_size(v)]
        if bad:
            raise ValueError(f"{_where(df, bad[0])}: problem field {key!r} is "
                             f"{_show(df[key].iloc[bad[0]])}; expected an integer")


def check_problem_sizes(df: pd.DataFrame) -> None:
    """ValueError naming the first suite-family row without its problem sizes (rows stored
    before ``Store.append`` checked them, or built by hand): features would be NaN."""
    for kernel, part in df.groupby(df["kernel"].astype(str), sort=True):
        _check_problem(part.reset_index(drop=True), str(kernel))


def _is_size(value: Any) -> bool:
    """An integer, a bool (attention's ``causal``) or an integral float (a widened column)."""
    if isinstance(value, (numbers.Integral, bool, np.bool_)):
        return True
    return isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer()


def _numbers(df: pd.DataFrame, col: str) -> pd.Series:
    values = df[col]
    if pd.api.types.is_bool_dtype(values.dtype):
        raise ValueError(f"{_where(df, 0)}: field {col!r} is boolean; expected a number")
    if not pd.api.types.is_numeric_dtype(values.dtype):
        for i, v in enumerate(values):
            if not (v is None or _is_nan(v) or (isinstance(v, numbers.Real)
                                                and not isinstance(v, bool))):
                raise ValueError(f"{_where(df, i)}: field {col!r} is {_show(v)}; "
                                 "expected a number")
    return pd.to_numeric(values, errors="raise").astype("float64")


def _check_times(df: pd.DataFrame) -> None:
    t = df["time_ms"].to_numpy()
    ok = (df["status"] == Status.OK.value).to_numpy()
    bad_ok = np.flatnonzero(ok & ~(np.isfinite(t) & (t > 0)))
    if len(bad_ok):
        i = int(bad_ok[0])
        raise ValueError(f"{_where(df, i)}: field 'time_ms' is {float(t[i])!r} in an 'ok' row; "
                         "expected a finite time > 0")
    bad_other = np.flatnonzero(~ok & ~(np.isnan(t) | (np.isfinite(t) & (t >= 0))))
    if len(bad_other):
        i = int(bad_other[0])
        raise ValueError(f"{_where(df, i)}: field 'time_ms' is {float(t[i])!r}; expected a finite "
                         "time >= 0 or NaN")


def _where(df: pd.DataFrame, i: int) -> str:
    row = df.iloc[i]
    return (f"row {i} (workload {_short(row.get('workload'))}, "
            f"config {_short(row.get('config'))})")


def _short(value: Any) -> str:
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 80 else text[:77] + "..."


def _show(value: Any) -> str:
    plain = value.item() if isinstance(value, np.generic) else value
    return f"{_short(plain)} ({type(plain).__name__})"


def _is_nan(value: Any) -> bool:
    return isinstance(value, float | np.floating) and math.isnan(value)
