"""The one compile engine: a reusable process pool (collection, offline features), threads
in this process (the hook's precompile, a shortlist's AOT features), AOT compiles for a target
without a GPU, and the record cache.
"""

from __future__ import annotations

from costtune._lazy import lazy_exports

_EXPORTS = {
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports("costtune.build", _EXPORTS, globals())
