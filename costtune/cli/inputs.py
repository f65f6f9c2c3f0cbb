"""Checks the commands share: a dataset that loads and has rows, a kernel family, a path the
command may write to."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from costtune.cli.console import describe, fail

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# The shipped dataset of a checkout (an installed wheel has none).
SHIPPED_DATASETS = PACKAGE_DIR.parent / "datasets"


def load_rows(dataset: Path, *, kernel: str | None = None, option: str = "--dataset") -> Any:
    """The rows of ``dataset`` (a store root, kernel folder or part), or a one-line error."""
    from costtune.store.dataset import load_dataset

    if not dataset.exists():
        fail(f"{option} {dataset} does not exist (datasets/h200 is found from the repository "
             f"root; pass {option} DIR)")
    try:
        df = load_dataset(dataset, kernel=kernel)
    except ValueError as exc:  # StoreError names the part
        fail(f"{option} {dataset}: {describe(exc)}")
    if df.empty:
        what = f"no {kernel} rows" if kernel else "no rows"
        fail(f"{option} {dataset} holds {what} (a store keeps <kernel>/part-*.parquet files)")
    return df


def check_kernel(kernel: str, *, option: str = "KERNEL", implementations: bool = False
                 ) -> None:
    """Fail with one line unless ``kernel`` is a family (or, with ``implementations``, one of
    the suite's implementations)."""
    from costtune.kernels import FAMILIES, IMPLEMENTATIONS

    known = ([n for names in IMPLEMENTATIONS.values() for n in names] if implementations
             else list(FAMILIES))
    if kernel not in known:
        also = " (nor an implementation)" if implementations else ""
        fail(f"{option}: unknown kernel family {kernel!r}{also}; known: {', '.join(known)}")


def is_shipped(path: Path) -> bool:
    """Whether ``path`` lies in the installed package or the checkout's shipped datasets."""
    target = path.expanduser().resolve()
    return any(target == d or d in target.parents for d in (PACKAGE_DIR, SHIPPED_DATASETS))


def check_writable(path: Path, *, option: str) -> None:
    """``path``'s folder exists or can be made, and a file can be written there (checked
    before any work, not after it); ``path`` is not a folder."""
    if path.is_dir():
        fail(f"{option} {path} is a folder; give a file path")
    if path.is_file() and _is_store_part(path):
        fail(f"{option} {path} is a part of a measurement store; write elsewhere")
    parent = path.expanduser().absolute().parent
    existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        fail(f"{option} {path}: {existing} is not a folder")
    if path.exists() and not os.access(path, os.W_OK):
        fail(f"{option} {path}: the file cannot be written (permission denied)")
    try:  # os.access trusts root; a real write does not
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".costtune-write-check-"):
            pass
    except OSError as exc:
        fail(f"{option} {path}: cannot write in {existing} ({exc.strerror or exc})")


def _is_store_part(path: Path) -> bool:
    """A store's part file: its name, or parquet metadata naming it one."""
    from costtune.store.dataset import PART_RE
    from costtune.store.parts import META_KEY

    if PART_RE.fullmatch(path.name):
        return True
    if path.suffix != ".parquet":
        return False
    try:
        import pyarrow.parquet as pq

        return META_KEY in (pq.read_schema(path).metadata or {})
    except Exception:  # not parquet: not a part
        return False
