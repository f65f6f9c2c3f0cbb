"""Source features: what a kernel's Python source does, read without a GPU or a compile, so
that one model can rank configs of several implementations of a family and tell them apart
(issue 18; experiments/impl_descriptor.py measures what they buy).

``describe(fn)`` walks a ``@triton.jit`` function's AST and the jit helpers it calls: loops
and their nesting, loads, stores, dots, reductions, atomics, whether it reads the program
count (a persistent loop), whether it loads or stores through tensor descriptors (TMA). The
pruning hook describes the user's kernel this way (``tune.pruner``); dataset rows get the
descriptor of the kernel their implementation launches for their config
(``source_features``).

>>> import triton, triton.language as tl
>>> @triton.jit
... def copy(x, y, n, BLOCK: tl.constexpr):
...     for i in range(0, n, BLOCK):
...         tl.store(y + i + tl.arange(0, BLOCK), tl.load(x + i + tl.arange(0, BLOCK)))
>>> d = describe(copy)
>>> d["src_loops"], d["src_loads"], d["src_stores"], d["src_persistent"]
(1.0, 1.0, 1.0, 0.0)
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
import weakref
from functools import lru_cache
from typing import Any

import pandas as pd

from costtune.jitsource import source_text

SOURCE_FEATURES = ["src_loops", "src_loop_depth", "src_loads", "src_stores", "src_dots",
                   "src_reduces", "src_atomics", "src_persistent", "src_descriptors"]
_REDUCES = {"max", "min", "sum", "reduce", "argmax", "argmin", "xor_sum", "cumsum"}
_FLAGS = ("src_loop_depth", "src_persistent", "src_descriptors")  # max, not sum, over kernels


def source_function(fn: Any) -> Any:
    """The jit function under autotuners and heuristics (``fn`` itself when it is one: a
    ``JITFunction``, or the interpreter's ``InterpretedFunction``, whose Python source reads
    the same); None when there is none. ``build.aot.jit_function`` is the compile's
    counterpart: it needs a real ``JITFunction`` and raises otherwise."""
    for _ in range(8):
        if isinstance(getattr(fn, "fn", None), types.FunctionType):
            return fn
        fn = getattr(fn, "fn", None)
        if fn is None:
            return None
    return None


def describe(fn: Any) -> dict[str, float]:
    """The source features of a ``@triton.jit`` function (or an autotuner over one) and of
    the jit helpers it calls by name; all zero when no source can be read."""
    counts = dict.fromkeys(SOURCE_FEATURES, 0.0)
    root = source_function(fn)
    if root is None:
        return counts
    seen: set[int] = set()
    _walk(root, 0, counts, seen)
    return counts


def _walk(f: Any, depth0: int, counts: dict[str, float], seen: set[int]) -> None:
    if id(f) in seen:
        return
    seen.add(id(f))
    try:  # the source Triton compiles (the interpreter runs the Python function's own)
        tree = ast.parse(textwrap.dedent(source_text(f)))
    except (OSError, SyntaxError, TypeError, ValueError):
        return
    body = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if body is None:
        return
    scope = dict(f.fn.__globals__)
    try:  # helpers captured from an enclosing function (kernels built by a factory)
        scope.update(inspect.getclosurevars(f.fn).nonlocals)
    except (TypeError, ValueError):
        pass

    def visit(node: ast.AST, depth: int) -> None:
        if isinstance(node, ast.For | ast.While):
            counts["src_loops"] += 1
            depth += 1
            counts["src_loop_depth"] = max(counts["src_loop_depth"], float(depth))
        if isinstance(node, ast.Attribute):
            _count(node, counts, scope)
        if isinstance(node, ast.Call):
            callee = source_function(_resolve(node.func, scope))
            if callee is not None:
                _walk(callee, depth, counts, seen)
        for child in ast.iter_child_nodes(node):
            visit(child, depth)

    for node in body.body:  # not the decorators (an autotune config list is no code)
        visit(node, depth0)


def _resolve(node: ast.AST, scope: dict[str, Any]) -> Any:
    """The object a name or dotted name (``helpers.tile``) stands for in ``scope``; None."""
    if isinstance(node, ast.Name):
        return scope.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, scope)
        return getattr(owner, node.attr, None) if owner is not None else None
    return None


def _count(node: ast.Attribute, counts: dict[str, float], scope: dict[str, Any]) -> None:
    name = node.attr
    counts["src_loads"] += name == "load"
    counts["src_stores"] += name == "store"
    counts["src_dots"] += name == "dot"
    counts["src_reduces"] += name in _REDUCES
    counts["src_atomics"] += name.startswith("atomic_")
    if name == "num_programs":
        counts["src_persistent"] = 1.0
    # desc.load / desc.store read or write through a tensor descriptor (TMA); tl.load, or
    # triton.language.load under any alias, is a module's function.
    through_module = isinstance(_resolve(node.value, scope), types.ModuleType)
    if (name in ("load", "store") and not through_module) or name == "make_tensor_descriptor":
        counts["src_descriptors"] = 1.0


_DESCRIBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def described(fn: Any) -> dict[str, float]:
    """``describe(fn)``, once per jit function (the pruner asks at every tuning call); a
    copy, so no caller can change what the next one gets. Held weakly: a kernel that goes
    away takes its entry with it."""
    root = source_function(fn)
    if root is None:
        return describe(fn)
    try:
        cached = _DESCRIBED.get(root)
        if cached is None or cached[0] != getattr(root, "src", None):
            cached = (getattr(root, "src", None), describe(root))
            _DESCRIBED[root] = cached
    except TypeError:  # not weakly referenceable
        return describe(root)
    return dict(cached[1])


def attach_source(features: pd.DataFrame, kernel: Any
                  ) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """The hook's feature rows plus ``kernel``'s source features, and a doubt (the hook then
    widens k) when its source could not be read: all zero would rank it as some other kernel."""
    source = described(kernel)
    doubt = [] if readable(source) else [(
        "features", "the kernel's source could not be read (no loads or stores found in it or "
        "in the jit helpers it calls by name), so the model cannot tell which kind of kernel "
        "it ranks")]
    return features.assign(**source), doubt


def readable(features: dict[str, float]) -> bool:
    """Whether a descriptor saw the kernel's code (any load or store): all zero means its
    source could not be read or its work sits where the walk does not follow."""
    return features["src_loads"] + features["src_stores"] > 0


def combine(parts: list[dict[str, float]]) -> dict[str, float]:
    """One launch's features from its kernels' (counts add, flags take the largest)."""
    out = dict.fromkeys(SOURCE_FEATURES, 0.0)
    for part in parts:
        for k, v in part.items():
            out[k] = max(out[k], v) if k in _FLAGS else out[k] + v
    return out


def _probe(family: str, row: Any) -> dict[str, int]:
    """A tiny problem whose launch runs the same kernels as ``row``'s (only the original
    softmax chooses its kernel by the problem: BLOCK_N vs cols)."""
    if family == "softmax":
        return {"rows": 1, "cols": int(row["cols"])}
    if family == "gemm":
        return {"M": 64, "N": 64, "K": 64}
    return {"B": 1, "H": 1, "S": 128, "D": int(row["D"]), "causal": int(row["causal"])}


_KEYS = {"softmax": ("cols", "BLOCK_N"), "gemm": ("SPLIT_K",), "attention": ("D", "causal")}


@lru_cache(maxsize=4096)
def _launch_features(implementation: str, family: str, key: tuple) -> tuple[float, ...]:
    from costtune.kernels import get_implementation
    from costtune.types import Config

    impl = get_implementation(implementation)
    row = dict(zip(("implementation", *_KEYS[family]), (implementation, *key)))
    probe = _probe(family, row)
    space = impl.config_space(probe)
    config = next(iter(space))  # any config the probe allows, with the row's own values
    values = {**dict(config.kwargs), "num_warps": config.num_warps,
              "num_stages": config.num_stages}
    values.update({k: v for k, v in row.items() if k in space.names and pd.notna(v)})
    calls = impl.kernel_calls(impl.make_inputs(probe, "float16"), Config.from_dict(values))
    feats = combine([describe(call.fn) for call in calls])
    return tuple(feats[k] for k in SOURCE_FEATURES)


def source_features(rows: pd.DataFrame) -> pd.DataFrame:
    """SOURCE_FEATURES of dataset rows: the kernels each row's implementation (default: the
    family's original) launches for its config; same index as ``rows``."""
    from costtune.kernels import family_of

    impl = (rows["implementation"].fillna(rows["kernel"]) if "implementation" in rows
            else rows["kernel"]).astype(str)
    out = pd.DataFrame(index=rows.index, columns=SOURCE_FEATURES, dtype="float64")
    for name, idx in impl.groupby(impl).groups.items():
        try:
            family = family_of(name)
        except (KeyError, ValueError):  # a kernel of no known implementation: missing
            continue
        keys = list(_KEYS[family])
        part = rows.reindex(columns=keys).loc[idx]  # a key column absent: NaN (not used)
        by = keys if len(keys) > 1 else keys[0]
        for key, sub in part.groupby(by, dropna=False, sort=False).groups.items():
            key = key if isinstance(key, tuple) else (key,)
            out.loc[sub, SOURCE_FEATURES] = _launch_features(
                name, family, tuple(_plain(v) for v in key))
    return out


def _plain(value: Any) -> Any:
    """A hashable, comparable cell value (numpy scalars to Python, NaN kept)."""
    try:
        value = value.item()
    except AttributeError:
        pass
    if isinstance(value, float) and value.is_integer():
        return int(value)  # a config column read as float next to missing values
    return value
