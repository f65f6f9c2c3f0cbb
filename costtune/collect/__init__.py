"""Collection: suites -> workloads (``plan``), measured on this machine's GPU (``local``) or
one Dask task per workload across GPUs and machines (``dask``, the worker side in
``dask_task``).
"""

from __future__ import annotations

from costtune._lazy import lazy_exports

_EXPORTS = {
    "suite_problems": "costtune.collect.plan",
    "bf16_subset": "costtune.collect.plan",
    "suite_workloads": "costtune.collect.plan",
    "workload_configs": "costtune.collect.plan",
    "plan_workloads": "costtune.collect.plan",
    "spread_order": "costtune.collect.plan",
    "collect": "costtune.collect.local",
    "collect_workload": "costtune.collect.workload",
    "collect_dask": "costtune.collect.dask",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports("costtune.collect", _EXPORTS, globals())
