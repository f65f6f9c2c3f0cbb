"""The pruning hook's side of the cost model: whether the model can be trusted here, and
ranking a shortlist by compiled features (stage 2). Models load and score through
``costtune.model.registry``, as everywhere else.

Stage 2 orders the shortlist by a blend of the two stages' ranks: ``w`` x (the config's rank
percentile among the shortlist by the stage-1 score) + (1 - ``w``) x (its percentile by the
stage-2 score). ``w`` = 0 is the compiled model alone; ``w`` = 1 keeps stage 1's order (stage 2
then only moves configs the AOT compile rejected to the end). The shipped stage-2 model's
weight per family (``STAGE2_FILE``) is chosen by ``experiments/loio.py`` on held-out
implementations' train-suite shapes, replaying this very procedure."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from costtune.hardware import current_arch
from costtune.model.registry import default_stage2, load_noted, score
from costtune.tune.launch import Launch

__all__ = ["STAGE2_FILE", "blend_order", "check_stage1_weight", "compiled_table", "concerns",
           "covers", "current_gpu", "default_stage2", "kernel_compiled_table", "load_noted",
           "score", "stage1_weight", "stage2_kind", "stage2_order", "uses_compiled",
           "uses_source"]

STAGE2_FILE = "stage2_h200.json"  # under costtune/models: the shipped stage-1 weights

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
        origin = launch.origin.get("dtype", "")
        read = (f" (read from {origin}; pass dtype= if wrong)"
                if origin not in ("", "dtype=") else "")
        out.append(("dtype", f"{launch.family} data holds no {launch.dtype} measurements{read}"))
    return out


def kernel_compiled_table(fn: Any, args: Mapping[str, Any], configs: Sequence[Any], *,
                          cache_dir: Any, workers: int | None, memo: dict,
                          arch: int | None = None) -> pd.DataFrame:
    """Compiled features of the user's own kernel ``fn`` (a ``@triton.jit`` function, or the
    autotuner wrapping one; ``@triton.heuristics`` values are added as its launch adds them) at
    each of ``configs`` (``triton.Config``), specialized on this call's ``args`` (after the
    config's ``pre_hook``, on copied descriptors) exactly as the JIT would
    (``build.aot.specialize``), AOT-compiled for this host's GPU arch (sm_90 without one) on
    the CPU: one row per config, in order, with ``compile_status``, ``COMPILED_FEATURES`` and
    the TTIR/TTGIR counts of the same compile (``IR_FEATURES``, for ``static+ir+compiled``).
    A config that does not compile gets its status (e.g. ``out_of_resources``). Raises when
    ``fn`` cannot be compiled here at all (not a JIT function, Triton's interpreter on,
    arguments it does not take, no config compiles): the caller then describes the configs
    with the family's own kernel (``compiled_table``)."""
    from costtune.build.aot import jit_function, specialize
    from costtune.build.threads import interpreting
    from costtune.features.compiled import _row_features, compile_jobs, table_columns
    from costtune.kernels.base import KernelCall
    from costtune.tune.kind import heuristic_rules
    from costtune.tune.precompile import hooked_args

    if interpreting():
        raise RuntimeError("Triton's interpreter is on: no kernel compiles in this process")
    jit = jit_function(fn)
    heuristics = heuristic_rules(fn)
    arch = arch or current_arch()
    jobs = []
    for config in configs:
        # As Triton's launch: the config's values and launch options, after its pre_hook
        # (descriptors' block shapes, Triton's tutorials), then each @triton.heuristics rule,
        # outer first, which may also set num_warps / num_stages / num_ctas.
        full = ({**args, **config.all_kwargs()} if config.pre_hook is None
                else hooked_args(args, config))
        for name, rule in heuristics:
            full[name] = rule(dict(full))
        kwargs = {k: v for k, v in full.items()
                  if k in jit.arg_names or (k in ("num_ctas", "maxnreg") and v is not None)}
        call = KernelCall(fn=jit, grid=(1,), args=(), kwargs=kwargs,
                          num_warps=full.get("num_warps", config.num_warps),
                          num_stages=full.get("num_stages", config.num_stages))
        job = specialize(call, arch=arch)
        job.fn = jit  # compiled here, in threads, from the object itself
        jobs.append(job)
    todo = [j for j in jobs if j.key not in memo]
    if todo:
        memo.update(compile_jobs(todo, workers=workers, cache_dir=cache_dir, threads=True))
    rows = [_row_features(([j], 0), memo, ir=True) for j in jobs]
    table = pd.DataFrame(rows, columns=table_columns(ir=True))
    if len(table) and not (table["compile_status"] == "ok").any():
        raise RuntimeError(f"none of the {len(table)} configs compiled; the first: "
                           f"{table['compile_error'].iloc[0][:200]}")
    return table


