"""The notebooks execute headless, top to bottom, without a cell error (CPU only)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "costtune-test"
CELL_TIMEOUT_S = 300  # each notebook takes well under 2 minutes on 2 cores


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    """A kernel spec for this very interpreter, in a temporary Jupyter path: a fresh machine may
    have no ``python3`` spec, or one that starts another Python without costtune."""
    from ipykernel.kernelspec import install

    prefix = tmp_path_factory.mktemp("jupyter")
    install(kernel_name=KERNEL, prefix=str(prefix))  # argv is sys.executable
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        p for p in (str(prefix / "share" / "jupyter"), old) if p)
    yield KERNEL
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old


def test_notebooks_exist():
    assert {p.name for p in NOTEBOOKS} >= {"tour.ipynb", "analysis.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, kernel_name: str) -> None:
    book = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(book, timeout=CELL_TIMEOUT_S, kernel_name=kernel_name,
                                     resources={"metadata": {"path": str(ROOT)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError at the first failing cell
    print(f"{path.name}: {time.perf_counter() - start:.1f} s")
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
