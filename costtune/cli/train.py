"""`costtune train`: fit a cost model on a dataset and save it (versioned) in the user's model
folder, never into the installed package unless ``--out`` says so."""

from __future__ import annotations

from pathlib import Path

import typer

from costtune.cli.console import bar, fail, note
from costtune.cli.inputs import check_writable, load_rows

SUITES = ("train", "all")


def register(app: typer.Typer) -> None:
    app.command()(train)


def train(dataset: Path = typer.Option(Path("datasets/h200"), help="store root"),
          name: str = typer.Option("model", help="model name: saved as <models>/<name>.json "
                                   "+ .ubj, where <models> is $COSTTUNE_HOME/models, else "
                                   "$XDG_CACHE_HOME/costtune/models, else "
                                   "~/.cache/costtune/models; load it with --model <name>"),
          out: Path | None = typer.Option(None, help="model path instead (writes .json + "
                                          ".ubj; a shipped model is replaced only this way)"),
          suite: str = typer.Option("train", help="train | all: which rows to fit on"),
          objective: str = typer.Option("rank:pairwise", help="rank:pairwise | rank:ndcg "
                                        "| reg:logtime | reg:relthroughput"),
          features: str = typer.Option("static", help="static | static+compiled"),
          seed: int = 0) -> None:
    """Train the cost model (the shipped defaults, on the train suite) and save it."""
    from costtune.model.features import FEATURE_SETS
    from costtune.model.files import is_shipped_name, shipped_model_dir, user_model_dir
    from costtune.model.xgb import OBJECTIVES

    if suite not in SUITES:
        fail(f"--suite must be 'train' or 'all', got {suite!r}")
    if objective not in OBJECTIVES:
        fail(f"--objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    if features not in FEATURE_SETS:
        fail(f"--features {features!r} is not one of {', '.join(FEATURE_SETS)}")
    if out is None:
        if not name or not is_shipped_name(name):
            fail(f"--name {name!r} must be a bare name (no folder, no suffix); use --out PATH")
        if (shipped_model_dir() / f"{name}.json").exists():
            fail(f"--name {name!r} is a shipped model's name; pick another (or --out PATH)")
        out = user_model_dir() / name
    check_writable(out.with_suffix(".json") if out.suffix != ".json" else out, option="--out")
    rows = _training_rows(load_rows(dataset), dataset=dataset, suite=suite)
    from costtune.evaluate import default_model

    model = default_model(objective=objective, features=features, seed=seed)
    try:
        with bar(f"fitting on {len(rows)} rows ({rows['workload'].nunique()} workloads)",
                 None):
            model.fit(rows)
    except ValueError as exc:
        fail(str(exc))
    path = model.save(out)
    typer.echo(f"trained on {rows['workload'].nunique()} workloads ({len(rows)} rows, "
               f"suite={suite}) -> {path}")


def _training_rows(data, *, dataset: Path, suite: str):
    from costtune.kernels import FAMILIES

    if suite == "train":
        if "suite" not in data.columns:
            fail(f"--dataset {dataset} has no 'suite' column (a harvested store?); fit every "
                 "row with --suite all")
        data = data[data["suite"] == "train"]
        if data.empty:
            fail(f"--dataset {dataset} has no rows of suite 'train'; use --suite all")
    kernels = sorted(data["kernel"].astype(str).unique())
    known = [k for k in kernels if k in FAMILIES]
    if not known:
        fail(f"--dataset {dataset} holds no rows of costtune's kernel families "
             f"({', '.join(FAMILIES)}) but of {kernels[:5]}: harvested kernels of other names "
             "cannot be trained on yet")
    if len(known) < len(kernels):
        note(f"leaving out rows of kernels {sorted(set(kernels) - set(known))} (not a costtune "
             "family)")
        data = data[data["kernel"].isin(known)]
    return data
