"""Learn the user's kernel as it is tuned: ``costtune.autotune(..., learn=True)``.

After each tuning call, the configs benchmarked (as ``costtune.harvest`` would store them)
update the kernel's own model (``costtune.model.learned``: the model the pruner was given,
refitted on its training table plus every row this kernel ever harvested on this GPU model,
or, for a model without a table, continued on those rows), keyed by the
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

__all__ = ["STAGE2", "Learner", "source_hash"]

STAGE2 = "stage2"  # the kernel folder's sub-folder for its stage-2 (compiled) model


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

    def _record_stage2(self, tuner: Any, args: tuple, kwargs: dict[str, Any], rows: Any,
                       family: str) -> Path | None:
        """With ``two_stage``: the stage-2 model learns from the same rows too, with the
        compiled features of the user's kernel at each benchmarked config (its folder's
        ``stage2/``). Skipped, and said in ``skipped``, where the kernel cannot be compiled
        here (Triton's interpreter) or the stage-2 model was given as an object."""
        import pandas as pd

        from costtune.model.features import COMPILE_OK
        from costtune.model.learned import update
        from costtune.model.registry import default_stage2
        from costtune.tune.launch import call_args
        from costtune.tune.ranking import kernel_compiled_table

        pruner = tuner.early_config_prune
        if not getattr(pruner, "two_stage", False):
            return None
        source = (pruner.stage2_model if pruner.stage2_model is not None
                  else default_stage2(pruner.model))
        if not isinstance(source, str | os.PathLike):
            self.skipped.append("stage 2: the model was given as an object")
            return None
        configs = list(tuner.configs_timings)
        try:
            table = kernel_compiled_table(tuner, call_args(dict(zip(tuner.arg_names, args)),
                                                           kwargs),
                                          configs, cache_dir=pruner.cache_dir,
                                          workers=pruner.workers, memo=pruner._compiled)
        except Exception as exc:
            self.skipped.append(f"stage 2: {type(exc).__name__}: {exc}")
            return None
        if len(table) != len(rows):
            self.skipped.append("stage 2: rows and compiled configs differ")
            return None
        table[COMPILE_OK] = (table["compile_status"] == "ok").astype(float)
        table = table.drop(columns=["compile_error", "compile_key", "compile_s"])
        learned = pd.concat([rows.reset_index(drop=True), table.reset_index(drop=True)],
                            axis=1)
        path = update(self.folder() / STAGE2, learned, base=os.fspath(source), family=family)
        self.updated.append(path)
        return path

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
            self._record_stage2(tuner, args, kwargs, rows, family)
            return path
        except Exception as exc:  # learning only helps later calls; never break this one
            from costtune.tune.decision import warn

            self.skipped.append(f"{type(exc).__name__}: {exc}")
            warn(f"costtune: the per-kernel model of {self.name} was not updated "
                 f"({type(exc).__name__}: {exc})")
            return None
