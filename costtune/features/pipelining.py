"""How a kernel's ``tl.dot`` operands are multi-buffered, read from its Python source (and its
jit helpers') without a compile: what the shared-memory floor (``tune.feasibility``) may
assume of ``num_stages``.

Triton's software pipeliner buffers the loads feeding a dot ``num_stages`` deep only inside
an ``scf.for``: a ``for`` over ``range`` / ``tl.range`` (which may pin its own depth with
``num_stages=``). A dot in straight-line code (one K tile, no loop) or in a loop Triton
unrolls (``tl.static_range``) stages its operands once, whatever the config's ``num_stages``.

>>> import triton, triton.language as tl
>>> @triton.jit
... def one_tile(a, b, c, BLOCK: tl.constexpr):
...     r = tl.arange(0, BLOCK)
...     x = tl.load(a + r[:, None] * BLOCK + r[None, :])
...     tl.store(c + r[:, None] * BLOCK + r[None, :], tl.dot(x, x))
>>> dot_stages(one_tile)
1
"""

from __future__ import annotations

import ast
import textwrap
import weakref
from typing import Any

from costtune.features.source import _resolve, source_function
from costtune.jitsource import source_text

CONFIG = "config"  # some dot is buffered as deep as the config's num_stages


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def dot_stages(fn: Any) -> int | str | None:
    """``CONFIG`` when some ``tl.dot`` (in the kernel or a jit helper, at any of its call
    sites) sits in a ``range`` / ``tl.range`` loop that takes the config's ``num_stages``;
    else the deepest ``num_stages=<int>`` such a loop pins (1 when every dot is outside any
    pipelined loop); None when it cannot be told (no source, no dot, a dot whose innermost
    loop is a ``while`` or whose depth is not a literal)."""
    root = source_function(fn)
    if root is None:
        return None
    try:  # once per jit function and source (the pruner asks at every tuning call)
        cached = _CACHE.get(root)
        if cached is None or cached[0] != getattr(root, "src", None):
            cached = _CACHE[root] = (getattr(root, "src", None), _stages(root))
        return cached[1]
    except TypeError:  # not weakly referenceable
        return _stages(root)


def _stages(root: Any) -> int | str | None:
    found: list[int | str | None] = []
    _walk(root, False, found, set())  # False: outside any loop
    if not found or None in found:
        return None
    if CONFIG in found:
        return CONFIG
    return max(int(s) for s in found)


def _loop_stages(node: ast.For | ast.While, scope: dict[str, Any]) -> int | str | None:
    """What a loop makes of a dot inside it: ``"static"`` (unrolled: no loop to pipeline),
    the literal depth it pins, ``CONFIG``, or None (a while loop, a non-literal depth)."""
    if isinstance(node, ast.While) or not isinstance(node.iter, ast.Call):
        return None
    func = node.iter.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name == "static_range":
        return "static"
    if name != "range":
        return None
    depth = next((k.value for k in node.iter.keywords if k.arg == "num_stages"), CONFIG)
    if depth is CONFIG:
        return CONFIG
    if isinstance(depth, ast.Constant) and type(depth.value) is int:
        return max(1, depth.value)
    return None


def _walk(f: Any, loop: Any, found: list, seen: set) -> None:
    if (id(f), loop) in seen:  # a helper is read once per loop context it is called in
        return
    seen.add((id(f), loop))
    try:
        tree = ast.parse(textwrap.dedent(source_text(f)))
    except (OSError, SyntaxError, TypeError, ValueError):
        found.append(None)
        return
    body = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if body is None:
        found.append(None)
        return
    scope = dict(f.fn.__globals__)

    def visit(node: ast.AST, loop: Any) -> None:
        if isinstance(node, ast.For | ast.While):
            stages = _loop_stages(node, scope)
            loop = loop if stages == "static" else stages
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "dot":
                found.append(1 if loop is False else loop)
            callee = source_function(_resolve(node.func, scope))
            if callee is not None:
                _walk(callee, loop, found, seen)
        for child in ast.iter_child_nodes(node):
            visit(child, loop)

    for node in body.body:
        visit(node, loop)

