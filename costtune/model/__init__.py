"""The cost model and how it is judged.

- ``xgb``: ``CostModel`` (fit / predict / rank / top_k / save / load), ``ModelSchemaError``
- ``features``: the model's feature sets over ``costtune.features``
- ``metrics``: TenSet top-k score, per-workload scores, regret, Kendall tau
- ``baselines`` / ``roofline``: Triton tutorial lists, best static list, random, roofline
- ``evaluate``: protocols (split, kfold, lofo), ``leaderboard``, ``train_default``
- ``report``: ``plot_topk`` and the rich leaderboard table

Names load on first use (sklearn, xgboost and matplotlib stay unimported until needed).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CostModel": "costtune.model.xgb",
    "ModelSchemaError": "costtune.model.xgb",
    "attach_features": "costtune.model.features",
    "feature_names": "costtune.model.features",
    "topk_table": "costtune.model.metrics",
    "topk_scores": "costtune.model.metrics",
    "kendall_tau": "costtune.model.metrics",
    "TritonTutorialList": "costtune.model.baselines",
    "BestStaticList": "costtune.model.baselines",
    "RandomConfigs": "costtune.model.baselines",
    "Roofline": "costtune.model.roofline",
    "expected_random_scores": "costtune.model.baselines",
    "evaluate": "costtune.model.evaluate",
    "leaderboard": "costtune.model.evaluate",
    "train_default": "costtune.model.evaluate",
    "default_model": "costtune.model.evaluate",
    "plot_topk": "costtune.model.report",
    "format_leaderboard": "costtune.model.report",
    "leaderboard_table": "costtune.model.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'costtune.model' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
