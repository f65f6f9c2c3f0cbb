"""Optuna studies over a ConfigSpace, measured on the GPU or replayed from a dataset: the
study (``study``), space encoding, samplers with a model prior, claims that let several
workers share one study (``claims``), and what makes a shared storage safe: opening it, the
SQLite ask lock, heartbeats, failing dead workers' trials (``shared``).
"""

from __future__ import annotations

from costtune._lazy import lazy_exports

_EXPORTS = {
    "ConfigStudy": "costtune.search.study",
    "search": "costtune.search.study",
    "SearchResult": "costtune.search.study",
    "TrialRecord": "costtune.search.study",
    "make_sampler": "costtune.search.samplers",
    "SAMPLERS": "costtune.search.samplers",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports("costtune.search", _EXPORTS, globals())
