"""The pruner's kept list on disk, beside Triton's autotune cache (``cache_results=True``).

Triton's ``check_disk_cache`` finds a tuning's timings by a key that hashes the pruned list, so
a later process must first prune to find them: wait for the cost model (``import xgboost`` and
the booster, ~1.5 s) and rank. This module keys the kept list itself by everything that decides
it, so a later process with the same key takes the list from disk and the pruner never runs.

The key (sha256, ``key_for``) hashes what Triton's own cache key does (``triton_key()``, the
backend's hash, the cache-invalidating environment variables, the kernel's ``cache_key``, the
tuning key, ``str`` of every config) and what the pruner reads: its options (``top_k``,
``widen``, ``range_margin``, ``two_stage``, ``stage2_model``, ``shortlist``,
``stage1_weight``, the LaunchSpec), the model's files (path, mtime and size of every file the
name or path can resolve to, and of costtune's shipped model folder), costtune's version and
source files, the GPU, and the call (tensor shapes, strides, dtypes and alignment, scalar
values, the grid's program count per config). The entry, ``<kernel name>.costtune_kept.json``
in Triton's cache manager (``TRITON_CACHE_DIR``), holds the kept configs as positions in the
config list, in order, with their ``str`` to verify: any mismatch is a miss.

Not used (``key_for`` returns None) when the model is an object in memory, with ``learn=True``
(the kernel's own model changes with every tuning), when a config has a ``pre_hook`` (Triton's
disk cache gives up too) or the tuning key is empty. A key that cannot be computed, or an entry
that cannot be read or written, is a miss: the pruner runs as without this cache.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from costtune.tune.ranks import tuning_key

__all__ = ["FORMAT", "key_for", "lookup", "seen", "store"]

FORMAT = "costtune-kept-1"
_NOT_ARGS = ("grid", "warmup")


def usable(tuner: Any) -> bool:
    """Whether the kept list of ``tuner`` (a ``SafeAutotuner``) may come from disk."""
    pruner = tuner.early_config_prune
    if not hasattr(pruner, "spec") or getattr(tuner, "perf_model", None) is not None:
        return False  # not costtune's pruner, or Triton's perf_model prunes further
    if tuner.learner is not None:
        return False
    names = (str, os.PathLike)
    if not isinstance(pruner.model, names):
        return False
    if pruner.two_stage and pruner.stage2_model is not None and not isinstance(
            pruner.stage2_model, names):
        return False
    return not any(c.pre_hook for c in tuner.configs)


def key_for(tuner: Any, kwargs: dict[str, Any]) -> str | None:
    """The kept list's key for this tuning call (``tuner.nargs`` and ``kwargs``), or None
    when the kept list may not come from disk or the key cannot be computed. None too with
    the user's own ``early_config_prune``: what it keeps depends on state no key can hash
    (closures, globals), so it runs, and the pruner with it, on every call."""
    if not usable(tuner) or getattr(tuner.early_config_prune, "user_prune", None) is not None:
        return None
    from costtune.tune.preload import wait

    wait()  # Triton's key, maybe still being computed in the background (``start_warm``)
    args = tuple(tuner.nargs.values())
    tuned = tuning_key(tuner.arg_names, tuner.keys, args, kwargs)
    if not tuned:
        return None
    try:
        parts = [FORMAT, *_triton_parts(tuner), str(tuned), str(list(tuner.keys)),
                 *[str(c) for c in tuner.configs], _pruner_part(tuner.early_config_prune),
                 _call_part(tuner, kwargs), _rules_part(tuner), _code_stamp(), _gpu()]
    except Exception:  # e.g. no GPU target: prune as without this cache
        return None
    return hashlib.sha256("-".join(parts).encode("utf-8")).hexdigest()


def lookup(tuner: Any, key: str) -> list[Any] | None:
    """The stored kept configs (objects of ``tuner.configs``, in order), or None: a miss."""
    try:
        path = _manager(key).get_file(_file_name(tuner))
        if not path:
            return None
        with open(path) as f:
            entry = json.load(f)
        positions, texts = entry["positions"], entry["configs"]
        if entry.get("format") != FORMAT or not positions or len(positions) != len(texts):
            return None
        kept = []
        for i, text in zip(positions, texts):
            if not isinstance(i, int) or not 0 <= i < len(tuner.configs):
                return None
            if str(tuner.configs[i]) != text:
                return None
            kept.append(tuner.configs[i])
        return kept
    except Exception:  # unreadable or malformed: prune again
        return None


def store(tuner: Any, key: str, kept: Sequence[Any]) -> bool:
    """Write ``kept`` (configs of ``tuner.configs``) under ``key``, atomically (the cache
    manager's ``put``); False when nothing was written."""
    where = {id(c): i for i, c in enumerate(tuner.configs)}
    if not kept or any(id(c) not in where for c in kept):
        return False
    positions = [where[id(c)] for c in kept]
    entry = {"format": FORMAT, "positions": positions,
             "configs": [str(tuner.configs[i]) for i in positions]}
    try:
        _manager(key).put(json.dumps(entry), _file_name(tuner), binary=False)
        _manager(_seen_key(_kernel(tuner))).put("1", _SEEN, binary=False)
    except Exception:  # a read-only or full cache folder: the next process prunes again
        return False
    return True


def seen(fn: Any) -> bool:
    """Whether a kept list of kernel ``fn`` (under any Heuristics) was ever stored in this
    cache folder: then ``costtune.autotune`` does not preload the model, whose loading in
    a background thread would slow a cache hit's call (the two share the GIL)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    try:
        while not isinstance(fn, (JITFunction, InterpretedFunction)):
            fn = fn.fn
        return bool(_manager(_seen_key(fn)).get_file(_SEEN))
    except Exception:
        return False


_SEEN = "costtune_kept.seen"


def _seen_key(fn: Any) -> str:
    """The marker's key: the JIT function's Python function, by module and name."""
    py = getattr(fn, "fn", fn)
    name = f"{FORMAT}-seen-{getattr(py, '__module__', '')}.{getattr(py, '__qualname__', '')}"
    return hashlib.sha256(name.encode("utf-8")).hexdigest()


def _manager(key: str) -> Any:
    import triton.runtime.autotuner as autotuner

    return autotuner.get_cache_manager(key)


def _kernel(tuner: Any) -> Any:
    """The JIT function under any Heuristics, as Triton's ``check_disk_cache`` finds it."""
    import triton.runtime.autotuner as autotuner

    fn = tuner.fn
    while not isinstance(fn, autotuner.JITFunction):
        fn = fn.fn
    return fn


def _file_name(tuner: Any) -> str:
    return f"{_kernel(tuner).__name__[:150]}.costtune_kept.json"


def _triton_parts(tuner: Any) -> list[str]:
    """What Triton's own disk cache key hashes besides the tuning key and configs."""
    import triton.runtime.autotuner as autotuner
    from triton.compiler.compiler import make_backend

    fn = _kernel(tuner)
    env_vars = autotuner.get_cache_invalidating_env_vars()
    return [autotuner.triton_key(),
            make_backend(autotuner.driver.active.get_current_target()).hash(),
            fn.cache_key, fn.__name__, str(sorted(env_vars.items()))]


def _rules_part(tuner: Any) -> str:
    """The ``triton.heuristics`` rules under the autotuner (they set values the pruner ranks
    with, and Triton's own key hashes none of them): each rule's name, source, code, closure
    values and defaults, as text that is the same in every process (no addresses)."""
    from costtune.jitsource import stable_text
    from costtune.tune.kind import heuristic_rules

    out = []
    for name, rule in heuristic_rules(tuner.fn):
        try:
            text = inspect.getsource(rule)
        except (OSError, TypeError):
            text = ""
        cells = [stable_text(_cell(c)) for c in getattr(rule, "__closure__", None) or ()]
        out.append((name, text, stable_text(getattr(rule, "__code__", None)), cells,
                    stable_text(getattr(rule, "__defaults__", None))))
    return repr(out)


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _pruner_part(pruner: Any) -> str:
    """The pruner's options and its models' files."""
    spec = pruner.spec
    models = [_model_files(pruner.model)]
    if pruner.two_stage:
        stage2 = pruner.stage2_model
        if stage2 is None:
            from costtune.model.files import is_shipped_name

            model = pruner.model  # as model.registry.default_stage2 picks it
            stage2 = (f"{model}_compiled" if isinstance(model, str) and is_shipped_name(model)
                      else model)
        models.append(_model_files(stage2))
    return repr({
        "model": os.fspath(pruner.model), "top_k": repr(pruner.top_k), "widen": pruner.widen,
        "range_margin": repr(pruner.range_margin), "two_stage": pruner.two_stage,
        "stage2_model": None if pruner.stage2_model is None else os.fspath(pruner.stage2_model),
        "shortlist": pruner.shortlist,
        "stage1_weight": repr(getattr(pruner, "stage1_weight", None)),
        "family": spec.family, "problem": _value(spec.problem),
        "params": sorted(dict(spec.params).items()), "dtype": spec.dtype,
        "trust_family": bool(spec.trust_family), "files": models, "shipped": _shipped()})


def _model_files(model: str | os.PathLike) -> list:
    """(name, [(path, mtime_ns, size) of its JSON and booster] or None) for every file the
    name or path can load: a shipped name's per-family siblings (``<name>_<family>``) too."""
    from costtune.kernels import FAMILIES
    from costtune.model.files import is_shipped_name, resolve

    text = os.fspath(model)
    names = [text] + ([f"{text}_{f}" for f in FAMILIES] if is_shipped_name(text) else [])
    out: list = []
    for name in names:
        try:
            paths = resolve(name)
        except (OSError, ValueError):
            out.append((name, None))
            continue
        out.append((name, [_stat(p) for p in paths]))
    return out


def _stat(path: Path) -> tuple:
    try:
        st = os.stat(path)
    except OSError:
        return (str(path), None)
    return (str(path.resolve()), st.st_mtime_ns, st.st_size)


def _shipped() -> list:
    """Every file of costtune's shipped model folder (models, trained-config tables)."""
    from costtune.model.files import shipped_model_dir

    folder = shipped_model_dir()
    return [_stat(p) for p in sorted(folder.iterdir())] if folder.is_dir() else []


@functools.lru_cache(maxsize=1)
def _code_stamp() -> str:
    """costtune's version and its source files' mtime and size (an editable install changes
    them without a new version)."""
    import costtune

    root = Path(costtune.__file__).resolve().parent
    files = sorted(root.rglob("*.py"))
    stamp = hashlib.sha256(repr([_stat(p) for p in files]).encode()).hexdigest()
    return f"{costtune.__version__}:{stamp}"


def _gpu() -> str:
    """The GPU tuning runs on (the pruner's feasibility limits and "another GPU" doubt)."""
    from costtune.hardware import current_arch

    name = None
    try:
        import torch

        if torch.cuda.is_available():
            name = torch.cuda.get_device_name()
    except Exception:
        pass
    return f"{current_arch()}:{name}"


def _code(code: Any) -> str:
    """A code object's bytecode and constants (nested code objects by their own hash)."""
    consts = [_code(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts]
    return hashlib.sha256(code.co_code + repr(consts).encode()).hexdigest()


def _call_part(tuner: Any, kwargs: dict[str, Any]) -> str:
    """What the pruner reads of the call beyond the tuning key: every argument's shape,
    strides, dtype and alignment or scalar value, and the grid's program count per config."""
    from costtune.tune.grid import grid_programs

    args = {**tuner.nargs, **{k: v for k, v in kwargs.items() if k not in _NOT_ARGS}}
    described = {name: _value(v) for name, v in args.items()}
    grid = kwargs.get("grid")
    programs = None
    if grid is not None:
        programs = [float(p) for p in grid_programs(grid, args, configs=tuner.configs)]
    return repr((sorted(described.items()), programs))


def _value(value: Any) -> Any:
    """A stable description of one argument or option (no addresses, no object ids)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "stride"):
        try:
            aligned = int(value.data_ptr()) % 16 == 0  # what Triton specializes on
        except Exception:  # a fake tensor: no address
            aligned = None
        return ("tensor", tuple(value.shape), tuple(value.stride()), str(value.dtype), aligned)
    if isinstance(value, Mapping):
        return sorted((str(k), _value(v)) for k, v in value.items())
    if isinstance(value, (tuple, list)):
        return [_value(v) for v in value]
    if callable(value) and hasattr(value, "__code__"):
        cells = []
        for cell in value.__closure__ or ():
            try:
                cells.append(_value(cell.cell_contents))
            except ValueError:  # an empty cell
                cells.append(None)
        return ("callable", value.__qualname__, _code(value.__code__), cells)
    return (type(value).__qualname__,
            *[repr(getattr(value, a, None)) for a in ("shape", "strides", "block_shape")])
