"""Features of (workload, config) pairs, keyed like the dataset.

- ``static``: from problem sizes and config alone (tiles, waves, padding, shared-memory estimate,
  intensity, trip counts); cheap enough for the autotune pruning hook.
- ``compiled``: from an ahead-of-time compile for the target arch on the CPU (registers, spills,
  shared memory, PTX/SASS instruction counts); a second stage on a shortlist, or offline.
- ``ir``: TTIR/TTGIR op counts from a compile that stops before PTX (dots, loads by kind, TMA,
  async copies, shared buffers, loop structure, warp specialization); cheaper than compiled.
- ``table``: one feature table per family, written beside the dataset.

>>> import costtune.features as F
>>> table = F.feature_table(dataset, compiled=False)  # doctest: +SKIP
"""

from __future__ import annotations

from costtune._lazy import lazy_exports

_EXPORTS = {
    "COMPILED_FEATURES": "costtune.features.compiled",
    "compiled_features": "costtune.features.compiled",
    "launch_jobs": "costtune.features.compiled",
    "IR_FEATURES": "costtune.features.ir",
    "ir_features": "costtune.features.ir",
    "compute_ir_features": "costtune.features.ir",
    "ir_table_path": "costtune.features.ir",
    "load_ir_tables": "costtune.features.ir",
    "STATIC_FEATURES": "costtune.features.static",
    "static_features": "costtune.features.static",
    "static_features_for": "costtune.features.static",
    "parse_config_key": "costtune.features.static",
    "KEY_COLUMNS": "costtune.features.table",
    "feature_table": "costtune.features.table",
    "compute_features": "costtune.features.table",
    "feature_table_paths": "costtune.features.table",
    "load_feature_tables": "costtune.features.table",
    "classify_error": "costtune.build.errors",
    "kernel_source_hash": "costtune.build.aot",
    "spec_text": "costtune.build.aot",
    "specialize": "costtune.build.aot",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports("costtune.features", _EXPORTS, globals())
