"""Which configs can run on the target, decided before anything is ranked or compiled.

A config is dropped only when it surely cannot launch:

1. Launch options Triton or the GPU refuse (``refuse_options``, any kernel): ``num_warps``
   not a positive power of two (Triton asserts it) or over the block's thread limit
   (``num_warps * 32 > 1024``), ``num_stages`` negative, ``num_ctas`` or ``maxnreg`` not
   positive; a bool or a fraction wherever an int belongs.
2. The family's tile sizes not positive integers (0, 1.5, True) (``refuse_for_family``).
3. Shared memory: the family's lower bound (``kernels.<family>.shared_memory_floor``) above
   the target's per-block limit (``costtune.hardware``). The bound depends on whether each
   operand loads 16-aligned, read from the call's tensors the way Triton specializes them
   (``operand_alignment``); it never exceeds the compiled size on the dataset's rows
   (experiments/feasibility.py).

Registers are not checked: Triton compiles with ``.maxntid``, so ptxas spills rather than
fail, and what does not fit after compiling is caught by ``costtune.autotune``'s replacement.

>>> import triton
>>> refuse_options([triton.Config({}, num_warps=3), triton.Config({}, num_warps=4)])
{0: 'num_warps=3 is not a power of two'}
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from numbers import Integral
from typing import Any

import numpy as np

from costtune.hardware import Target

__all__ = ["config_text", "invalid_sizes", "launch_traits", "meta_args", "operand_alignment",
           "over_shared_limit", "refuse_for_family", "refuse_options", "shared_floor", "shown",
           "hook_mark", "vote_key"]

# Family tile parameters that must be positive integers (neutral ones are filled in as 1).
_SIZE_PARAMS = {"gemm": ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K"),
                "softmax": ("BLOCK_N", "ROWS_PER_PROG"), "attention": ("BLOCK_M", "BLOCK_N")}
# Per family: the operand tensors whose alignment sets the shared-memory bound, and their rank.
_OPERANDS = {"gemm": (("a", "b"), 2), "attention": (("q", "k", "v"), 4), "softmax": (("x",), 2)}


def config_text(config: Any) -> str:
    """A triton.Config as text with its values as given (``Config.key`` would cast them) and
    its launch options."""
    parts = [f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
             for k, v in config.kwargs.items()]
    parts += [f"num_warps={config.num_warps}", f"num_stages={config.num_stages}"]
    for name in ("num_ctas", "maxnreg", "ir_override"):
        value = getattr(config, name, None)
        if value is not None and not (name == "num_ctas" and value == 1):
            parts.append(f"{name}={value}")
    return ",".join(parts)


HOOK_MARK = "|pre_hook@"


def hook_mark(config: Any) -> str:
    """What tells a config apart by its ``pre_hook`` (Triton's ``Config.__eq__`` compares it):
    "" without one."""
    hook = getattr(config, "pre_hook", None)
    return f"{HOOK_MARK}{id(hook):x}" if hook is not None else ""


def vote_key(config: Any) -> str:
    """``config_text`` told apart by the config's ``pre_hook``: what ``check=`` judges each
    config by; ``shown`` gives the text back."""
    return config_text(config) + hook_mark(config)


def shown(key: str) -> str:
    """A ``vote_key`` as the user reads it: the config's text."""
    return key.split(HOOK_MARK)[0]


def _is_int(value: Any) -> bool:
    # type() first: isinstance against the Integral ABC costs ~3 us, the hook's budget is ms.
    return type(value) is int or (isinstance(value, Integral) and not isinstance(value, bool))


def _option_problem(config: Any, *, target: Target) -> str | None:
    warps = config.num_warps
    if not _is_int(warps) or warps < 1:
        return f"num_warps={warps!r} is not a positive integer"
    if warps & (warps - 1):
        return f"num_warps={warps} is not a power of two"
    if warps * target.warp_size > target.max_threads_per_block:
        return (f"num_warps={warps} is {warps * target.warp_size} threads, over the "
                f"{target.max_threads_per_block} a block may have")
    stages = config.num_stages
    if not _is_int(stages) or stages < 0:
        return f"num_stages={stages!r} is not an integer >= 0"
    ctas = getattr(config, "num_ctas", 1)
    if not _is_int(ctas) or ctas < 1:
        return f"num_ctas={ctas!r} is not a positive integer"
    regs = getattr(config, "maxnreg", None)
    if regs is not None and (not _is_int(regs) or regs < 1):
        return f"maxnreg={regs!r} is not a positive integer"
    return None


def refuse_options(configs: Sequence[Any], *, target: Target | None = None) -> dict[int, str]:
    """{position: reason} for configs whose launch options Triton or the GPU refuse."""
    from costtune.hardware import current

    target = current() if target is None else target
    out = {}
    for i, config in enumerate(configs):
        problem = _option_problem(config, target=target)
        if problem is not None:
            out[i] = problem
    return out


def ruled_options(configs: Sequence[Any], params: Sequence[Mapping[str, Any]],
                  by_rule: Mapping[str, str], *, target: Target | None = None) -> dict[int, str]:
    """{position: reason} for configs whose num_warps / num_stages a ``triton.heuristics``
    rule sets (``params[i]``: the values the launch takes) to what Triton or the GPU refuse."""
    options = [o for o in ("num_warps", "num_stages") if o in by_rule]
    if not options:
        return {}
    from costtune.hardware import current

    target = current() if target is None else target
    out = {}
    for i, (config, p) in enumerate(zip(configs, params, strict=True)):
        launched = copy.copy(config)
        for option in options:
            setattr(launched, option, p[option])
        problem = _option_problem(launched, target=target)
        if problem is not None:
            out[i] = f"{problem} (as triton.heuristics sets it)"
    return out


def _tensor_aligned(value: Any) -> bool:
    """Triton's view of a tensor's loads: base 16-byte aligned, every stride 1 or a multiple of
    16 elements (the divisibility it specializes integer arguments on)."""
    try:
        ptr = int(value.data_ptr())
        strides = tuple(int(s) for s in value.stride())
    except Exception:  # a fake or exotic tensor: alignment unknown
        return False
    return ptr % 16 == 0 and all(s == 1 or s % 16 == 0 for s in strides)


def _descriptor_aligned(value: Any) -> bool:
    """A host TMA descriptor (``TensorDescriptor``): TMA copies whole tiles into shared
    memory asynchronously, so its loads are pipelined like 16-aligned ones; the hardware
    requires a 16-byte aligned base and strides, checked here as well."""
    try:
        base = value.base
        size = base.element_size()
        strides = [int(s) for s in value.strides]
        return int(base.data_ptr()) % 16 == 0 and all(s == 1 or (s * size) % 16 == 0
                                                       for s in strides)
    except Exception:
        return False


def _is_descriptor(value: Any) -> bool:
    return all(hasattr(value, a) for a in ("base", "block_shape", "strides")) and hasattr(
        value.base, "data_ptr")


def operand_alignment(family: str, args: Mapping[str, Any]) -> dict[str, bool]:
    """Whether each of the family's operands loads 16-aligned, from the call's arguments in
    order (GEMM: the first two matrices or TMA descriptors are A and B; attention: the first
    three 4-D tensors or descriptors are Q, K, V). A plain tensor counts when Triton's
    specialization sees its loads 16-aligned; a TMA descriptor when TMA accepts it. Anything
    else (absent, unknown) counts as unaligned, the case with the smaller bound.

    >>> import torch
    >>> a, b = torch.empty(64, 1000), torch.empty(1000, 64)
    >>> operand_alignment("gemm", {"a": a, "b": b})
    {'a': False, 'b': True}
    """
    names, ndim = _OPERANDS[family]
    found = [(v, _descriptor_aligned) if _is_descriptor(v) else (v, _tensor_aligned)
             for v in args.values()
             if _is_descriptor(v) or (hasattr(v, "shape") and hasattr(v, "dtype")
                                      and len(v.shape) == ndim)]
    return {name: (i < len(found) and found[i][1](found[i][0]))
            for i, name in enumerate(names)}


def meta_args(family: str, problem: Mapping[str, int], dtype: str) -> dict[str, Any]:
    """The family's own kernel's tensors for ``problem`` as contiguous ``meta`` tensors (shape,
    strides and dtype, no memory): what the hook sees of a call, for checks without data.

    >>> sorted(meta_args("gemm", {"M": 64, "N": 1000, "K": 512}, "float16"))
    ['a', 'b', 'c']
    """
    import torch

    from costtune.kernels import dtype_of

    dt = dtype_of(dtype)
    if family == "gemm":
        m, n, k = (int(problem[x]) for x in ("M", "N", "K"))
        shapes = {"a": (m, k), "b": (k, n), "c": (m, n)}
    elif family == "attention":
        shape = tuple(int(problem[x]) for x in ("B", "H", "S", "D"))
        shapes = {"q": shape, "k": shape, "v": shape, "out": shape}
    else:
        shapes = {"x": (int(problem["rows"]), int(problem["cols"]))}
        shapes["out"] = shapes["x"]
    return {name: torch.empty(shape, dtype=dt, device="meta") for name, shape in shapes.items()}


def shared_floor(family: str, problem: Mapping[str, int], params: Mapping[str, Any], *,
                 dtype: str, aligned: Mapping[str, bool], target: Target,
                 warp_specialized: Any = False) -> Any:
    """The family's lower bound on the shared memory a config needs (bytes; an array when
    ``params`` holds arrays, one entry per config)."""
    from costtune.kernels import get_family

    return get_family(family).shared_memory_floor(
        dict(problem), dict(params), dtype=dtype, aligned=dict(aligned), arch=target.arch,
        warp_specialized=warp_specialized)


def family_table(launch: Any, configs: Sequence[Any], refused: Mapping[int, str], *,
                 ruled: tuple[list, dict[int, str]] | None = None
                 ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray], dict[int, str]]:
    """Per config the family's parameters (``names.family_params``, with the values the
    launch's ``triton.heuristics`` rules set: ``ruled``, ``names.rule_values``' result), the
    same as feature columns (NaN for configs that cannot launch) and {position: why} for
    configs not already ``refused`` whose tile sizes are invalid or whose rules fail or set
    launch options Triton refuses."""
    from costtune.features.static import config_columns
    from costtune.tune.names import family_params

    values, failed = ruled if ruled is not None else (None, {})
    params = family_params(launch.family, configs, rename=launch.rename, meta=launch.meta,
                           set_by_rules=values)
    invalid = dict(failed)
    invalid.update(ruled_options(configs, params, launch.by_rule))
    valid = [i for i in range(len(configs)) if i not in refused and i not in invalid]
    invalid.update({valid[j]: why for j, why in
                    invalid_sizes(launch.family, [params[i] for i in valid]).items()})
    ok = set(valid) - set(invalid)
    columns = config_columns([params[i] if i in ok else {} for i in range(len(configs))])
    return params, columns, invalid


