"""costtune: cheap Triton autotuning with a learned cost model.

Heavy modules (torch, triton, xgboost, optuna) load on first use of the name that needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "Config": "costtune.types",
    "Workload": "costtune.types",
    "Measurement": "costtune.types",
    "Status": "costtune.types",
    "ConfigSpace": "costtune.space",
    "get_family": "costtune.kernels",
    "load_dataset": "costtune.store",
    "Store": "costtune.store",
    "ReplayRunner": "costtune.measure.replay",
    "prune_configs_by": "costtune.hook",
    "autotune": "costtune.hook",
    "harvest": "costtune.hook",
    "CosttuneWarning": "costtune.hook",
    "graph_bench": "costtune.hook_bench",
    "CostModel": "costtune.model.xgb",
    "collect_dask": "costtune.distributed",
    "ConfigStudy": "costtune.search",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'costtune' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