def compiled_table(launch: Launch, params: Sequence[dict[str, Any]], *, cache_dir: Any,
                   workers: int | None, memo: dict) -> pd.DataFrame:
    """Compiled features of costtune's own kernel of the family at each config (AOT, this
    host's CPU): what stage 2 uses when the user's kernel cannot be compiled here
    (``kernel_compiled_table``); one row per config in order; ``memo`` keeps rows across
    calls (the disk cache keeps them across processes)."""
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
                                  cache_dir=cache_dir, threads=True, ir=True)
        for rec in table.to_dict("records"):
            memo[(rec["workload"], rec["config"])] = rec
    return pd.DataFrame([memo[k] for k in keys])


def check_stage1_weight(weight: Any) -> float:
    """``weight`` as a float in [0, 1]; ValueError naming it otherwise."""
    try:
        w = float(weight)
    except (TypeError, ValueError):
        w = math.nan
    if isinstance(weight, bool) or not 0.0 <= w <= 1.0:
        raise ValueError(f"stage1_weight must be a number in [0, 1], got {weight!r}")
    return w


def stage1_weight(source: Any, family: str, weight: float | None = None) -> float:
    """The stage-1 weight of the blend for ``family``: ``weight`` when given (checked to lie in
    [0, 1]); else, for the shipped stage-2 model (a name such as ``"h200_compiled"``), the
    family's weight in ``STAGE2_FILE``; else 0 (the stage-2 model alone)."""
    if weight is not None:
        return check_stage1_weight(weight)
    if not (isinstance(source, str) and source in _shipped_weights()):
        return 0.0
    return float(_shipped_weights()[source].get(family, 0.0))


@lru_cache(maxsize=1)
def _stage2_record() -> dict[str, Any]:
    """The shipped ``STAGE2_FILE`` ({} when absent)."""
    path = Path(str(resources.files("costtune") / "models" / STAGE2_FILE))
    return json.loads(path.read_text()) if path.exists() else {}


def _shipped_weights() -> dict[str, dict[str, float]]:
    """{stage-2 model name: {family: weight}} from the shipped file ({} when absent)."""
    record = _stage2_record()
    if not record:
        return {}
    return {record["model"]: {f: float(v["stage1_weight"])
                              for f, v in record["families"].items()}}


def stage2_kind(family: str) -> tuple[str, str]:
    """(feature set, ``"all"`` or ``"family"``) of ``family``'s shipped stage-2 booster, as
    ``experiments/loio.py`` chose it (``STAGE2_FILE``); KeyError when none is recorded."""
    features, scope = _stage2_record()["families"][family]["stage2"].split("/")
    return features, scope


def blend_order(stage1: np.ndarray, stage2: np.ndarray, keys: np.ndarray, *,
                weight: float) -> np.ndarray:
    """Positions, best first, by ``weight`` x stage-1 rank percentile + (1 - ``weight``) x
    stage-2 rank percentile (higher scores = faster; a rank is the place in
    ``rank_positions`` order, so equal scores part by key; NaN ranks last; ties of the blend
    go by stage-2 score, then key).

    >>> blend_order(np.array([3., 2., 1.]), np.array([1., 2., 3.]), np.array(["a", "b", "c"]),
    ...             weight=0.75).tolist()
    [0, 1, 2]
    """
    from costtune.evaluate.metrics import rank_positions

    n = len(keys)
    blend = np.zeros(n)
    for w, s in ((weight, stage1), (1.0 - weight, stage2)):
        pct = np.empty(n)
        pct[rank_positions(np.asarray(s, dtype=float), keys)] = np.arange(n, 0, -1) / n
        blend += w * pct
    s2 = np.asarray(stage2, dtype=float)
    s2 = np.where(np.isnan(s2), -np.inf, s2)
    return np.lexsort((np.asarray(keys, dtype=object).astype(str), -s2, -blend))


def stage2_order(model: Any, static: pd.DataFrame, *, table: pd.DataFrame,
                 keys: np.ndarray, stage1: np.ndarray | None = None,
                 weight: float = 0.0) -> np.ndarray:
    """Positions into the shortlist, best first: configs the AOT compile rejected (e.g.
    OutOfResources) go last, the rest by the model's score on static + compiled features,
    blended with the shortlist's stage-1 scores ``stage1`` at ``weight`` (``blend_order``)."""
    from costtune.evaluate.metrics import rank_positions
    from costtune.model.features import COMPILE_OK

    ok = (table["compile_status"].to_numpy() == "ok").astype(float)
    feats = pd.concat([static.reset_index(drop=True), table.reset_index(drop=True)], axis=1)
    feats[COMPILE_OK] = ok
    scores = score(model, feats)
    if stage1 is None or weight == 0.0:
        order = rank_positions(scores, keys)
    else:
        order = blend_order(stage1, scores, keys, weight=weight)
    return order[np.argsort(-ok[order], kind="stable")]
