"""costtune: cheap Triton autotuning with a learned cost model.

Heavy modules (torch, triton, xgboost, optuna) load on first use of the name that needs them.
"""

from __future__ import annotations

from costtune._lazy import lazy_exports

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "Adaptive": "costtune.tune.adaptive",
    "Config": "costtune.types",
    "Workload": "costtune.types",
    "Measurement": "costtune.types",
    "Status": "costtune.types",
    "CosttuneWarning": "costtune.types",
    "ConfigSpace": "costtune.space.config_space",
    "get_family": "costtune.kernels.base",
    "get_implementation": "costtune.kernels.base",
    "load_dataset": "costtune.store.dataset",
    "Store": "costtune.store.dataset",
    "ReplayRunner": "costtune.measure.replay",
    "graph_bench": "costtune.measure.bench",
    "prune_configs_by": "costtune.tune.pruner",
    "autotune": "costtune.tune.autotune",
    "harvest": "costtune.tune.harvest",
    "explain": "costtune.tune.explain",
    "CostModel": "costtune.model.xgb",
    "collect_dask": "costtune.collect.dask",
    "ConfigStudy": "costtune.search.study",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports("costtune", _EXPORTS, globals())
