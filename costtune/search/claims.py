"""Claims: which trial measures a config when several workers share one Optuna storage.

Before measuring, a trial claims its config by creating a trial in a companion study named
``<study>:claims`` that holds the config key and the claiming trial's id. Optuna's storages
create a trial and its attributes in one transaction and number a study's trials in creation
order (RDB storages lock the study row while numbering; SQLite serialises all writers), so a
worker that reads the claims after its own claim was created sees every earlier claim. The
lowest-numbered claim of a config wins: exactly one winner per election, and no read-then-write
window in which two workers could both decide to measure.

A loser waits for the winner's trial to finish and reuses its result. If that trial fails, or
its worker is dead (``costtune.search.shared.fail_dead``: at once for a worker of this host,
after the heartbeat's grace period for one elsewhere), or it stays RUNNING past ``timeout`` (a
storage without heartbeats), a new election (``attempt + 1``) picks the next worker to measure
it. The storage itself is opened by ``costtune.search.shared.open_storage``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from costtune.search.results import is_result
from costtune.search.shared import fail_dead, open_storage, owner

__all__ = ["ABANDON", "Claims", "Election", "open_storage", "CLAIMS_SUFFIX"]

CLAIMS_SUFFIX = ":claims"
ABANDON = object()  # the trial itself is another worker's (Optuna's queue popped it twice)
_DEAD_CHECK_S = 1.0  # how often a waiter looks whether the winner's worker died


@dataclass(frozen=True)
class Election:
    """Outcome of one claim: ``won``, and the winning claim's main-study trial id and worker."""

    won: bool
    trial_id: int
    worker: str


class Claims:
    """Claims of one study on ``storage`` (RDB, journal or any storage shared by workers).

    >>> storage = optuna.storages.InMemoryStorage()
    >>> claims = Claims(storage, "demo")
    >>> claims.elect("BLOCK=64", trial_id=7).won, claims.elect("BLOCK=64", trial_id=9).won
    (True, False)
    """

    def __init__(self, storage: BaseStorage, study_name: str, *,
                 worker: str | None = None) -> None:
        self.storage = storage
        self.name = study_name + CLAIMS_SUFFIX
        self.worker = worker or owner()
        try:
            self.study_id = storage.create_new_study([StudyDirection.MINIMIZE], self.name)
        except DuplicatedStudyError:
            self.study_id = storage.get_study_id_from_name(self.name)

    def elect(self, key: str, *, trial_id: int, attempt: int = 0) -> Election:
        """Claim ``key`` for main-study trial ``trial_id``; the earliest claim of
        (key, attempt) wins."""
        claim = optuna.trial.create_trial(
            state=TrialState.COMPLETE, value=0.0,
            user_attrs={"config": key, "attempt": attempt, "trial_id": trial_id,
                        "worker": self.worker})
        mine = self.storage.create_new_trial(self.study_id, template_trial=claim)
        # Read past Optuna's trial cache: it skips a trial committed after a higher-numbered
        # one (server databases may commit concurrent inserts out of order).
        reader = getattr(self.storage, "_backend", self.storage)
        rivals = [t for t in reader.get_all_trials(self.study_id, deepcopy=False)
                  if t.user_attrs.get("config") == key and t.user_attrs.get("attempt") == attempt]
        first = min(rivals, key=lambda t: t.number)
        return Election(won=first._trial_id == mine, trial_id=int(first.user_attrs["trial_id"]),
                        worker=str(first.user_attrs["worker"]))

    def settle(self, key: str, *, trial_id: int, timeout: float, study: optuna.Study) -> Any:
        """Elect until decided: None when this trial is to measure ``key``; the finished trial
        to reuse when another measured it; ``ABANDON`` when the winning claim is this very
        trial's, made by another worker."""
        attempt = 0
        while True:
            vote = self.elect(key, trial_id=trial_id, attempt=attempt)
            if vote.won:
                return None
            if vote.trial_id == trial_id:
                return ABANDON
            done = self.wait(vote.trial_id, timeout=timeout, study=study)
            if done is not None and is_result(done):
                return done
            attempt += 1

    def wait(self, trial_id: int, *, timeout: float, study: optuna.Study | None = None
             ) -> FrozenTrial | None:
        """The main-study trial ``trial_id`` once finished (failed when its worker died, given
        ``study``); None if still running after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        pause, checked = 0.02, 0.0
        while True:
            trial = self.storage.get_trial(trial_id)
            if trial.state.is_finished():
                return trial
            now = time.monotonic()
            if now >= deadline:
                return None
            if study is not None and now - checked >= _DEAD_CHECK_S:
                checked = now
                if fail_dead(study, trial_id):
                    continue
            time.sleep(pause)
            pause = min(2 * pause, 0.5)
