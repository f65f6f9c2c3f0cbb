"""Optuna studies over a ``ConfigSpace``: a sampler proposes configs, a runner measures them.

``ConfigStudy`` is built on Optuna's ask/tell. Each trial suggests one int index per parameter
(``SpaceEncoding``), and ends as:

- COMPLETE, value = time in ms, when the runner measured it OK;
- PRUNED with user attr ``status``: a failure measured by the runner (compile error, wrong
  result, ``not_measured`` under replay...), or ``invalid`` when the space's constraints reject
  the proposal, which then never reaches the runner. Under TPE and GP, invalid trials also
  carry the violated constraints as Optuna constraints (> 0 = infeasible; ``set_constraint``,
  or ``constraints_func`` on Optuna < 5). TPE learns from them; GP and CMA-ES learn only from
  COMPLETE trials, so for them the filter alone keeps invalid configs off the GPU;
- COMPLETE or PRUNED with ``cached=True``: a config the study already measured is never measured
  again; the trial reuses the recorded result.

``n_trials`` counts measurements (each one a compile and a benchmark on the GPU): invalid and
cached proposals become trials too but cost nothing, so they don't count. When the sampler is
stuck (it repeats a config the study has seen, or ``patience`` proposals in a row measure nothing
new: GP and CMA-ES can't see pruned trials, TPE converges onto measured configs), the study
enqueues a repair trial: the valid unmeasured config nearest to the last proposal. A study stops
early once every valid config has a result, or at ``target_ms``.

Storage: in memory (default), a SQLite file path, or any Optuna storage URL / object. A named
study resumes (``load_if_exists``). Workers sharing a storage never measure a config twice:
``costtune.search.claims`` elects one measuring trial per config through the storage itself.

Warm start (``warm_start=model``) enqueues the model's ``n_warm`` top-ranked configs as the first
trials and sets TPE/GP's random startup to those trials; ``prior=model`` draws the first
``n_prior`` trials from the model's ranking instead (``search_samplers.ModelPriorSampler``).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage, InMemoryStorage
from optuna.trial import FrozenTrial, Trial, TrialState

from costtune.model.registry import load_model, rank_configs
from costtune.search.claims import ABANDON, Claims
from costtune.search.encoding import SpaceEncoding
from costtune.search.results import INVALID, SearchResult, TrialRecord, is_result
from costtune.search.samplers import (
    CONSTRAINT_SAMPLERS,
    SAMPLERS,
    ModelPriorSampler,
    make_sampler,
    mark_infeasible,
)
from costtune.search.shared import (
    GRACE_S,
    HEARTBEAT_S,
    OWNER_ATTR,
    ask,
    ask_lock,
    beating,
    fail_dead,
    open_storage,
    owner,
    rescue,
)
from costtune.space.config_space import ConfigSpace
from costtune.types import Config, Status, Workload

__all__ = ["ConfigStudy", "SearchResult", "SpaceEncoding", "TrialRecord", "search", "SAMPLERS",
           "INVALID", "open_storage"]

_ERROR_CHARS = 500
_MAX_PROPOSALS_PER_TRIAL = 50


class ConfigStudy:
    """An Optuna study that searches ``workload``'s config space with ``runner``.

    ``runner``: anything with ``measure(workload, configs) -> list[Measurement]``
    (``ReplayRunner`` on CPU, ``GpuRunner`` on a GPU). ``space`` defaults to the family's
    ``config_space(problem)``. ``sampler``: one of ``SAMPLERS``; ``sampler_options`` go to its
    constructor. ``warm_start`` / ``prior``: a ``CostModel`` (or a saved model's path or
    name). Shared storages (see ``costtune.search.shared``): trials beat every ``heartbeat_s``
    seconds and count as dead after ``grace_s`` without a beat (a dead worker of this host at
    once); ``claim_timeout``: seconds to wait for another worker measuring the same config when
    the storage has no heartbeat.

    >>> import costtune
    >>> runner = costtune.ReplayRunner(costtune.load_dataset("datasets/h200",
    ...                                                      kernel="softmax"))
    >>> w = runner.workloads()[0]
    >>> study = ConfigStudy(w, runner, sampler="tpe", seed=0)
    >>> result = study.optimize(8)
    >>> result.n_measured, result.best_config in study.space, len(study.study.trials) >= 8
    (8, True, True)
    """

    def __init__(self, workload: Workload, runner: Any, *, space: ConfigSpace | None = None,
                 sampler: str = "tpe", seed: int | None = None,
                 storage: str | os.PathLike | BaseStorage | None = None,
                 study_name: str | None = None, warm_start: Any = None, n_warm: int = 8,
                 prior: Any = None, n_prior: int = 16, temperature: float = 4.0,
                 sampler_options: dict[str, Any] | None = None,
                 claim_timeout: float = 600.0, heartbeat_s: int | None = HEARTBEAT_S,
                 grace_s: int | None = GRACE_S) -> None:
        if not hasattr(runner, "measure"):
            raise ValueError(f"runner must have measure(workload, configs); got {runner!r}")
        if n_warm < 0 or n_prior < 0:
            raise ValueError(f"n_warm and n_prior must be >= 0, got {n_warm}, {n_prior}")
        self.workload = workload
        self.runner = runner
        if space is None:
            from costtune.kernels import get_implementation

            space = get_implementation(workload.implementation).config_space(workload.sizes)
        self.space = space
        self.encoding = SpaceEncoding(space)
        self.n_configs = len(space)
        self.claim_timeout = float(claim_timeout)
        family = workload.kernel
        warm = (load_model(warm_start, family) if warm_start is not None and n_warm > 0
                else None)
        prior = load_model(prior, family) if prior is not None and n_prior > 0 else None
        startup = n_warm if warm is not None else n_prior if prior is not None else None
        if "n_startup_trials" in (sampler_options or {}):
            startup = None  # the caller's own value, passed with the options
        chosen = make_sampler(sampler, seed=seed, n_startup_trials=startup,
                              options=sampler_options)
        self.prior: ModelPriorSampler | None = None
        if prior is not None:
            ranked = [self.encoding.params(c) for c in self._ranked(prior)]
            self.prior = ModelPriorSampler(chosen, ranked=ranked,
                                           distributions=self.encoding.distributions(),
                                           n_prior=n_prior, temperature=temperature, seed=seed)
            chosen = self.prior
        self.sampler_name = sampler
        # Only TPE and GP read trial constraints (CMA-ES warns that it ignores them).
        self._constraints = sampler in CONSTRAINT_SAMPLERS
        self.storage = open_storage(storage, heartbeat_s=heartbeat_s, grace_s=grace_s)
        self.study = optuna.create_study(storage=self.storage, sampler=chosen,
                                         study_name=study_name, direction="minimize",
                                         load_if_exists=True)
        with ask_lock(self.storage):
            self._check_workload()
        # One process owns an in-memory storage: no other worker can measure behind our back.
        self._shared = not isinstance(self.storage, InMemoryStorage)
        self._owner = owner()
        self._claims = (Claims(self.storage, self.study.study_name, worker=self._owner)
                        if self._shared else None)
        if self._shared:  # trials a killed earlier run left RUNNING
            fail_dead(self.study)
        self._known: dict[str, FrozenTrial] = {}
        self._refresh()
        self._rng = np.random.default_rng(seed)
        self._last: dict[str, Any] | None = None
        self._repeat = False
        self._last_frozen: FrozenTrial | None = None
        self._seen = {t.user_attrs["config"] for t in self.study.get_trials(deepcopy=False)
                      if "config" in t.user_attrs}
        if warm is not None:
            self._enqueue(self._ranked(warm)[:n_warm])

    # ------------------------------------------------------------------------------ set-up
    def _ranked(self, model: Any) -> list[Config]:
        return rank_configs(model, self.workload, configs=self.space.configs())

    def _check_workload(self) -> None:
        attrs = self.study.user_attrs
        want = {"workload": self.workload.id, "n_configs": self.n_configs}
        for key, value in want.items():
            have = attrs.get(key)
            if have is None:
                self.study.set_user_attr(key, value)
            elif have != value:
                raise ValueError(f"study {self.study.study_name!r} has {key}={have!r}, this "
                                 f"search has {value!r}: use another study name")

    def _enqueue(self, configs: list[Config]) -> None:
        for rank, config in enumerate(configs):
            if config.key not in self._known:
                self.study.enqueue_trial(
                    self.encoding.params(config), skip_if_exists=True,
                    user_attrs={"source": "warm_start", "warm_rank": rank})

    def _refresh(self) -> None:
        states = (TrialState.COMPLETE, TrialState.PRUNED)
        for t in self.study.get_trials(deepcopy=False, states=states):
            key = t.user_attrs.get("config")
            if key is not None and is_result(t):
                self._known.setdefault(key, t)

    @property
    def exhausted(self) -> bool:
        """True once every valid config of the space has a result in the study."""
        return len(self._known) >= self.n_configs

    # ---------------------------------------------------------------------------- running
    def optimize(self, n_trials: int, *, patience: int = 8, target_ms: float | None = None,
                 progress: Callable[[TrialRecord], None] | None = None) -> SearchResult:
        """Measure up to ``n_trials`` new configs (fewer once the space is exhausted, or once a
        config at least as fast as ``target_ms`` is found).

        After ``patience`` proposals in a row that measured nothing new (invalid, or already
        measured), or at once when a proposal repeats a config the study has seen (the sampler
        is stuck or has converged), the next trial is a repair: the valid unmeasured config
        nearest (L1 over parameter indices) to the last proposal. ``progress`` is called with
        each finished trial's record.
        """
        if n_trials < 0 or patience < 1:
            raise ValueError(f"need n_trials >= 0 and patience >= 1, got {n_trials}, {patience}")
        records: list[TrialRecord] = []
        history: list[float] = []
        measured = idle = proposals = 0
        best = math.inf
        stopped = "n_trials"
        while measured < n_trials:
            if target_ms is not None and best <= target_ms:
                stopped = "target"
                break
            if self.exhausted:
                stopped = "exhausted"
                break
            if proposals >= _MAX_PROPOSALS_PER_TRIAL * n_trials + 100:
                stopped = "proposals"  # only when other workers keep winning every claim
                break
            if idle >= patience:
                self._repair()
                idle = 0
            record, new = self.step()
            proposals += 1
            if record is not None:
                records.append(record)
                if progress is not None:
                    progress(record)
                if record.status == Status.OK.value:
                    best = min(best, record.time_ms)
            # A config the study has seen before means the sampler is stuck there: repair now.
            idle = 0 if new else patience if self._repeat else idle + 1
            if new:
                measured += 1
                history.append(best if best < math.inf else math.nan)
        if self._shared:
            fail_dead(self.study)
        best_config, best_time = self.best()
        return SearchResult(self.workload, self.study.study_name, best_config, best_time,
                            n_proposals=len(records), n_measured=measured, history=history,
                            trials=records, stopped=stopped)

    def _repair(self) -> None:
        if self._last is None:
            return
        config = self.encoding.nearest(self._last, exclude=self._known, rng=self._rng)
        if config is not None:
            self.study.enqueue_trial(self.encoding.params(config),
                                     user_attrs={"source": "repair"})

    def step(self) -> tuple[TrialRecord | None, bool]:
        """Ask one trial and finish it: (record, whether the runner measured it). The record is
        None when another worker turned out to run the same queued trial. The trial never stays
        RUNNING: an exception fails it."""
        trial = ask(self.study)
        with beating(self.storage, trial._trial_id):
            try:
                if self._shared:
                    trial.set_user_attr(OWNER_ATTR, self._owner)
                return self._run(trial)
            except UpdateFinishedTrialError:  # another worker finished this very trial
                return None, False
            except BaseException:
                with contextlib.suppress(Exception):
                    self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
                raise

    def _run(self, trial: Trial) -> tuple[TrialRecord | None, bool]:
        values = self.encoding.suggest(trial)
        self._last = values
        config = Config.from_dict(values)
        key = config.key
        self._repeat = key in self._seen
        self._seen.add(key)
        source = trial.user_attrs.get("source") or (
            "prior" if self.prior is not None and self.prior.in_prior(trial.number)
            else "sampler")
        attrs: dict[str, Any] = {"config": key, "source": source}
        violated = self.space.violated(values)
        if violated:
            attrs.update(status=INVALID, violated=violated)
            if self._constraints:
                mark_infeasible(trial, violated)
            return self._tell(trial, attrs, TrialState.PRUNED), False
        hit = self._lookup(key, trial)
        if hit is None and self._claims is not None:
            hit = self._claims.settle(key, trial_id=trial._trial_id, timeout=self.claim_timeout,
                                      study=self.study)
        if hit is ABANDON:
            return None, False
        if hit is not None:
            return self._reuse(trial, attrs, hit), False
        return self._measure(trial, config, attrs), True

    def _lookup(self, key: str, trial: Trial) -> Any:
        hit = self._known.get(key)
        if hit is None and self._shared:
            self._refresh()
            hit = self._known.get(key)
        if hit is not None and hit.number == trial.number:
            return ABANDON  # another worker runs this very trial (popped twice from the queue)
        return hit

    def _measure(self, trial: Trial, config: Config, attrs: dict[str, Any]) -> TrialRecord:
        try:
            m = self.runner.measure(self.workload, [config])[0]
        except BaseException as exc:
            attrs.update(status="error", error=f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS])
            with contextlib.suppress(UpdateFinishedTrialError):
                self._tell(trial, attrs, TrialState.FAIL)
            raise
        attrs["status"] = m.status.value
        ok = m.status == Status.OK and math.isfinite(m.time_ms)
        if not ok and m.error:
            attrs["error"] = m.error[:_ERROR_CHARS]
        state = TrialState.COMPLETE if ok else TrialState.PRUNED
        value = m.time_ms if ok else None
        try:
            record = self._tell(trial, attrs, state, value)
        except UpdateFinishedTrialError:
            record = None
        if record is None:  # failed as dead while measuring: keep the measurement anyway
            record = self._rescue(trial, attrs, state, value)
        self._known.setdefault(config.key, self._last_frozen)
        return record

    def _rescue(self, trial: Trial, attrs: dict[str, Any], state: TrialState,
                value: float | None) -> TrialRecord:
        self._last_frozen = rescue(self.study, trial, attrs, state=state, value=value)
        return TrialRecord(self._last_frozen.number, attrs["config"], attrs["status"],
                           float("nan") if value is None else float(value),
                           source=attrs["source"])

    def _reuse(self, trial: Trial, attrs: dict[str, Any], hit: FrozenTrial) -> TrialRecord:
        attrs.update(status=hit.user_attrs.get("status", Status.OK.value), cached=True,
                     measured_by=hit.number)
        if hit.state == TrialState.COMPLETE:
            return self._tell(trial, attrs, TrialState.COMPLETE, hit.value)
        return self._tell(trial, attrs, TrialState.PRUNED)

    def _tell(self, trial: Trial, attrs: dict[str, Any], state: TrialState,
              value: float | None = None) -> TrialRecord | None:
        """Finish ``trial``; None when another worker finished it first."""
        for name, v in attrs.items():
            # Each attribute is one storage write: skip what the trial already holds (the
            # source of enqueued trials) and the default source.
            if trial.user_attrs.get(name) != v and (name, v) != ("source", "sampler"):
                trial.set_user_attr(name, v)
        frozen = self.study.tell(trial, value if state == TrialState.COMPLETE else None,
                                 state=state, skip_if_finished=True)
        if frozen.state != state:
            return None
        self._last_frozen = frozen
        return TrialRecord(trial.number, attrs["config"], attrs["status"],
                           float("nan") if value is None else float(value),
                           cached=bool(attrs.get("cached", False)), source=attrs["source"])

    # ----------------------------------------------------------------------------- results
    def best(self) -> tuple[Config | None, float]:
        """The fastest OK config of the whole study and its time (None, nan when none)."""
        best: FrozenTrial | None = None
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.value is not None and (best is None or t.value < best.value):
                best = t
        if best is None:
            return None, float("nan")
        values = {n: v[best.params[n]] if n in best.params else v[0]
                  for n, v in self.encoding.values.items()}
        return Config.from_dict(values), float(best.value)


def search(workload: Workload, runner: Any, *, n_trials: int = 32, patience: int = 8,
           target_ms: float | None = None, **options: Any) -> SearchResult:
    """Run a ``ConfigStudy`` (``options`` are its keyword arguments) for ``n_trials``
    measurements.

    >>> import costtune
    >>> runner = costtune.ReplayRunner(costtune.load_dataset("datasets/h200", kernel="gemm"))
    >>> w = runner.workloads()[0]
    >>> result = search(w, runner, n_trials=16, sampler="cmaes", seed=0)
    >>> result.n_measured, result.best_time_ms >= runner.best(w).time_ms
    (16, True)
    """
    accepted = set(inspect.signature(ConfigStudy).parameters) - {"workload", "runner"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; ConfigStudy takes {sorted(accepted)}")
    study = ConfigStudy(workload, runner, **options)
    return study.optimize(n_trials, patience=patience, target_ms=target_ms)
