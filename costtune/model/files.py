"""Where saved cost models live and how their files are checked.

A saved model is a pair beside each other, named by one stem: ``<stem>.json`` (metadata) and
``<stem>.ubj`` (the XGBoost booster). The JSON's ``booster`` field is informational: loading
always reads the ``.ubj`` of the JSON's own stem, so a copied or renamed pair (``v1.json`` +
``v1.ubj``) loads its own booster, never the file it was copied from. ``<stem>.forest.npz``
beside them (``costtune.model.forest``) holds the booster's trees for scoring without
xgboost; it records the sha256 of the ``.ubj`` it was made from and is ignored when stale.

A bare name (no folder, no suffix) is looked up as a path first, then among the shipped models
(``costtune/models``), then among the user's models: ``$COSTTUNE_HOME/models``, else
``$XDG_CACHE_HOME/costtune/models``, else ``~/.cache/costtune/models`` (where ``costtune train``
writes by default). Per-kernel models (learned from a kernel's own tunings) live under
``<the same home>/kernels/`` (``kernel_dir``).
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from costtune.home import user_home

POINTER = "current.json"  # a per-kernel folder's current model (``model.learned``)
MODEL_SCHEMA_VERSION = 1
MODEL_FORMAT = "costtune.CostModel"
# ``CostModel``'s parameters (its ``get_params()`` keys; tests/test_forest.py checks they agree).
MODEL_PARAMS = ("colsample_bytree", "failures", "family", "features", "learning_rate",
                "max_depth", "min_child_weight", "n_estimators", "n_jobs", "objective",
                "original_weight", "reg_lambda", "seed", "subsample")


class ModelSchemaError(ValueError):
    """A saved model this code cannot use: other file format, schema version or feature list,
    or a booster file that is missing or unreadable."""


def user_model_dir() -> Path:
    """Where the user's own models are saved and looked up by name."""
    return user_home() / "models"


