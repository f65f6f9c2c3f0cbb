"""Give a shipped model its training table without refitting it.

``learn=True`` refits a model on its training table plus the user's harvested rows
(``costtune.model.training``) where the model ships ``<stem>.train.npz``. A model shipped
before it had one gets it here: the dataset's rows whose training hash
(``costtune.model.xgb.dataset_hash``) is the model's, with the compiled and IR feature tables
attached (the model's feature set reads what it needs). Checked before anything is written:
the rows hash to the model's ``train_hash``, give its row count, and a refit on the table
alone rebuilds its booster (the largest score difference over the table's rows must be 0).

    python -m experiments.attach_table h200_compiled [--suite train] [--dataset datasets/h200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from costtune.model.files import resolve  # noqa: E402
from costtune.model.training import TrainingTable, refit  # noqa: E402
from costtune.model.xgb import CostModel, dataset_hash  # noqa: E402
from experiments import harness  # noqa: E402
from experiments.loio import with_tables  # noqa: E402


def attach(name: str, *, dataset: Path, suite: str | None) -> tuple[Path, float]:
    """Write the table beside model ``name`` (a shipped name or path) from ``dataset``'s rows
    of ``suite`` (None: every row); see ``attach_rows``."""
    data = with_tables(harness.load_dataset(dataset), dataset)
    rows = data if suite is None else data[data["suite"] == suite]
    return attach_rows(name, rows, source=f"the {suite or 'all'} rows of {dataset}")


def attach_rows(name: str, rows, *, source: str = "the rows") -> tuple[Path, float]:
    """Write the table of ``rows`` (the model's families' rows are taken) beside model
    ``name``; its path and the refit's largest score difference. SystemExit naming what
    disagrees, before anything is written."""
    json_path, _ = resolve(name)
    model = CostModel.load(json_path)
    if model.family != "all":
        rows = rows[rows["kernel"].isin(model.families_)]
    rows = rows.reset_index(drop=True)
    if dataset_hash(rows) != model.train_hash_:
        raise SystemExit(f"{json_path.name}: {source} hash to {dataset_hash(rows)}, the model "
                         f"was trained on {model.train_hash_}")
    table = TrainingTable.from_rows(model, rows)
    if len(table) != model.n_train_rows_:
        raise SystemExit(f"{json_path.name}: {len(table)} rows as the model sees them, it was "
                         f"trained on {model.n_train_rows_}")
    again = refit(model, table, rows.iloc[:0], weight=1.0)
    diff = float(np.abs(again.booster_.inplace_predict(table.x)
                        - model.booster_.inplace_predict(table.x)).max())
    if diff != 0.0:
        raise SystemExit(f"{json_path.name}: a refit on the table does not rebuild the model "
                         f"(max score difference {diff:.3g})")
    return table.save(json_path), diff


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a shipped model name (h200_compiled) or a model path")
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    ap.add_argument("--suite", default="train", help="the rows it was fitted on ('all': every)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    path, diff = attach(args.model, dataset=args.dataset,
                        suite=None if args.suite == "all" else args.suite)
    print(f"wrote {harness.relative(path)} ({path.stat().st_size / 1e6:.1f} MB); a refit on it "
          f"rebuilds the model (max score difference {diff:g}); "
          f"{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
