"""Lazy re-exports for package ``__init__`` modules: a name's module loads on first use, so
importing a package does not pull in torch, triton, xgboost or optuna before they are needed."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str],
                 namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list]]:
    """``(__getattr__, __dir__)`` for ``package`` whose public ``name -> module`` map is
    ``exports``; a loaded name is cached in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
