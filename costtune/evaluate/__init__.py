"""How a cost model is judged: TenSet top-k and other metrics (``metrics``), protocols
(split, k-fold, leave-one-family-out) and the leaderboard (``protocols``), tables and plots
(``report``).
"""

from __future__ import annotations

from costtune._lazy import lazy_exports

_EXPORTS = {
    "topk_table": "costtune.evaluate.metrics",
    "topk_scores": "costtune.evaluate.metrics",
    "kendall_tau": "costtune.evaluate.metrics",
    "evaluate": "costtune.evaluate.protocols",
    "leaderboard": "costtune.evaluate.protocols",
    "train_default": "costtune.evaluate.protocols",
    "default_model": "costtune.evaluate.protocols",
    "plot_topk": "costtune.evaluate.report",
    "format_leaderboard": "costtune.evaluate.report",
    "leaderboard_table": "costtune.evaluate.report",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports("costtune.evaluate", _EXPORTS, globals())
