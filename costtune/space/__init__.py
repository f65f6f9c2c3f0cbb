"""Config spaces: parameters, constraints, enumerate / sample / neighbours, to and from
``triton.Config``.
"""

from __future__ import annotations

from costtune._lazy import lazy_exports

_EXPORTS = {
    "ConfigSpace": "costtune.space.config_space",
    "NamedConstraint": "costtune.space.config_space",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports("costtune.space", _EXPORTS, globals())
