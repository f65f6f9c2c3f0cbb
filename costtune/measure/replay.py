"""Answer measurements from a recorded dataset, so search and hook tests run on CPU.

``ReplayRunner`` has the GPU runner's interface, ``measure(workload, configs)``, and returns
exactly the stored figures; a config the dataset lacks comes back ``Status.NOT_MEASURED``
with no time. Nothing is interpolated or invented.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from costtune.kernels import PROBLEM_KEYS
from costtune.types import Config, Measurement, Status, Workload

_FIGURES = ("time_ms", "time_p20_ms", "time_p80_ms", "rel_err", "compile_s")
_CORE = ("kernel", "workload", "dtype", "implementation", "config", "status", *_FIGURES, "error")


class ReplayRunner:
    """Replays a dataset (DataFrame, or a path for ``costtune.load_dataset``); ``gpu`` keeps
    one GPU model's rows (needed where the dataset holds a workload from several).

    >>> import pandas as pd
    >>> from costtune import Config, Workload
    >>> w = Workload("softmax", {"rows": 4096, "cols": 1024}, "float16")
    >>> c = Config({"ROWS_PER_PROG": 2}, num_warps=4, num_stages=1)
    >>> runner = ReplayRunner(pd.DataFrame([{"kernel": "softmax", "workload": w.id,
    ...     "dtype": "float16", "rows": 4096, "cols": 1024, **c.as_dict(), "config": c.key,
    ...     "status": "ok", "time_ms": 0.012}]))
    >>> [str(m.status) for m in runner.measure(w, [c, Config({"ROWS_PER_PROG": 8})])]
    ['ok', 'not_measured']
    >>> runner.best(runner.workloads()[0]).time_ms, runner.n_measured
    (0.012, 2)
    """

    def __init__(self, dataset: pd.DataFrame | str | os.PathLike, *,
                 gpu: str | None = None) -> None:
        if isinstance(dataset, pd.DataFrame):
            df = dataset.reset_index(drop=True)
        else:
            df = _load(dataset, gpu)
        missing = [c for c in ("kernel", "workload", "dtype", "config", "status", "time_ms")
                   if c not in df.columns]
        if missing:
            raise ValueError(f"replay dataset lacks column(s) {missing}")
        if gpu is not None and isinstance(dataset, pd.DataFrame):
            df = rows_of_gpu(df, gpu)
        dup = df.duplicated(["workload", "config"])
        if dup.any():
            key = tuple(df.loc[dup.idxmax(), ["workload", "config"]])
            gpus = sorted(df.loc[df["workload"] == key[0], "gpu"].dropna().astype(str).unique()
                          ) if "gpu" in df.columns else []
            if len(gpus) > 1:
                raise ValueError(f"replay dataset holds workload {key[0]} from {len(gpus)} GPU "
                                 f"models {gpus}: pass gpu= (the CLI's --gpu) to replay one")
            raise ValueError(f"replay dataset repeats (workload, config) {key}")
        self.data = df
        self.n_measured = 0  # configs asked for through measure(), found or not
        self.n_calls = 0  # measure() calls
        keys = zip(df["workload"], df["config"], strict=True)
        self._row_of = {key: i for i, key in enumerate(keys)}
        self._rows_by_workload: dict[str, list[int]] = {}
        for i, wid in enumerate(df["workload"]):
            self._rows_by_workload.setdefault(wid, []).append(i)
        self._records: dict[int, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return (f"ReplayRunner({len(self.data)} rows, {len(self._rows_by_workload)} workloads, "
                f"n_measured={self.n_measured})")

    def measure(self, workload: Workload, configs: list[Config]) -> list[Measurement]:
        """The stored measurement of each config, in order; NOT_MEASURED where none exists."""
        self.n_calls += 1
        self.n_measured += len(configs)
        out = []
        for config in configs:
            i = self._row_of.get((workload.id, config.key))
            if i is None:
                out.append(Measurement(workload, config, Status.NOT_MEASURED,
                                       error="no row for this (workload, config) in the "
                                             "replay dataset"))
            else:
                out.append(self._measurement(workload, config, self._record(i)))
        return out

    def workloads(self, kernel: str | None = None) -> list[Workload]:
        """Workloads in the dataset (order of first appearance), optionally one family's."""
        out = []
        for wid, rows in self._rows_by_workload.items():
            rec = self._record(rows[0])
            if kernel is not None and rec["kernel"] != kernel:
                continue
            keys = problem_keys(rec["kernel"])
            impl = rec.get("implementation")
            w = Workload(rec["kernel"], {k: _native(rec.get(k)) for k in keys}, rec["dtype"],
                         implementation=impl if isinstance(impl, str) else None)
            if w.id != wid:
                raise ValueError(f"row for workload {wid!r} rebuilds as {w.id!r}: its problem "
                                 f"columns {list(keys)} disagree with the workload id")
            out.append(w)
        return out

    def configs(self, workload: Workload) -> list[Config]:
        """Configs recorded for ``workload`` (any status), in dataset order."""
        return [self._config(self._record(i)) for i in self._rows(workload)]

    def best(self, workload: Workload) -> Measurement:
        """The fastest OK measurement of ``workload`` (an oracle: not counted in n_measured)."""
        best_rec = None
        for i in self._rows(workload):
            rec = self._record(i)
            if rec["status"] == Status.OK.value and not _isnull(rec["time_ms"]) and (
                    best_rec is None or rec["time_ms"] < best_rec["time_ms"]):
                best_rec = rec
        if best_rec is None:
            raise ValueError(f"workload {workload.id} has no OK measurement in the dataset")
        return self._measurement(workload, self._config(best_rec), best_rec)

    def _rows(self, workload: Workload) -> list[int]:
        rows = self._rows_by_workload.get(workload.id)
        if rows is None:
            known = list(self._rows_by_workload)[:5]
            raise ValueError(f"workload {workload.id} is not in the replay dataset "
                             f"(it has e.g. {known})")
        return rows

    def _record(self, i: int) -> dict[str, Any]:
        rec = self._records.get(i)
        if rec is None:
            # Convert one workload's rows at a time: per-row iloc is slow, the whole frame big.
            rows = self._rows_by_workload[self.data.at[i, "workload"]]
            for j, r in zip(rows, self.data.iloc[rows].to_dict("records"), strict=True):
                self._records[j] = r
            rec = self._records[i]
        return rec

    def _config(self, rec: dict[str, Any]) -> Config:
        values = {}
        for item in rec["config"].split(","):
            name, text = item.split("=", 1)
            value = rec.get(name)
            values[name] = _parse(text) if _isnull(value) else _native(value)
        config = Config.from_dict(values)
        if config.key != rec["config"]:
            raise ValueError(f"parameter columns rebuild config {config.key!r}, but the row's "
                             f"config key is {rec['config']!r}")
        return config

    def _measurement(self, workload: Workload, config: Config,
                     rec: dict[str, Any]) -> Measurement:
        skip = {*_CORE, *problem_keys(rec["kernel"]), *config.as_dict()}
        extra = {k: _scalar(v) for k, v in rec.items() if k not in skip and not _isnull(v)}
        return Measurement(
            workload, config, Status(rec["status"]),
            **{f: float("nan") if _isnull(rec.get(f)) else float(rec[f]) for f in _FIGURES},
            error="" if _isnull(rec.get("error")) else str(rec["error"]),
            extra=extra,
        )