def invalid_sizes(family: str, params: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """{position: reason} for family parameter dicts whose tile sizes are not positive
    integers (0, 1.5, True)."""
    out = {}
    for i, p in enumerate(params):
        bad = next((name for name in _SIZE_PARAMS[family]
                    if not _is_int(p.get(name)) or p[name] < 1), None)
        if bad is not None:
            out[i] = f"{bad}={p.get(bad)!r} is not a positive integer"
    return out


def launch_traits(configs: Sequence[Any], values: Sequence[Mapping[str, Any]] | None = None
                  ) -> dict[str, np.ndarray]:
    """Per config what changes how a kernel buffers its tiles but is no family parameter:
    ``warp_specialize`` (1 where a kwarg of that name, any case, is true) and ``num_ctas``;
    from ``values`` where given (``names.launched_values``: after ``triton.heuristics``
    rules, which may set either)."""
    values = values or [{**dict(c.kwargs), "num_ctas": getattr(c, "num_ctas", 1)}
                        for c in configs]
    ws = [any(k.lower() == "warp_specialize" and bool(v) for k, v in vals.items())
          for vals in values]
    ctas = [vals.get("num_ctas") if _is_int(vals.get("num_ctas")) else 1 for vals in values]
    return {"warp_specialize": np.array(ws, dtype=float), "num_ctas": np.array(ctas, float)}


def with_launch_traits(traits: Mapping[str, np.ndarray], args: Mapping[str, Any]
                       ) -> dict[str, np.ndarray]:
    """``launch_traits`` with what the call's own arguments set for every config: tutorials
    06 and 09 pass ``warp_specialize`` at the launch, not in the configs."""
    out = dict(traits)
    if any(k.lower() == "warp_specialize" and isinstance(v, (bool, int)) and bool(v)
           for k, v in args.items()) and "warp_specialize" in out:
        out["warp_specialize"] = np.ones_like(out["warp_specialize"])
    return out


def over_limit_at(launch: Any, columns: Mapping[str, np.ndarray], ok: np.ndarray, *,
                  args: Mapping[str, Any], traits: Mapping[str, np.ndarray], target: Target,
                  stages: int | str | None = None) -> dict[int, str]:
    """``over_shared_limit`` for the configs at positions ``ok`` of a described launch
    (``columns`` and ``traits`` over the whole list, the call's ``args``), keyed by position.
    ``stages``: ``features.pipelining.dot_stages`` of the kernel; an int is how deep its dots'
    operands are buffered whatever the config's num_stages (1: not pipelined)."""
    if not len(ok):
        return {}
    if isinstance(stages, int):
        columns = {**columns, "num_stages": np.full(len(columns["num_stages"]), float(stages))}
    over = over_shared_limit(
        launch.family, launch.problem, launch.dtype, {c: v[ok] for c, v in columns.items()},
        aligned=operand_alignment(launch.family, args), target=target,
        traits={t: v[ok] for t, v in with_launch_traits(traits, args).items()})
    return {int(ok[j]): why for j, why in over.items()}


def over_shared_limit(family: str, problem: Mapping[str, int], dtype: str,
                      columns: Mapping[str, np.ndarray], *, aligned: Mapping[str, bool],
                      target: Target, traits: Mapping[str, np.ndarray] | None = None
                      ) -> dict[int, str]:
    """{position: reason} for configs (valid ones, as float columns of the family's parameters
    and num_warps/num_stages; ``traits`` from ``launch_traits``) whose shared-memory lower
    bound exceeds the target's limit. Clusters (num_ctas > 1) are never dropped: how a
    cluster shares tiles is not modelled."""
    n = len(np.atleast_1d(np.asarray(columns["num_stages"])))
    traits = traits or {}
    ws = np.asarray(traits.get("warp_specialize", np.zeros(n)), dtype=bool)
    single = np.asarray(traits.get("num_ctas", np.ones(n))) <= 1
    need = np.atleast_1d(np.asarray(shared_floor(family, problem, columns, dtype=dtype,
                                                 aligned=aligned, target=target,
                                                 warp_specialized=ws)))
    limit = target.max_shared_per_block
    return {int(i): (f"needs at least {int(need[i]):,} B of shared memory, over the "
                     f"{limit:,} B per block of the {target.name}")
            for i in np.flatnonzero((need > limit) & single)}


def refuse_for_family(family: str, problem: Mapping[str, int], dtype: str,
                      params: Sequence[Mapping[str, Any]], *, args: Mapping[str, Any],
                      target: Target | None = None,
                      traits: Mapping[str, np.ndarray] | None = None) -> dict[int, str]:
    """{position: reason} for configs (as the family's parameter dicts, with num_warps and
    num_stages; ``traits``: ``launch_traits`` of the configs) that cannot launch: tile sizes
    that are not positive integers, or a shared-memory lower bound over the limit (operand
    alignment read from ``args``)."""
    from costtune.hardware import current

    target = current() if target is None else target
    out = invalid_sizes(family, params)
    valid = [i for i, p in enumerate(params) if i not in out
             and _is_int(p.get("num_warps")) and _is_int(p.get("num_stages"))]
    if valid:
        names = [*_SIZE_PARAMS[family], "num_warps", "num_stages"]
        columns = {n: np.array([float(params[i].get(n, 1)) for i in valid]) for n in names}
        sub = None if traits is None else {k: np.asarray(v)[valid] for k, v in traits.items()}
        over = over_shared_limit(family, problem, dtype, columns,
                                 aligned=operand_alignment(family, args), target=target,
                                 traits=sub)
        out.update({valid[j]: why for j, why in over.items()})
    return dict(sorted(out.items()))


def summary(configs: Sequence[Any], reasons: Mapping[int, str], *, limit: int = 3) -> str:
    """One line naming up to ``limit`` dropped configs and why."""
    items = sorted(reasons.items())
    shown = "; ".join(f"{config_text(configs[i])}: {why}" for i, why in items[:limit])
    more = f"; and {len(items) - limit} more" if len(items) > limit else ""
    return (f"dropped {len(items)} of {len(configs)} configs that cannot launch "
            f"({shown}{more})")


def finite_time(timing: Any) -> bool:
    """Whether a do_bench result (a float or a list of quantiles) is a real time."""
    first = timing[0] if isinstance(timing, (list, tuple)) and timing else timing
    try:
        return math.isfinite(float(first))
    except (TypeError, ValueError):
        return False


def dropped(configs: Sequence[Any], refused: Mapping[int, str]) -> dict[str, str]:
    """{config as given: why it cannot launch} (the canonical key would cast num_warps=4.0)."""
    return {config_text(configs[i]): why for i, why in sorted(refused.items())}
