"""What a study run returns (one ``TrialRecord`` per finished trial, a ``SearchResult``) and
which trials hold a measured result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from costtune.types import Config, Workload

INVALID = "invalid"  # status of a proposal outside the space's constraints (never run)


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial: ``status`` is ``ok``, a failure status, or ``invalid``."""

    number: int
    config: str
    status: str
    time_ms: float = float("nan")
    cached: bool = False
    source: str = "sampler"  # warm_start | prior | sampler


@dataclass
class SearchResult:
    """What ``ConfigStudy.optimize`` did, and the study's best config (over all its trials:
    earlier sessions and other workers included)."""

    workload: Workload
    study_name: str
    best_config: Config | None
    best_time_ms: float
    n_proposals: int  # trials this run finished: measured, invalid and cached ones
    n_measured: int  # configs this run sent to the runner (the trials that count)
    history: list[float] = field(default_factory=list)  # best OK time after each measurement
    trials: list[TrialRecord] = field(default_factory=list)
    stopped: str = "n_trials"  # n_trials | target | exhausted | proposals

    def as_dict(self) -> dict[str, Any]:
        return {"workload": self.workload.id, "study_name": self.study_name,
                "best_config": None if self.best_config is None else self.best_config.as_dict(),
                "best_config_key": None if self.best_config is None else self.best_config.key,
                "best_time_ms": self.best_time_ms, "trials_run": self.n_measured,
                "proposals": self.n_proposals, "stopped": self.stopped}


def is_result(trial: FrozenTrial) -> bool:
    """A trial whose config was measured (now or by an earlier trial): OK or a failure."""
    if trial.state == TrialState.COMPLETE:
        return True
    status = trial.user_attrs.get("status")
    return trial.state == TrialState.PRUNED and status not in (None, INVALID, "error")

