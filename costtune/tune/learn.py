"""Learn the user's kernel as it is tuned: ``costtune.autotune(..., learn=True)``.

After each tuning call, the configs benchmarked (as ``costtune.harvest`` would store them)
update the kernel's own model (``costtune.model.learned``: the model the pruner was given,
refitted on its training table plus every row this kernel ever harvested on this GPU model
that has an order to teach, a shape with two or more configs measured; or, for a model
without a table, continued on those rows), keyed by the kernel's function
name, a hash of its source and its JIT helpers' (an edited kernel or helper starts afresh)
and the GPU's name. Later tuning calls of the same kernel, in this process or a new one,
rank with it (the pruner loads it through ``costtune.model.registry``). A kernel that does
not read as a family (no features to learn from) is not learned; the reason is kept in
``Learner.skipped``.

>>> import costtune, triton
>>> @costtune.autotune(configs=[triton.Config({"BLOCK_N": 1024})], key=["rows", "cols"],
...                    family="softmax", learn=True)
... @triton.jit
... def softmax(x, y, rows, cols, BLOCK_N: triton.language.constexpr):
...     pass
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from costtune.build.forked import LEARN_THREAD
from costtune.tune.harvest import source_hash

__all__ = ["STAGE2", "Learner", "source_hash"]

STAGE2 = "stage2"  # the kernel folder's sub-folder for its stage-2 (compiled) model
# Per kernel (name, source hash), shared by every Learner of the kernel in this process: the
# thread updating its models and the tunings' rows it has yet to learn from.
_PENDING: dict[tuple[str, str], threading.Thread] = {}
_QUEUED: dict[tuple[str, str], list] = {}
_PENDING_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # A forked child has none of the parent's update threads: forget them and what they had
    # queued (the parent learns it), and take a fresh lock (one held at the fork stays held).
    global _PENDING_LOCK
    _PENDING_LOCK = threading.Lock()
    _PENDING.clear()
    _QUEUED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Learner:
    """Updates and locates one kernel's per-kernel model; built by ``costtune.autotune``.

    ``record`` reads what a tuning measured at once and updates the models in a background
    thread, so the tuning call returns as soon as its kernel has run: a refit of the shipped
    GEMM model takes 8-13 s on an H200 host's core (experiments/NOTES.md, nineteenth
    session). Nothing waits for it but the process's exit (and ``wait``, ``updated``,
    ``skipped``): a tuning made meanwhile ranks with the model learned before, and the rows of
    tunings made meanwhile are learned together in one more update (one per base model, when
    wrappers of the kernel rank with different ones), so a program tuning several shapes in a
    row pays for at most two updates, at its exit. ``updated``: model
    files written for this Learner's tunings; ``skipped``: why a tuning taught nothing."""

    def __init__(self, fn: Any, *, model: Any) -> None:
        base = getattr(fn, "fn", fn)
        self.name = getattr(base, "__name__", "kernel")
        self._fn, self._hash = fn, None
        self.model = os.fspath(model) if isinstance(model, os.PathLike) else model
        self._updated: list[Path] = []
        self._skipped: list[str] = []
        self._gpu: str | None = None
        self._site: tuple | None = None  # the last tuning call's (file, line, globals)

    @property
    def hash(self) -> str:
        """The kernel's source hash, read at its first tuning (not when decorated: a JIT
        helper defined below the kernel exists only once its module has run)."""
        if self._hash is None:
            self._hash = source_hash(self._fn)
        return self._hash

    @property
    def updated(self) -> list[Path]:
        self.wait()
        return self._updated

    @property
    def skipped(self) -> list[str]:
        self.wait()
        return self._skipped

    @property
    def learns(self) -> bool:
        """Only a model given by name or path can be learned from (its files are the base)."""
        return isinstance(self.model, str)

    @property
    def _pending(self) -> threading.Thread | None:
        return _PENDING.get((self.name, self.hash))

    def wait(self) -> None:
        """Return once every update of the kernel (of any Learner of it) is written."""
        while (pending := self._pending) is not None and pending is not threading.current_thread():
            pending.join()
            with _PENDING_LOCK:  # a worker that ended without clearing its entry
                if _PENDING.get((self.name, self.hash)) is pending and not pending.is_alive():
                    del _PENDING[(self.name, self.hash)]

    def folder(self) -> Path:
        from costtune.model.files import kernel_dir
        from costtune.tune.ranking import current_gpu

        if self._gpu is None:
            self._gpu = current_gpu() or "cpu"  # what harvest records without a GPU
        return kernel_dir(self.name, self.hash, self._gpu)

    def _stage2_rows(self, tuner: Any, args: tuple, kwargs: dict[str, Any], rows: Any
                     ) -> tuple[Any, str] | None:
        """With ``two_stage``: the stage-2 model learns from the same rows too, with the
        compiled features of the user's kernel at each benchmarked config (its folder's
        ``stage2/``): those rows and the base to update. Skipped, and said in ``skipped``,
        where the kernel cannot be compiled here (Triton's interpreter) or the stage-2 model
        was given as an object."""
        import pandas as pd

        from costtune.model.features import COMPILE_OK
        from costtune.model.registry import default_stage2
        from costtune.tune.launch import call_args
        from costtune.tune.ranking import kernel_compiled_table

        pruner = tuner.early_config_prune
        if not getattr(pruner, "two_stage", False):
            return None
        source = (pruner.stage2_model if pruner.stage2_model is not None
                  else default_stage2(pruner.model))
        if not isinstance(source, str | os.PathLike):
            self._skipped.append("stage 2: the model was given as an object")
            return None
        configs = list(tuner.configs_timings)
        try:
            table = kernel_compiled_table(tuner, call_args(dict(zip(tuner.arg_names, args)),
                                                           kwargs),
                                          configs, cache_dir=pruner.cache_dir,
                                          workers=pruner.workers, memo=pruner._compiled)
        except Exception as exc:
            self._skipped.append(f"stage 2: {type(exc).__name__}: {exc}")
            return None
        if len(table) != len(rows):
            self._skipped.append("stage 2: rows and compiled configs differ")
            return None
        table[COMPILE_OK] = (table["compile_status"] == "ok").astype(float)
        table = table.drop(columns=["compile_error", "compile_key", "compile_s"])
        learned = pd.concat([rows.reset_index(drop=True), table.reset_index(drop=True)],
                            axis=1)
        return learned, os.fspath(source)

    def record(self, tuner: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        """Learn from the tuning ``tuner.run(*args, **kwargs)`` just did: its rows are read
        now, the models updated in the background (``wait``); never raises."""
        from costtune.tune.decision import call_site
        from costtune.tune.harvest import tuning_rows

        self._site = call_site()  # where a failure in the update thread is said to be
        try:
            if not self.learns:
                self._skipped.append("the model was given as an object, not a name or path")
                return
            import pandas as pd

            _, rows = tuning_rows(tuner, args, kwargs=kwargs, gpu=self._gpu)
            rows = pd.DataFrame(rows)
            if rows.empty or rows["family"].isna().all():
                self._skipped.append(
                    f"{self.name} is not learned: its launch is not described in a kernel "
                    "family's terms, or which family it is stays in doubt (a kind or family "
                    "doubt: see costtune explain)")
                return
            family = str(rows["family"].dropna().iloc[0])
            rows = rows[rows["family"] == family].assign(kernel=family,
                                                         kernel_hash=self.hash)
            jobs = [(self.folder(), rows, self.model)]
            stage2 = self._stage2_rows(tuner, args, kwargs, rows)
            if stage2 is not None:
                jobs.append((self.folder() / STAGE2, *stage2))
            _import_exit_hooks()
        except Exception as exc:  # learning only helps later calls; never break this one
            self._failed(exc)  # also a tuning after the interpreter began shutting down
            return
        key = (self.name, self.hash)
        with _PENDING_LOCK:
            _QUEUED.setdefault(key, []).append((self, jobs, family))
            if key not in _PENDING:
                try:
                    _start_update(key, self.name)
                except RuntimeError as exc:  # no new thread at the interpreter's shutdown
                    _QUEUED.pop(key, None)
                    self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        from costtune.tune.decision import warn

        self._skipped.append(f"{type(exc).__name__}: {exc}")
        warn(f"costtune: the per-kernel model of {self.name} was not updated "
             f"({type(exc).__name__}: {exc})", at=self._site)


def _start_update(key: tuple[str, str], name: str) -> None:
    """Start the kernel's update thread (``_PENDING_LOCK`` held)."""
    from costtune.tune.preload import background

    imports = background(_import_update_modules, "costtune-learn-imports")
    # Not a daemon: a process that ends right after tuning still writes what it learned.
    thread = threading.Thread(target=_drain, args=(key, imports), name=f"{LEARN_THREAD}{name}")
    thread.start()  # it waits for _PENDING_LOCK, held here, before it reads _PENDING
    _PENDING[key] = thread


def _import_update_modules() -> None:
    """Every module an update imports, imported before it starts, in a thread the next tuning
    call waits for (``tune.preload.wait``): the update then imports nothing while a tuning
    imports. Two threads importing modules that import each other can hand one of them a
    half-initialised module: on the H200 a tuning's pruner got costtune.model.xgb without
    its CostModel from an update importing it meanwhile, and kept all 328 configs."""
    try:
        _import_all()
    except ImportError:  # the update itself meets and reports it
        pass


def _import_exit_hooks() -> None:
    """The modules an update imports that register an exit hook with threading
    (concurrent.futures, which xgboost and pyarrow import), imported here, on the tuning's
    thread: imported by the update thread after a script's last line, they raise "can't
    register atexit after shutdown" and the update is lost. And filelock's lock classes
    (``store.locks``): filelock holds their creation while the process forks, so a
    background import of them would stall a fork that waits for it (``preload``)."""
    import concurrent.futures.process  # noqa: F401
    import concurrent.futures.thread  # noqa: F401

    import costtune.store.locks  # noqa: F401


def _import_all() -> None:
    import filelock  # noqa: F401
    import pyarrow.parquet  # noqa: F401  (pandas' parquet engine)
    import xgboost  # noqa: F401

    import costtune.evaluate.metrics  # noqa: F401
    import costtune.features.static  # noqa: F401
    import costtune.model.features  # noqa: F401
    import costtune.model.forest  # noqa: F401
    import costtune.model.learned  # noqa: F401
    import costtune.model.registry  # noqa: F401
    import costtune.model.training  # noqa: F401
    import costtune.model.xgb  # noqa: F401
    import costtune.store.locks  # noqa: F401


def _drain(key: tuple[str, str], imports: threading.Thread) -> None:
    """The kernel's update thread: once ``imports`` is done, learns every queued tuning's
    rows, those queued while it worked together in one update per model folder and base
    model, until none
    are left (its entry goes in the same step, so a tuning queued later starts a new thread).
    Ended any other way, its entry goes too and what is still queued is said failed."""
    me = threading.current_thread()
    try:
        imports.join()
        while True:
            with _PENDING_LOCK:
                batch = _QUEUED.pop(key, [])
                if not batch:
                    if _PENDING.get(key) is me:
                        del _PENDING[key]
                    return
            _learn(batch)
    finally:
        left = []
        with _PENDING_LOCK:
            if _PENDING.get(key) is me:
                del _PENDING[key]
                left = _QUEUED.pop(key, [])
        for learner, _, _ in left:
            learner._failed(RuntimeError("the kernel's update thread ended before learning "
                                         "this tuning"))


def _learn(batch: list) -> None:
    """One update per model folder and base model for the queued tunings' rows: two autotune
    wrappers of one kernel with different ``model=`` each learn from their own base (the
    folder's rows are shared; its current model is the last one written, and a tuning uses
    it only when it was learned from the tuning's own base)."""
    import pandas as pd

    from costtune.model.learned import update

    folders: dict[tuple[Path, str], tuple[list, str, list]] = {}
    for learner, jobs, family in batch:
        for folder, rows, base in jobs:
            entry = folders.setdefault((folder, base), ([], family, []))
            entry[0].append(rows)
            if learner not in entry[2]:
                entry[2].append(learner)
    for (folder, base), (rows, family, learners) in folders.items():
        try:
            path = update(folder, pd.concat(rows, ignore_index=True), base=base,
                          family=family)
        except Exception as exc:  # noqa: BLE001 - said in skipped and warned
            for learner in learners:
                learner._failed(exc)
            continue
        for learner in learners:
            if path is None:
                stage = "stage 2: " if folder.name == STAGE2 else ""
                learner._skipped.append(
                    f"{stage}{family}: these tunings measured no shape at two or more configs "
                    "(e.g. top_k=1), so there is no new order to learn; their rows are kept")
            else:
                learner._updated.append(path)
