"""`costtune train`: fit a cost model on a dataset and save it in the user's model folder,
never into the installed package unless ``--out`` says so, and over an existing model only
with ``--force``.

A harvested store (``costtune.harvest``: no ``suite`` column, rows labelled with the family
they read as) trains each kernel's own model instead (``costtune.model.learned``: ``--base``
refitted on its training table plus the kernel's rows, or continued where the base ships no
table, written to the kernel's folder in the user's cache, where
``costtune.autotune(learn=True)`` finds it); rows harvested before the source hash was
recorded train a family model saved like any other (``--name`` / ``--out``)."""

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
          base: str = typer.Option("h200", help="harvested stores: the model a kernel's own "
                                   "model is refitted (or continued) from"),
          seed: int = 0,
          force: bool = typer.Option(False, "--force", help="replace a model already saved "
                                     "under that name or path")) -> None:
    """Train the cost model (the shipped defaults, on the train suite) and save it."""
    from costtune.model.features import FEATURE_SETS
    from costtune.model.files import is_shipped_name, shipped_model_dir, user_model_dir
    from costtune.model.xgb import OBJECTIVES

    given = [opt for opt, value, default in (
        ("--out", out, None), ("--name", name, "model"), ("--suite", suite, "train"),
        ("--objective", objective, "rank:pairwise"), ("--features", features, "static"))
        if value != default]
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
    if out.is_dir():
        what = "--out" if "--out" in given else "the user folder's model path (COSTTUNE_HOME)"
        fail(f"{what} {out} is a folder; give the model's path (<folder>/<name>)")
    target = out.with_suffix(".json") if out.suffix != ".json" else out
    check_writable(target, option="--out" if "--out" in given
                   else "the user folder (COSTTUNE_HOME):")
    data = load_rows(dataset)
    if "suite" not in data.columns and ({"family", "kernel_hash"} & set(data.columns)):
        rows = _train_harvested(data, dataset=dataset, base=base, given=given)
        if rows is None:
            return
        suite = "harvested"
    else:
        rows = _training_rows(data, dataset=dataset, suite=suite)
    if target.exists() and not force:  # (a harvest's own models are versioned instead)
        fail(f"{target} exists: a model is saved there; pass --force to replace it, or "
             "another --name / --out")
    from costtune.evaluate import default_model
    from costtune.model.training import save_with_table

    model = default_model(objective=objective, features=features, seed=seed)
    try:
        with bar(f"fitting on {len(rows)} rows ({rows['workload'].nunique()} workloads)",
                 None):
            model.fit(rows)
    except ValueError as exc:
        fail(str(exc))
    path = save_with_table(model, out, rows)
    what = (f"a {'/'.join(sorted(rows['kernel'].astype(str).unique()))} family model "
            if suite == "harvested" else "")
    typer.echo(f"trained {what}on {rows['workload'].nunique()} workloads ({len(rows)} rows, "
               f"suite={suite}) -> {path}")


def _training_rows(data, *, dataset: Path, suite: str):
    from costtune.kernels import FAMILIES

    if suite == "train":
        if "suite" not in data.columns:
            fail(f"--dataset {dataset} has no 'suite' column (a harvested store?) and no "
                 "harvest labels (family, kernel_hash): neither a collected dataset nor a "
                 "costtune.harvest store; fit every row with --suite all")
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


def _train_harvested(data, *, dataset: Path, base: str, given: list[str]):
    """Train each harvested kernel's own model (rows with a source hash) where learn=True
    reads it, as learn=True updates it (``given``: options that do not apply to that, an
    error); returns the rows without one, relabelled as their family, for a family model
    (None when there are none)."""
    import pandas as pd

    from costtune.kernels import FAMILIES
    from costtune.model.files import kernel_dir
    from costtune.model.learned import current_model, read_rows, teaching, update

    family = data["family"] if "family" in data else pd.Series(None, index=data.index)
    labelled = data[family.isin(FAMILIES)]
    if labelled.empty:
        names = sorted(data["kernel"].astype(str).unique())[:5]
        fail(f"--dataset {dataset} is a harvested store whose kernels ({', '.join(names)}) "
             "read as no kernel family: no rows of costtune's kernel families to train on")
    if len(labelled) < len(data):
        note(f"leaving out {len(data) - len(labelled)} harvested rows that read as no family")
    rows = labelled.assign(kernel=labelled["family"].astype(str))
    hashes = (rows["kernel_hash"] if "kernel_hash" in rows else
              pd.Series(None, index=rows.index)).fillna("")
    name = (rows["kernel_fn"].astype(str).str.rsplit(".", n=1).str[-1] if "kernel_fn" in rows
            else rows["kernel"])
    gpu = rows["gpu"].fillna("cpu").astype(str) if "gpu" in rows else "cpu"
    rows = rows.assign(_name=name, _hash=hashes, _gpu=gpu)
    if given and (hashes != "").any():
        fail(f"--dataset {dataset} is a harvested store: each kernel's own model is updated "
             f"from --base {base} where learn=True reads it, as learn=True updates it; "
             f"{', '.join(given)} do not apply to that (leave them out)")
    for (fn, digest, device, fam), group in rows[hashes != ""].groupby(
            ["_name", "_hash", "_gpu", "kernel"]):
        group = group.drop(columns=["_name", "_hash", "_gpu"])
        try:
            with bar(f"training {fn}'s own model on {len(group)} rows", None):
                folder = kernel_dir(fn, digest, device)
                path = update(folder, group, base=base, family=fam)
        except (ValueError, OSError) as exc:
            fail(f"--dataset {dataset}: {fn}: {exc}")
        if path is None:
            typer.echo(f"learned nothing for {fn} ({fam}, source {digest[:12]}, {device}): no "
                       "shape of it in this store has two configs measured (e.g. top_k=1 "
                       f"tunings), so there is no new order to learn; its rows are kept in "
                       f"{folder}")
            continue
        keys = ["workload", "config"]
        taught = len(teaching(read_rows(folder))[keys].astype(str).merge(
            group[keys].astype(str).drop_duplicates()))
        pointer = current_model(path.parent)
        record = pointer[1] if pointer else {}
        how = {"refit": "refitted from", "continue": "continued from"}.get(
            record.get("method"), "updated from")
        typer.echo(f"trained the per-kernel model of {fn} ({fam}, source {digest[:12]}, "
                   f"{device}; {how} {base}) on {record.get('workloads', '?')} workloads "
                   f"({record.get('rows', '?')} rows, this store's {taught} among "
                   f"them) -> {path}")
    rest = rows[hashes == ""].drop(columns=["_name", "_hash", "_gpu"])
    if rest.empty:
        return None
    families = sorted(rest["kernel"].unique())
    note(f"{len(rest)} harvested rows carry no kernel source hash; training a "
         f"{'/'.join(families)} family model on them")
    return rest
