"""What a kernel computes, as far as its name and source say: one of costtune's families, or
another kind no family model has seen (a layer norm, a backward pass, an elementwise kernel).

The hook uses it twice: a kernel is told to be of family F only when nothing says otherwise,
and a kernel declared as F that reads as another kind is ranked with a wider k (the model has
not seen such kernels). ``calling_tuner`` finds the ``triton.autotune`` object whose
``early_config_prune`` is running, so a plain ``prune_configs_by`` dict learns the kernel too.

>>> import triton
>>> @triton.jit
... def _layer_norm_fwd(x, y, n_cols, BLOCK_SIZE: triton.language.constexpr):
...     pass
>>> read_kind(_layer_norm_fwd).what
'a layer norm'
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from dataclasses import dataclass
from typing import Any

from costtune.jitsource import jit_level, python_function, source_text, source_with_helpers
from costtune.kernels.base import (
    GRADIENT_ARGS,
    NAME_PATTERNS,
    OTHER_KIND_PATTERNS,
    OTHER_KIND_SOURCE,
    SOURCE_OPS,
)

_OPS = {op: re.compile(p) for op, p in SOURCE_OPS.items()}
# ``R0_BLOCK: tl.constexpr = 1024``: Inductor's persistent reductions fix their block inside.
_CONSTANT = re.compile(r"^\s*(\w+)\s*:\s*(?:tl|triton\.language)\.constexpr\s*=\s*(\d+)\s*$",
                       re.MULTILINE)


@dataclass(frozen=True)
class KernelKind:
    """``name`` of the kernel function; ``family``: the family it reads as (None for another
    kind); ``what``: the kind in words; ``reason``: what said so."""

    name: str
    family: str | None
    what: str
    reason: str

    def contradicts(self, family: str) -> bool:
        return self.family != family


def read_kind(kernel: Any) -> KernelKind | None:
    """The kernel's kind from its name, else its source (and the JIT helpers it calls); None
    when neither can be read."""
    obj = jit_level(kernel)
    return None if obj is None else _read_kind(obj)


@functools.lru_cache(maxsize=512)
def _read_kind(obj: Any) -> KernelKind | None:
    fn = python_function(obj)
    name = fn.__name__
    lowered = name.lower()
    template = _INDUCTOR_TEMPLATE.search(lowered) if lowered.startswith(
        "triton_tem_fused_") else None
    if template:  # the template's op says what it computes; the rest are fused epilogues
        return KernelKind(name, "gemm", _FAMILY_WORDS["gemm"],
                          f"its name {name!r} (Inductor's {template.group(1)} template)")
    for what, pattern in OTHER_KIND_PATTERNS.items():
        if re.search(pattern, lowered):
            return KernelKind(name, None, what, f"its name {name!r}")
    grads = [p for p in _parameters(fn) if re.match(GRADIENT_ARGS, p, flags=re.IGNORECASE)]
    if grads:
        return KernelKind(name, None, "a backward pass", f"its gradient arguments {grads[:3]}")
    source = source_with_helpers(obj, depth=2)
    ops = {op for op, rx in _OPS.items() if rx.search(source)}
    for family, pattern in NAME_PATTERNS.items():
        if re.search(pattern, lowered):
            if _name_holds(lowered, family, ops if source else None):
                return KernelKind(name, family, _FAMILY_WORDS[family], f"its name {name!r}")
            break  # Inductor names kernels after the ops they came from: read the source
    if not source:
        return None
    for what, pattern in OTHER_KIND_SOURCE.items():
        if re.search(pattern, source, flags=re.IGNORECASE):
            return KernelKind(name, None, what, f"its source (names {pattern!r})")
    family, what = _kind_of_ops(ops)
    used = ", ".join(sorted(ops)) or "no dot, exp, reduction or scan"
    return KernelKind(name, family, what, f"its source ({used})")


_FAMILY_WORDS = {"gemm": "a GEMM", "softmax": "a softmax", "attention": "an attention kernel"}
# Inductor's GEMM templates: triton_tem_fused_<its ops, sorted>_<n>, e.g.
# triton_tem_fused_add_addmm_relu_threshold_backward_0 (a forward Linear + ReLU that also saves
# the ReLU mask for the backward pass: no backward kernel).
_INDUCTOR_TEMPLATE = re.compile(r"(?<![a-z])(addmm|baddbmm|bmm|mm)(?![a-z])")


def source_constants(kernel: Any) -> dict[str, int]:
    """Integer constexprs the kernel's body assigns (``R0_BLOCK: tl.constexpr = 1024``) and
    its constexpr parameters' integer defaults (``BLOCK_SIZE: tl.constexpr = 256``: what a
    launch that does not pass them compiles with)."""
    obj = jit_level(kernel)
    return {} if obj is None else dict(_constants(obj))


@functools.lru_cache(maxsize=512)
def _constants(obj: Any) -> tuple[tuple[str, int], ...]:
    try:
        params = inspect.signature(python_function(obj)).parameters.values()
    except (TypeError, ValueError):
        params = []
    defaults = [(p.name, int(p.default)) for p in params
                if "constexpr" in str(p.annotation) and isinstance(p.default, int)
                and not isinstance(p.default, bool)]
    body = [(name, int(value)) for name, value in _CONSTANT.findall(source_text(obj))]
    return tuple(dict(defaults + body).items())  # the body's assignments win


def _name_holds(lowered: str, family: str, ops: set[str] | None) -> bool:
    """Whether a name that says ``family`` is to be believed: Inductor's pointwise kernels
    (``triton_poi_fused_addmm_relu_0``) compute no family; a GEMM or attention does a
    ``tl.dot`` and a softmax an exp, where the source can be read (``ops``)."""
    if lowered.startswith("triton_poi_"):
        return False
    if ops is None:
        return True
    return ("dot" in ops) if family in ("gemm", "attention") else ("exp" in ops)


def _kind_of_ops(ops: set[str]) -> tuple[str | None, str]:
    if "dot" in ops:  # attention's online softmax needs a row max; an exp alone is an
        # epilogue (GELU, sigmoid, SiLU)
        return ("attention", _FAMILY_WORDS["attention"]) if {"exp", "max"} <= ops else (
            "gemm", _FAMILY_WORDS["gemm"])
    if {"exp", "max", "sum"} <= ops and "rsqrt" not in ops:
        return "softmax", _FAMILY_WORDS["softmax"]
    if "rsqrt" in ops and "sum" in ops:
        return None, "a normalization"
    if "scan" in ops:
        return None, "a scan or sort"
    if ops & {"sum", "max", "reduce"}:
        return None, "a reduction"
    return None, "an elementwise kernel"


def _parameters(fn: Any) -> list[str]:
    """The function's parameters that are no ``tl.constexpr``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if "constexpr" not in str(p.annotation)]


