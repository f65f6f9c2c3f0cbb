"""Learn the user's kernel as it is tuned: ``costtune.autotune(..., learn=True)``.

After each tuning call, the configs benchmarked (as ``costtune.harvest`` would store them)
update the kernel's own model (``costtune.model.learned``: continued training of the model
the pruner was given, on every row this kernel ever harvested on this GPU model), keyed by the
kernel's function name, a hash of its source (an edited kernel starts afresh) and the GPU's
name. Later tuning calls of the same kernel, in this process or a new one, rank with it (the
pruner loads it through ``costtune.model.registry``). A kernel that does not read as a family
(no features to learn from) is not learned; the reason is kept in ``Learner.skipped``.

>>> import costtune, triton
>>> @costtune.autotune(configs=[triton.Config({"BLOCK_N": 1024})], key=["rows", "cols"],
...                    family="softmax", learn=True)
... @triton.jit
... def softmax(x, y, rows, cols, BLOCK_N: triton.language.constexpr):
...     pass
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from costtune.tune.harvest import source_hash

__all__ = ["Learner", "source_hash"]


class Learner:
    """Updates and locates one kernel's per-kernel model; built by ``costtune.autotune``.

    ``updated``: model files written by this process; ``skipped``: why a tuning taught
    nothing."""

    def __init__(self, fn: Any, *, model: Any) -> None:
        base = getattr(fn, "fn", fn)
        self.name = getattr(base, "__name__", "kernel")
        self.hash = source_hash(fn)
        self.model = os.fspath(model) if isinstance(model, os.PathLike) else model
        self.updated: list[Path] = []
        self.skipped: list[str] = []
        self._gpu: str | None = None

    @property
    def learns(self) -> bool:
        """Only a model given by name or path can be learned from (its files are the base)."""
        return isinstance(self.model, str)

    def folder(self) -> Path:
        from costtune.model.files import kernel_dir
        from costtune.tune.ranking import current_gpu

        if self._gpu is None:
            self._gpu = current_gpu() or "cpu"  # what harvest records without a GPU
        return kernel_dir(self.name, self.hash, self._gpu)

    def record(self, tuner: Any, args: tuple, kwargs: dict[str, Any]) -> Path | None:
        """Learn from the tuning ``tuner.run(*args, **kwargs)`` just did; never raises."""
        from costtune.tune.harvest import tuning_rows

        try:
            if not self.learns:
                self.skipped.append("the model was given as an object, not a name or path")
                return None
            import pandas as pd

            from costtune.model.learned import update

            _, rows = tuning_rows(tuner, args, kwargs=kwargs, gpu=self._gpu)
            rows = pd.DataFrame(rows)
            if rows.empty or rows["family"].isna().all():
                self.skipped.append(f"{self.name} does not read as a kernel family")
                return None
            family = str(rows["family"].dropna().iloc[0])
            rows = rows[rows["family"] == family].assign(kernel=family,
                                                         kernel_hash=self.hash)
            path = update(self.folder(), rows, base=self.model, family=family)
            self.updated.append(path)
            return path
        except Exception as exc:  # learning only helps later calls; never break this one
            from costtune.tune.decision import warn

            self.skipped.append(f"{type(exc).__name__}: {exc}")
            warn(f"costtune: the per-kernel model of {self.name} was not updated "
                 f"({type(exc).__name__}: {exc})")
            return None
