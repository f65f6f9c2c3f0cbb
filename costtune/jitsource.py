"""A Triton kernel's Python function and the source Triton compiles, under autotuners,
heuristics, JIT or interpreted functions (read by ``tune.kind`` and ``features.source``)."""

from __future__ import annotations

import inspect
import re
from typing import Any

__all__ = ["jit_level", "python_function", "source_text", "source_with_helpers",
           "stable_text"]

_WORD = re.compile(r"[A-Za-z_]\w*")


def python_function(kernel: Any) -> Any:
    """The Python function under an autotuner, heuristics, JIT or interpreted function."""
    fn = getattr(kernel, "base_fn", kernel)
    for _ in range(8):
        if inspect.isfunction(fn):
            return fn
        fn = getattr(fn, "fn", None)
    return None


def jit_level(kernel: Any) -> Any:
    """The JIT (or interpreted) function under autotuners and heuristics, else the Python
    function; None when there is neither."""
    obj = kernel  # down the .fn chain (an autotuner's base_fn is the bare function)
    for _ in range(8):
        if inspect.isfunction(obj) or inspect.isfunction(getattr(obj, "fn", None)):
            return obj
        obj = getattr(obj, "fn", None)
    return python_function(kernel)


def source_text(obj: Any) -> str:
    """The source Triton compiles: a JITFunction's ``src``, read when it was decorated (its
    file may have changed since, or the code come from a string), else the Python function's
    source as ``inspect`` reads it (the interpreter's functions); "" when unreadable."""
    src = getattr(obj, "src", None)
    if isinstance(src, str) and not inspect.isfunction(obj):
        return src
    fn = python_function(obj)
    try:
        return inspect.getsource(fn) if fn is not None else ""
    except (OSError, TypeError):
        return ""


def source_with_helpers(obj: Any, *, depth: int) -> str:
    """``source_text(obj)`` and, ``depth`` levels down, that of the JIT functions it names
    (helpers in its module's globals)."""
    text = source_text(obj)
    if not text or depth <= 0:
        return text
    found = [text]
    fn = python_function(obj)
    scope = getattr(fn, "__globals__", {})
    for word in dict.fromkeys(_WORD.findall(text)):
        helper = scope.get(word) if word in scope else None
        if (helper is not None and hasattr(helper, "fn") and python_function(helper) is not None
                and python_function(helper) is not fn):
            found.append(source_with_helpers(jit_level(helper), depth=depth - 1))
    return "\n".join(found)


def stable_text(value: Any, depth: int = 0) -> str:
    """``value`` as text with no memory address: plain values by repr, code by its bytecode,
    constants and names, containers item by item, anything else by its qualified name."""
    if depth > 4:
        return "..."
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    if isinstance(value, (tuple, list, frozenset, set)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return "(" + ",".join(stable_text(v, depth + 1) for v in items) + ")"
    if isinstance(value, dict):
        return "{" + ",".join(f"{stable_text(k, depth + 1)}:{stable_text(v, depth + 1)}"
                              for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))) + "}"
    code = getattr(value, "co_code", None)
    if code is not None:
        return (f"code({code.hex()},{stable_text(value.co_consts, depth + 1)},"
                f"{stable_text(value.co_names, depth + 1)})")
    inner = getattr(value, "__code__", None)
    if inner is not None:  # a function a rule closes over: its code, not its address
        return f"fn({getattr(value, '__qualname__', '')},{stable_text(inner, depth + 1)})"
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}:{getattr(value, '__qualname__', '')}"