def splits_k(kernel: Any) -> bool | None:
    """Whether the kernel's source (and its JIT helpers) could split K over programs: an
    atomic add, or "split" in a name; None when the source cannot be read."""
    return _source_has(kernel, r"(?i)atomic_add|split_?k|k_?splits?|num_splits")


def heuristic_rules(kernel: Any, *, stop: Any = None) -> list[tuple[str, Any]]:
    """(name, rule) of every ``triton.heuristics`` value under ``kernel`` (down to ``stop``,
    e.g. the autotuner under rules placed over it), outer first: the order Triton's
    ``Heuristics.run`` applies them at each launch, each rule reading the call's arguments,
    the config's values and the values set before it. [] without any."""
    out: list[tuple[str, Any]] = []
    obj = kernel
    for _ in range(8):
        if obj is stop:
            break
        values = getattr(obj, "values", None)
        if isinstance(values, dict) and all(callable(v) for v in values.values()):
            out += [(str(k), v) for k, v in values.items()]
        obj = getattr(obj, "fn", None)
        if obj is None:
            break
    return out


def loops_over_programs(kernel: Any) -> bool | None:
    """Whether the kernel's source could loop over more tiles than programs (a persistent
    kernel: ``tl.num_programs``, an SM count); None when the source cannot be read."""
    return _source_has(kernel, r"num_programs|NUM_SMS?\b|num_sms|NUM_PROGRAMS|sm_count")


def _source_has(kernel: Any, pattern: str) -> bool | None:
    """Whether the kernel's source (and the JIT helpers it calls) matches ``pattern``; None
    when the source cannot be read."""
    obj = jit_level(kernel)
    source = "" if obj is None else source_with_helpers(obj, depth=1)
    return bool(re.search(pattern, source)) if source else None


def calling_tuner(max_depth: int = 8) -> Any:
    """The ``triton.autotune`` Autotuner up the call stack (Triton calls ``early_config_prune``
    from its ``prune_configs``), or None (a direct call)."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:  # pragma: no cover
        return None
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, Autotuner):
            return owner
        frame = frame.f_back
    return None
