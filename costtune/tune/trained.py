"""The config values the shipped models were trained on, and the doubt a config outside them
raises (handled like a problem size out of range: warn once, benchmark ``widen`` x k).

``costtune/models/trained_configs_h200.json`` holds, per family, every value each config
parameter took in the training rows of ``datasets/h200`` (the rows the shipped models learned
from) and the range of the accumulator elements per thread (tile / threads), so 256x256 tiles
at 8 warps count as unseen even though 256 was seen on each side. It is generated, with its
provenance, by::

    python -m costtune.tune.trained datasets/h200 --out costtune/models/trained_configs_h200.json

>>> unseen_values("gemm", [{"BLOCK_M": 512, "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT_K": 1,
...     "num_warps": 4, "num_stages": 3}], elems_per_thread=[256.0])[0].split(" (")[0]
'BLOCK_M=512'

"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["build", "config_doubts", "load_trained", "unseen_values"]

FILE_NAME = "trained_configs_h200.json"
_DERIVED = ("elems_per_thread",)


@lru_cache(maxsize=1)
def load_trained() -> dict[str, Any]:
    """The shipped trained-config file's ``families`` part ({} when absent)."""
    path = Path(str(resources.files("costtune") / "models" / FILE_NAME))
    if not path.exists():
        return {}
    return json.loads(path.read_text())["families"]


def _number(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def unseen_values(family: str, params: Sequence[Mapping[str, Any]], *,
                  elems_per_thread: Sequence[float] | None = None,
                  trained: Mapping[str, Any] | None = None) -> list[str]:
    """Per config: "" when the family's training data had every one of its values, else what
    it lacked ("BLOCK_M=512 (trained: 32, 64, 128, 256)"). All "" for an unknown family."""
    trained = load_trained() if trained is None else trained
    known = trained.get(family)
    if not known:
        return [""] * len(params)
    sets = {name: set(values) for name, values in known["values"].items()}
    lo, hi = known.get("ranges", {}).get("elems_per_thread", (-np.inf, np.inf))
    e = (np.full(len(params), np.nan) if elems_per_thread is None
         else np.asarray(elems_per_thread, dtype=float))
    out = []
    for p, epl in zip(params, e):
        parts = [f"{name}={_number(p[name])} (trained: {', '.join(map(str, sorted(seen)))})"
                 for name, seen in sets.items() if name in p and _number(p[name]) not in seen]
        if np.isfinite(epl) and not lo <= epl <= hi:
            parts.append(f"{epl:g} accumulator elements per thread (trained: {lo:g} to {hi:g})")
        out.append("; ".join(parts))
    return out


def config_doubts(family: str, params: Sequence[Mapping[str, Any]], *,
                  elems_per_thread: Sequence[float] | None = None,
                  trained: Mapping[str, Any] | None = None,
                  among: Sequence[int] | None = None) -> list[tuple[str, str]]:
    """[("config", message)] when a config (of ``among``, positions, default all) holds a
    value the training data never had; [] otherwise."""
    unseen = unseen_values(family, params, elems_per_thread=elems_per_thread, trained=trained)
    picks = range(len(params)) if among is None else among
    named = [unseen[i] for i in picks if unseen[i]]
    if not named:
        return []
    shown = "; ".join(dict.fromkeys(named[:3]))
    return [("config", f"{len(named)} {family} config(s) with values outside the training "
             f"data rank among those kept: {shown}")]


def build(dataset: str | Path) -> dict[str, Any]:
    """Per family: trained values of each config parameter and the range of elements per
    thread, from the dataset's training rows with a time (status ok)."""
    from costtune.features.static import static_features
    from costtune.kernels import FAMILIES
    from costtune.store.dataset import load_dataset
    from costtune.tune.launch import FAMILY_PARAMS

    out: dict[str, Any] = {}
    for family in FAMILIES:
        df = load_dataset(dataset, kernel=family)
        df = df[(df["status"] == "ok") & (df["suite"] == "train")]
        if not len(df):
            continue
        required, neutral = FAMILY_PARAMS[family]
        names = [*required, *neutral, "num_warps", "num_stages"]
        values = {n: sorted(int(v) for v in df[n].dropna().unique()) for n in names if n in df}
        feats = static_features(df)
        ranges = {c: [float(feats[c].min()), float(feats[c].max())] for c in _DERIVED}
        out[family] = {"values": values, "ranges": ranges, "rows": int(len(df))}
    return out


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the trained config values file.")
    parser.add_argument("dataset", help="dataset folder, e.g. datasets/h200")
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    from costtune.model.xgb import dataset_hash
    from costtune.store.dataset import load_dataset

    families = build(args.dataset)
    rows = load_dataset(args.dataset)
    doc = {"provenance": {
        "dataset": str(args.dataset), "rows": int(len(rows)),
        "train_rows_ok": {f: v["rows"] for f, v in families.items()},
        "dataset_hash": dataset_hash(rows), "git_commit": _git_commit(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m costtune.tune.trained " + " ".join(sys.argv[1:] if argv is None
                                                                  else argv)},
        "families": families}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    counts = ", ".join(f"{f} {v['rows']} rows" for f, v in families.items())
    print(f"wrote {args.out}: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
