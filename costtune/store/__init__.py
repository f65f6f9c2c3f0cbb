"""The measurement store: append-only parquet parts with environment metadata, a writer lock
and collectors' claims (``locks``), row checks at append (``checks``).
"""

from __future__ import annotations

from costtune._lazy import lazy_exports

_EXPORTS = {
    "Store": "costtune.store.dataset",
    "StoreError": "costtune.store.parts",
    "StoreWarning": "costtune.store.parts",
    "load_dataset": "costtune.store.dataset",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports("costtune.store", _EXPORTS, globals())
