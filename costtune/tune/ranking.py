"""The pruning hook's side of the cost model: whether the model can be trusted here, and
ranking a shortlist by compiled features (stage 2). Models load and score through
``costtune.model.registry``, as everywhere else."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from costtune.hardware import current_arch
from costtune.model.registry import default_stage2, load_noted, score
from costtune.tune.launch import Launch

__all__ = ["compiled_table", "concerns", "covers", "current_gpu", "default_stage2",
           "load_noted", "score", "stage2_order", "uses_compiled", "uses_source"]

def uses_compiled(model: Any) -> bool:
    """Whether the model needs features a compile gives (IR or compiled; the source
    features of ``static+src`` are read from the kernel's source)."""
    return model.features not in ("static", "static+src")


def uses_source(model: Any) -> bool:
    return "+src" in model.features


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
        table = compiled_features(todo, arch=current_arch(), workers=workers,
                                  cache_dir=cache_dir, threads=True)
        for rec in table.to_dict("records"):
            memo[(rec["workload"], rec["config"])] = rec
    return pd.DataFrame([memo[k] for k in keys])


def stage2_order(model: Any, static: pd.DataFrame, *, table: pd.DataFrame,
                 keys: np.ndarray) -> np.ndarray:
    """Positions into the shortlist, best first: configs the AOT compile rejected (e.g.
    OutOfResources) go last, the rest by the model's score on static + compiled features."""
    from costtune.evaluate.metrics import rank_positions
    from costtune.model.features import COMPILE_OK

    ok = (table["compile_status"].to_numpy() == "ok").astype(float)
    feats = pd.concat([static.reset_index(drop=True), table.reset_index(drop=True)], axis=1)
    feats[COMPILE_OK] = ok
    scores = score(model, feats)
    order = rank_positions(scores, keys)
    return order[np.argsort(-ok[order], kind="stable")]
