"""The package's shape: one folder per pipeline stage, no import cycle, small modules and
functions (what a newcomer reads first must stay readable)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "costtune"
STAGES = ("space", "kernels", "build", "measure", "store", "collect", "features", "model",
          "evaluate", "tune", "search", "cli")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """costtune modules that ``name`` imports anywhere (top level or inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name and t != "costtune":
                found.add(t)
    return found


def test_every_stage_is_a_package():
    for stage in STAGES:
        assert (PACKAGE / stage / "__init__.py").is_file(), stage


def test_no_import_cycle():
    modules = _modules()
    graph = {m: _imports(m, p, set(modules)) for m, p in modules.items()}
    # A package's __init__ re-exporting its own submodules is not a cycle.
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_modules_and_functions_stay_small():
    long_modules, long_functions = [], []
    for name, path in _modules().items():
        source = path.read_text()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(name)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}.{node.name}")
    assert long_modules == [] and long_functions == []
