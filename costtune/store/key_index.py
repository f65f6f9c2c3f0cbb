"""A kernel folder's key index: the (GPU, workload, config) keys of each of its parts, so a
writer in a fresh process finds what is stored by reading one file and the few parts written
since, instead of every part (a harvest writes a part per tuning call: thousands of parts in
a long-lived project).

The index is a cache. ``Store.append`` rewrites it whole, under the folder's writer lock, once
``EVERY`` parts are not in it (a rewrite costs about as much as reading the parts it spares,
so it is not done at each append). A part is taken from it only where its name, size and
modification time all match the part on disk (a part rewritten or corrupted in place, or a
store copied without its times, is read itself), and a missing, torn or foreign index is read
as empty. It never decides what ``load`` returns.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather

INDEX = ".keys.arrow"  # a dot file: not a part, not a stray parquet file
EVERY = 32  # parts outside the index that make an append rewrite it
_COLUMNS = ("part", "size", "mtime_ns", "gpu", "workload", "config")

Stamp = tuple[int, int]  # a part's (size in bytes, modification time in ns)
Keys = frozenset[tuple[str, str, str]]


def stamp(st: os.stat_result) -> Stamp:
    return (st.st_size, st.st_mtime_ns)


def read(folder: Path) -> dict[str, tuple[Stamp, Keys]]:
    """part file name -> (its stamp, its keys); {} when there is no readable index."""
    try:
        table = feather.read_table(folder / INDEX)
        columns = [table.column(c).to_pylist() for c in _COLUMNS]
    except Exception:  # absent, torn or foreign: the parts themselves are read
        return {}
    grouped: dict[str, tuple[Stamp, set]] = {}
    for part, size, mtime, gpu, workload, config in zip(*columns, strict=True):
        grouped.setdefault(part, ((size, mtime), set()))[1].add((gpu, workload, config))
    return {part: (st, frozenset(keys)) for part, (st, keys) in grouped.items()}


def write(folder: Path, entries: dict[str, tuple[Stamp, Keys]]) -> bool:
    """Replace the index with ``entries`` (part name -> (stamp, keys)): a temp file beside it
    (``*.tmp``, which the store's writers remove when stale), then a rename. Whether it was
    written: any error (keys of a foreign type, a read-only or full disk) leaves the old
    index, and the parts, as they were."""
    tmp = folder / (INDEX + ".tmp")
    try:
        rows: dict[str, list] = {c: [] for c in _COLUMNS}
        for part, ((size, mtime), keys) in entries.items():
            for gpu, workload, config in keys:
                for column, value in zip(_COLUMNS, (part, size, mtime, gpu, workload, config),
                                         strict=True):
                    rows[column].append(value)
        table = pa.table({c: pa.array(rows[c], type=pa.int64() if c in ("size", "mtime_ns")
                                      else pa.string()) for c in _COLUMNS})
        feather.write_feather(table, tmp)
        os.replace(tmp, folder / INDEX)
        return True
    except Exception:
        tmp.unlink(missing_ok=True)
        return False