def kernel_dir(name: str, source_hash: str, gpu: str | None) -> Path:
    """The per-kernel model folder of one kernel (its function name and source hash) on one
    GPU model: ``<user home>/kernels/<name>-<hash[:16]>/<gpu>`` (``costtune.model.learned``).

    >>> kernel_dir("matmul", "ab" * 32, "NVIDIA H200").parts[-2:]
    ('matmul-abababababababab', 'NVIDIA-H200')
    """
    import re

    def slug(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "unnamed"

    return user_home() / "kernels" / f"{slug(name)}-{source_hash[:16]}" / slug(gpu or "no-gpu")


def shipped_model_dir() -> Path:
    return Path(str(resources.files("costtune") / "models"))


def is_shipped_name(path_or_name: str | os.PathLike) -> bool:
    """A bare name such as ``"h200"`` (no folder, no suffix), looked up in costtune/models."""
    text = os.fspath(path_or_name)
    return os.sep not in text and "/" not in text and not os.path.splitext(text)[1]


def model_paths(path: str | os.PathLike) -> tuple[Path, Path]:
    """(``<stem>.json``, ``<stem>.ubj``) of a model path given with or without a suffix."""
    p = Path(path)
    if p.suffix in (".json", ".ubj"):
        p = p.with_suffix("")
    return p.with_name(p.name + ".json"), p.with_name(p.name + ".ubj")


TABLE_SUFFIX = ".train.npz"  # a model's training table (``model.training``) beside it


def table_path(model_path: str | os.PathLike) -> Path:
    """``<stem>.train.npz`` for a model path given with or without its suffix."""
    json_path, _ = model_paths(model_path)
    return json_path.with_name(json_path.name[: -len(".json")] + TABLE_SUFFIX)


def resolve(path_or_name: str | os.PathLike) -> tuple[Path, Path]:
    """The (JSON, booster) pair a path or name stands for; FileNotFoundError saying where it
    looked."""
    text = str(path_or_name)
    json_path, ubj_path = model_paths(text)
    if json_path.exists():
        return json_path, ubj_path
    if not is_shipped_name(text):
        raise FileNotFoundError(f"no model file {json_path}")
    looked = []
    for folder in (shipped_model_dir(), user_model_dir()):
        candidate = folder / f"{text}.json"
        if candidate.exists():
            return candidate, candidate.with_suffix(".ubj")
        looked.append(str(candidate))
    raise FileNotFoundError(f"no model file {json_path} and no shipped model named {text!r} "
                            f"(looked at {' and '.join(looked)})")


def check_meta(path: Path, meta: Any) -> None:
    """What every loader checks of a model's JSON: the file format, the schema version, the
    parameter names and the feature list (every saved feature among this code's
    ``feature_names``: a model trained before features were added reads the ones it has)."""
    from costtune.model.features import FEATURE_SETS, feature_names

    if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
        raise ModelSchemaError(f"{path}: not a costtune CostModel file")
    if meta.get("schema_version") != MODEL_SCHEMA_VERSION:
        raise ModelSchemaError(f"{path}: model schema_version {meta.get('schema_version')!r}, "
                               f"this costtune reads {MODEL_SCHEMA_VERSION}; retrain the model")
    unknown = sorted(set(meta.get("params", {})) - set(MODEL_PARAMS))
    if unknown:
        raise ModelSchemaError(f"{path}: unknown model parameter(s) {unknown}")
    feature_set = meta.get("feature_set")
    if feature_set not in FEATURE_SETS:
        raise ModelSchemaError(f"{path}: unknown feature set {feature_set!r}")
    saved, current = list(meta.get("feature_names", [])), feature_names(feature_set)
    missing = [f for f in saved if f not in current]
    if missing or not saved:
        # A model reads its own feature names; one trained before this code added features
        # still gets each of them computed as when it was trained, so only what the code
        # lacks is an error.
        raise ModelSchemaError(f"{path}: model was trained on another '{feature_set}' feature "
                               f"schema ({len(saved)} features, this code has {len(current)}); "
                               f"features the file needs but this code lacks: {missing[:8]}; "
                               f"retrain the model")


def read_meta(json_path: Path) -> dict[str, Any]:
    """A model's checked JSON metadata (``check_meta``); ModelSchemaError when unreadable."""
    try:
        meta = json.loads(json_path.read_text())
    except ValueError as e:
        raise ModelSchemaError(f"{json_path}: not a JSON model file ({e})") from e
    check_meta(json_path, meta)
    return meta


def fitted_attributes(meta: dict[str, Any]) -> dict[str, Any]:
    """The fitted attributes a saved model's JSON restores (``CostModel.load`` and
    ``CompactModel`` both set them)."""
    return {
        "feature_names_": list(meta["feature_names"]), "families_": list(meta["families"]),
        "gpu_": meta.get("gpu"), "triton_version_": meta.get("triton_version"),
        "train_hash_": meta.get("train_hash"), "n_train_rows_": meta.get("n_train_rows"),
        "n_train_workloads_": meta.get("n_train_workloads"),
        "shape_ranges_": {f: {k: tuple(v) for k, v in r.items()}
                          for f, r in meta.get("shape_ranges", {}).items()}}


def load_for_family(load: Any, path_or_name: str | os.PathLike, family: str
                    ) -> tuple[Any, str | None]:
    """``load`` of the model that serves ``family``: for a shipped name such as ``"h200"``,
    the family's own ``h200_<family>`` when there is one, else ``h200``; a path as is.
    Returns (model, a note when a family file was unusable and passed over)."""
    note = None
    if is_shipped_name(path_or_name):
        try:
            return load(f"{os.fspath(path_or_name)}_{family}"), None
        except FileNotFoundError:
            pass
        except ModelSchemaError as exc:  # the cross-family model may still serve
            note = f"{family} model {path_or_name}_{family} is unusable ({exc})"
    return load(path_or_name), note


def check_booster(json_path: Path) -> Path:
    """The booster file of ``json_path`` (its own stem); ModelSchemaError when absent."""
    booster = json_path.with_suffix(".ubj")
    if not booster.is_file():
        raise ModelSchemaError(f"{json_path}: its booster {booster.name} is missing (a model "
                               f"is the pair {json_path.stem}.json + {json_path.stem}.ubj)")
    return booster


def load_booster(json_path: Path) -> Any:
    """The XGBoost booster saved beside ``json_path``; one-line ModelSchemaError when it is
    missing or unreadable (XGBoost's own error carries a C++ stack trace)."""
    import xgboost as xgb

    path = check_booster(json_path)
    booster = xgb.Booster()
    try:
        booster.load_model(str(path))
    except xgb.core.XGBoostError as exc:
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise ModelSchemaError(f"{path}: not a readable XGBoost booster ({first[:200]})"
                               ) from None
    return booster


def current_model(folder: str | os.PathLike) -> tuple[Path, dict[str, Any]] | None:
    """(model JSON path, pointer record) of a kernel folder's current model; None if none."""
    pointer = Path(folder) / POINTER
    try:
        record = json.loads(pointer.read_text())
    except (OSError, ValueError):
        return None
    name = record.get("model") if isinstance(record, dict) else None
    if not isinstance(name, str) or not name or "/" in name or "\\" in name:
        return None  # not a pointer costtune wrote: as if none (the next update rewrites it)
    path = Path(folder) / f"{name}.json"
    return (path, record) if path.exists() else None
