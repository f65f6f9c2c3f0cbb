"""The small harness every experiment runs on: paths, a provenance header, reports from
DataFrames.

One research question, one report: ``results/<question>.md`` beside ``results/<question>.csv``
(and a ``.png`` where there is a figure). Raw per-run files of the GPU experiments live under
``results/raw/<question>/`` and device logs under ``results/logs/``; their report steps rebuild
the .md/.csv from those files on a CPU.

>>> from experiments import harness
>>> harness.RESULTS.name, harness.raw_dir("dask_scaling").relative_to(harness.RESULTS)
('results', PosixPath('raw/dask_scaling'))
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
RESULTS = EXPERIMENTS / "results"
RAW = RESULTS / "raw"
LOGS = RESULTS / "logs"
DATASETS = ROOT / "datasets"
DATASET = DATASETS / "h200"


def raw_dir(question: str) -> Path:
    """Where a question's raw per-run files live (results/raw/<question>)."""
    return RAW / question


def relative(path: Path | str) -> str:
    """``path`` relative to the repository root where it lies inside it."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(path)


def command(argv: list[str] | None = None) -> str:
    """The command line, as typed from the repository root: ``python -m experiments.<module>
    ...`` for a module started with -m, else ``python <script> ...``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if argv is None and spec is not None and spec.name:
        return shlex.join(["python", "-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]])
    argv = list(sys.argv if argv is None else argv)
    return shlex.join(["python", relative(argv[0]), *argv[1:]]) if argv else "python"


@cache
def versions() -> dict[str, str]:
    """Installed versions of the libraries a result depends on ("absent" where missing)."""
    out = {}
    for name, dists in (("torch", ["torch"]), ("triton", ["triton"]),
                        ("xgboost", ["xgboost", "xgboost-cpu"]), ("pandas", ["pandas"]),
                        ("scikit-learn", ["scikit-learn"])):
        out[name] = "absent"
        for dist in dists:
            try:
                out[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    out["python"] = sys.version.split()[0]
    return out


def environment() -> dict[str, Any]:
    """costtune's description of this machine (GPU, versions, commit), without a clock read."""
    from costtune.env import environment as env

    return env(sm_clock=False)


def provenance(*, dataset: Path | None = None, n_rows: int | None = None,
               argv: list[str] | None = None) -> str:
    """The header block of a report: data, command, date, commit, GPU and library versions.

    >>> "- Command: `python" in provenance()
    True
    """
    env = environment()
    v = versions()
    gpu = "none (CPU only)" if env.get("gpu") in (None, "cpu") else env["gpu"]
    commit = (env.get("costtune_commit") or "unknown")[:7]
    if env.get("costtune_dirty"):
        commit += " (uncommitted changes)"
    lines = []
    if dataset is not None:
        rows = f"{n_rows:,} rows, " if n_rows is not None else ""
        lines.append(f"- Data: `{relative(dataset)}` ({rows}timed on an NVIDIA H200; see its "
                     "DATASHEET.md).")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines += [f"- Command: `{command(argv)}`",
              f"- Generated {when} at commit {commit} on {env.get('hostname')}; GPU: {gpu}; "
              f"torch {v['torch']}, triton {v['triton']}, xgboost {v['xgboost']}, "
              f"Python {v['python']}."]
    return "\n".join(lines)


def md_table(df: pd.DataFrame, *, floatfmt: str | tuple[str, ...] = "g", index: bool = False,
             missing: str | None = None, **kw: Any) -> str:
    """A markdown table of ``df`` (``DataFrame.to_markdown``, pipe format); with ``missing``,
    NaN cells read ``missing`` instead of "nan"."""
    if missing is not None:
        df = df.astype(object).where(df.notna(), None)
        kw["missingval"] = missing
    return df.to_markdown(index=index, floatfmt=floatfmt, **kw)


def write_report(question: str, lines: list[str], table: pd.DataFrame | None = None, *,
                 out: Path | None = None, csv_kw: dict[str, Any] | None = None) -> Path:
    """Write ``<out>/<question>.md`` (``lines`` joined) and, with ``table``,
    ``<out>/<question>.csv``; returns the .md path. ``out`` defaults to results/."""
    out = RESULTS if out is None else Path(out)
    out.mkdir(parents=True, exist_ok=True)
    md = out / f"{question}.md"
    md.write_text("\n".join(lines).rstrip("\n") + "\n")
    if table is not None:
        table.to_csv(out / f"{question}.csv", index=False, **(csv_kw or {}))
    return md


def load_dataset(dataset: Path = DATASET, **kw: Any) -> pd.DataFrame:
    """``costtune.load_dataset`` of ``dataset`` (the shipped H200 data by default)."""
    import costtune

    return costtune.load_dataset(dataset, **kw)


def run_child(cmd: list[str], *, env: dict[str, str], timeout_s: float,
              tail: int = 1500) -> dict[str, Any]:
    """Run ``cmd`` (a fresh process, cwd the repository) and read its last ``RESULT {json}``
    stdout line: {"status": "ok", "process_s", **result}, or status "timeout" / "failed"
    (with the last ``tail`` characters of its stderr, else stdout)."""
    start = time.perf_counter()
    try:
        res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                             timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "process_s": time.perf_counter() - start}
    out = {"process_s": time.perf_counter() - start}
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    if res.returncode != 0 or not lines:
        return {**out, "status": "failed", "error": (res.stderr or res.stdout)[-tail:]}
    return {**out, "status": "ok", **json.loads(lines[-1][len("RESULT "):])}


def fresh_env(tmp: str, **extra: str) -> dict[str, str]:
    """A child process's environment for a cold run: Triton's cache and costtune's feature
    cache in the new folder ``tmp``, this checkout importable, compiling for the GPU (never
    the interpreter), plus ``extra``."""
    env = {**os.environ, "TRITON_CACHE_DIR": f"{tmp}/triton",
           "COSTTUNE_CACHE": f"{tmp}/features", "PYTHONUNBUFFERED": "1", **extra,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    env.pop("TRITON_INTERPRET", None)
    return env
