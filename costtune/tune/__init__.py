"""The Triton boundary: how a launch is described (``launch``), which configs can run
(``feasibility``, ``trained``: values the training data had), ranking and trust (``ranking``),
knobs the model cannot tell apart (``knobs``), the pruner (``pruner``, ``decision``; its
stage 2 ``stage2``; ``launchable``: nothing kept fails to launch under plain autotune),
``autotune`` and its tuner that replaces failing configs and checks outputs (``autotune``,
``tuner``, ``guard``), the adaptive budget (``adaptive``), per-kernel learning (``learn``),
the parallel precompile, the model preload and harvest.
"""

from __future__ import annotations

from costtune._lazy import lazy_exports

_EXPORTS = {
    "prune_configs_by": "costtune.tune.pruner",
    "autotune": "costtune.tune.autotune",
    "ConfigPruner": "costtune.tune.pruner",
    "PruneDecision": "costtune.tune.pruner",
    "harvest": "costtune.tune.harvest",
    "enable_harvest": "costtune.tune.harvest",
    "Adaptive": "costtune.tune.adaptive",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports("costtune.tune", _EXPORTS, globals())
