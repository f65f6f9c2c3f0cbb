"""Measuring configs: GPU-only timing with correctness checks (``gpu``), the graph-replay
benchmark for autotune (``bench``), and replay of a recorded dataset (``replay``).
"""

from __future__ import annotations

from costtune._lazy import lazy_exports

_EXPORTS = {
    "GpuRunner": "costtune.measure.gpu",
    "measure_workload": "costtune.measure.gpu",
    "graph_bench": "costtune.measure.bench",
    "ReplayRunner": "costtune.measure.replay",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports("costtune.measure", _EXPORTS, globals())
