"""The pruning hook's side of the cost model: which model applies, whether it can be trusted
here, and scoring configs in one batch (stage 1: static features, stage 2: compiled ones).

Scoring calls the booster directly on a float matrix in the model's feature order: the
DataFrame path of ``CostModel.predict`` costs ~20 ms for 1,000 configs, over the hook's budget.

>>> from costtune.hook_model import load_model
>>> model = load_model("h200", "gemm")  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from costtune.hook_kernel import Launch

_MODELS: dict[tuple[str, str], Any] = {}
_LOAD_LOCK = threading.Lock()  # one load per model, whichever thread asks first


def _fresh_lock_in_child() -> None:
    # A lock held by the parent's preload thread at a fork would stay held in the child.
    global _LOAD_LOCK
    _LOAD_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_in_child)


def load_model(model: Any, family: str) -> tuple[Any, str | None]:
    """A fitted CostModel for ``family`` and a note when a family model was passed over.

    ``model``: a CostModel, a saved model's path, or a shipped name (``"h200"``), where
    ``<name>_<family>`` is preferred over the cross-family ``<name>``. Raises
    (FileNotFoundError, ModelSchemaError, ...) when no model loads. Loaded once per process.
    """
    from costtune.model.xgb import CostModel

    if isinstance(model, CostModel):
        model._check_fitted()
        _check_features(model)
        return _single_threaded(model), None
    text = os.fspath(model)
    with _LOAD_LOCK:
        if (text, family) not in _MODELS:
            loaded, note = CostModel.load_for(text, family)
            _MODELS[(text, family)] = (_single_threaded(loaded), note)
        return _MODELS[(text, family)]


def default_stage2(model: Any) -> Any:
    """The stage-2 model when none is given: a shipped name's compiled-feature sibling
    (``"h200"`` -> ``"h200_compiled"``), else ``model`` itself."""
    from costtune.model.xgb import is_shipped_name

    if isinstance(model, str) and is_shipped_name(model):
        return f"{model}_compiled"
    return model


def _check_features(model: Any) -> None:
    """What ``CostModel.load`` checks for a file, for a model handed over in memory."""
    from costtune.model.features import feature_names
    from costtune.model.xgb import ModelSchemaError

    if list(model.feature_names_) != feature_names(model.features):
        raise ModelSchemaError("model was trained on another feature schema than this "
                               "costtune computes; retrain it")


def _single_threaded(model: Any) -> Any:
    # One thread: on a shared or busy host XGBoost's OpenMP threads spin-wait (see xgb.py).
    if not getattr(model, "_hook_threads_set", False):
        model.booster_.set_param({"nthread": int(model.n_jobs)})
        model._hook_threads_set = True
    return model


def uses_compiled(model: Any) -> bool:
    return model.features != "static"


def covers(model: Any, family: str) -> bool:
    return family in model.families_


def current_gpu() -> str | None:
    """Name of the GPU tuning runs on; None without one (CPU, the interpreter)."""
    try:
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except Exception:
        return None


def concerns(model: Any, launch: Launch, *, range_margin: float | None) -> list[tuple[str, str]]:
    """(category, message) for every reason the model's ranking may not hold here: another GPU
    or triton version, sizes ``range_margin`` octaves beyond the training range, an unseen dtype.
    """
    import triton

    from costtune.kernels import get_family

    out = []
    gpu = current_gpu()
    if gpu is not None:
        trained = [g.strip() for g in (model.gpu_ or "").split(",") if g.strip()]
        if gpu not in trained:
            made = f"made on {', '.join(trained)}" if trained else "records no GPU"
            out.append(("gpu", f"cost model {made}, tuning on {gpu}"))
    if model.triton_version_ and model.triton_version_ != triton.__version__:
        out.append(("triton", f"cost model made with triton {model.triton_version_}, running "
                    f"{triton.__version__}"))
    if range_margin is not None:
        for key, (lo, hi) in model.shape_ranges_.get(launch.family, {}).items():
            value = launch.problem.get(key, 0)
            if value > 0 and not lo - range_margin <= math.log2(value) <= hi + range_margin:
                out.append(("range", f"{launch.family} {key}={value} is far outside the "
                            f"trained range [{2 ** lo:g}, {2 ** hi:g}]"))
    if launch.dtype not in get_family(launch.family).DTYPES:
        out.append(("dtype", f"{launch.family} data holds no {launch.dtype} measurements"))
    return out


def score(model: Any, features: pd.DataFrame) -> np.ndarray:
    """Scores (higher = predicted faster) of feature rows; absent columns count as missing."""
    if list(features.columns) != model.feature_names_:
        features = features.reindex(columns=model.feature_names_)
    x = features.to_numpy(dtype=np.float32)
    raw = np.asarray(model.booster_.inplace_predict(x), dtype=float)
    return -raw if model.objective == "reg:logtime" else raw


def compiled_table(launch: Launch, params: Sequence[dict[str, Any]], *, cache_dir: Any,
                   workers: int | None, memo: dict) -> pd.DataFrame:
    """Compiled features of the family's own kernel at each config (AOT, this host's CPU),
    one row per config in order; ``memo`` keeps rows across calls (the disk cache keeps them
    across processes)."""
    from costtune.features.compiled import compiled_features
    from costtune.model.features import config_rows
    from costtune.types import Config

    rows = config_rows(launch.family, launch.problem, launch.dtype,
                       [Config.from_dict(p) for p in params])
    keys = list(zip(rows["workload"], rows["config"]))
    todo = rows[[k not in memo for k in keys]]
    if len(todo):
        # Threads: the shortlist is a few dozen compiles, and a process pool would first
        # spend seconds starting (its workers import torch and triton).
        table = compiled_features(todo, arch=target_arch(), workers=workers,
                                  cache_dir=cache_dir, threads=True)
        for rec in table.to_dict("records"):
            memo[(rec["workload"], rec["config"])] = rec
    return pd.DataFrame([memo[k] for k in keys])


def target_arch() -> int:
    """sm_XY of this host's GPU as an int (90 for sm_90); 90 (the H200) without a GPU."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return 10 * major + minor
    except Exception:
        pass
    return 90


def stage2_order(model: Any, static: pd.DataFrame, *, table: pd.DataFrame,
                 keys: np.ndarray) -> np.ndarray:
    """Positions into the shortlist, best first: configs the AOT compile rejected (e.g.
    OutOfResources) go last, the rest by the model's score on static + compiled features."""
    from costtune.model.features import COMPILE_OK
    from costtune.model.metrics import rank_positions

    ok = (table["compile_status"].to_numpy() == "ok").astype(float)
    feats = pd.concat([static.reset_index(drop=True), table.reset_index(drop=True)], axis=1)
    feats[COMPILE_OK] = ok
    scores = score(model, feats)
    order = rank_positions(scores, keys)
    return order[np.argsort(-ok[order], kind="stable")]
