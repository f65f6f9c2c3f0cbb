"""A kernel folder's key index: the (GPU, workload, config) keys of each of its parts, so a
writer in a fresh process finds what is stored by reading one file instead of every part (a
harvest writes a part per tuning call: thousands of parts in a long-lived project).

The index is a cache: ``Store.append`` rewrites it whole under the folder's writer lock after
each part it writes; a part is taken from it only where its name and size match the part on
disk, and a missing, torn or foreign index is read as empty (every part is then read, as
without one). It never decides what ``load`` returns.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather

INDEX = ".keys.arrow"  # a dot file: not a part, not a stray parquet file
_COLUMNS = ("part", "size", "gpu", "workload", "config")

Keys = frozenset[tuple[str, str, str]]


def read(folder: Path) -> dict[str, tuple[int, Keys]]:
    """part file name -> (its size in bytes, its keys); {} when there is no readable index."""
    try:
        table = feather.read_table(folder / INDEX)
        columns = [table.column(c).to_pylist() for c in _COLUMNS]
    except Exception:  # absent, torn or foreign: the parts themselves are read
        return {}
    grouped: dict[str, tuple[int, set]] = {}
    for part, size, gpu, workload, config in zip(*columns, strict=True):
        grouped.setdefault(part, (size, set()))[1].add((gpu, workload, config))
    return {part: (size, frozenset(keys)) for part, (size, keys) in grouped.items()}


def write(folder: Path, entries: dict[str, tuple[int, Keys]]) -> None:
    """Replace the index with ``entries`` (part name -> (size, keys)): a temp file beside it
    (``*.tmp``, which the store's writers remove when stale), then a rename. Errors are
    ignored: the index only saves reading parts."""
    rows: dict[str, list] = {c: [] for c in _COLUMNS}
    for part, (size, keys) in entries.items():
        for gpu, workload, config in keys:
            for column, value in zip(_COLUMNS, (part, size, gpu, workload, config),
                                     strict=True):
                rows[column].append(value)
    table = pa.table({c: pa.array(rows[c], type=pa.int64() if c == "size" else pa.string())
                      for c in _COLUMNS})
    tmp = folder / (INDEX + ".tmp")
    try:
        feather.write_feather(table, tmp)
        os.replace(tmp, folder / INDEX)
    except Exception:  # a read-only or full disk: the next writer reads the parts
        tmp.unlink(missing_ok=True)