def _load(path: str | os.PathLike, gpu: str | None) -> pd.DataFrame:
    """``load_dataset(path)``, only GPU model ``gpu``'s rows where given."""
    from costtune.store.dataset import StoreWarning, load_dataset

    if gpu is None:
        return load_dataset(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreWarning)  # replaced by the error below
        df = load_dataset(path, gpu=gpu)
    if df.empty:
        everything = load_dataset(path)
        if "gpu" not in everything.columns:  # one GPU model, named in the parts' metadata
            raise ValueError(f"replay dataset {path} has no rows for GPU {gpu!r}; it has "
                             f"{_metadata_gpus(Path(path))}")
        rows_of_gpu(everything, gpu)  # raises, naming the GPU models there are
    return df


def _metadata_gpus(path: Path) -> list[str]:
    """The GPU models the parts under ``path`` (or the part itself) name in their metadata."""
    from costtune.store.parts import check_meta, read_schema

    parts = [path] if path.is_file() else sorted(path.rglob("part-*.parquet"))
    names = set()
    for part in parts:
        try:
            names.add(str(check_meta(part, read_schema(part)).get("gpu")))
        except ValueError:  # StoreError: load_dataset read them, so this is rare
            continue
    return sorted(names)


def rows_of_gpu(df: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """The rows of ``df`` measured on GPU model ``gpu``."""
    if "gpu" not in df.columns:
        raise ValueError(f"replay dataset has no gpu column to choose GPU {gpu!r} by (its rows "
                         "are from one GPU model or name none)")
    names = df["gpu"].map(lambda v: None if _isnull(v) else str(v))
    keep = (names == gpu).to_numpy(dtype=bool)
    if not keep.any():
        known = sorted(names.dropna().unique())
        raise ValueError(f"replay dataset has no rows for GPU {gpu!r}; it has {known}")
    return df[keep].reset_index(drop=True)


def problem_keys(kernel: str) -> tuple[str, ...]:
    """Problem-size column names of a kernel family."""
    try:
        return PROBLEM_KEYS[kernel]
    except KeyError:
        known = list(PROBLEM_KEYS)
        raise ValueError(f"unknown kernel family {kernel!r}; known: {known}") from None


def _isnull(value: Any) -> bool:
    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def _scalar(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _native(value: Any) -> Any:
    """Python scalar; integral floats (an int column widened by a missing family) become int."""
    value = _scalar(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _parse(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)
