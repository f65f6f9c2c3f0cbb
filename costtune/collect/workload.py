"""The unit of collection: one workload's configs measured on this process's GPU, as rows.
A local collection and a Dask task both call it."""

from __future__ import annotations

from collections.abc import Callable

from costtune.types import Config, Measurement, Workload


def collect_workload(workload: Workload, configs: list[Config], *, reps: int = 10,
                     seed: int = 0, workers: int | None = None, extra: dict | None = None,
                     progress: Callable[[Measurement], None] | None = None) -> list[dict]:
    """Measure one workload on this process's GPU and return its rows (the unit of work)."""
    from costtune.measure.gpu import measure_workload

    ms = measure_workload(workload, configs, reps=reps, seed=seed, workers=workers,
                          extra=extra, progress=progress)
    return [m.as_row() for m in ms]
