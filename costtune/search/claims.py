"""Shared storage: ``open_storage``, and claims: which trial measures a config when several
workers share one Optuna storage.

Before measuring, a trial claims its config by creating a trial in a companion study named
``<study>:claims`` that holds the config key and the claiming trial's id. Optuna's storages
create a trial and its attributes in one transaction and number a study's trials in creation
order (RDB storages lock the study row while numbering; SQLite serialises all writers), so a
worker that reads the claims after its own claim was created sees every earlier claim. The
lowest-numbered claim of a config wins: exactly one winner per election, and no read-then-write
window in which two workers could both decide to measure.

A loser waits for the winner's trial to finish and reuses its result. If that trial fails, or
stays RUNNING past ``timeout`` (a killed worker; with an RDB heartbeat Optuna marks such trials
failed sooner), a new election (``attempt + 1``) picks the next worker to measure it.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

CLAIMS_SUFFIX = ":claims"


def open_storage(storage: str | os.PathLike | BaseStorage | None) -> BaseStorage:
    """None: in memory; an Optuna storage object or URL (``sqlite:///x.db``,
    ``postgresql://...``); any other text or path: a SQLite file."""
    if storage is None or isinstance(storage, BaseStorage):
        return optuna.storages.get_storage(storage)
    text = os.fspath(storage)
    if "://" not in text:
        text = "sqlite:///" + os.path.abspath(text)
    return optuna.storages.get_storage(text)


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
        self.worker = worker or uuid.uuid4().hex[:12]
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
        rivals = [t for t in self.storage.get_all_trials(self.study_id, deepcopy=False)
                  if t.user_attrs.get("config") == key and t.user_attrs.get("attempt") == attempt]
        first = min(rivals, key=lambda t: t.number)
        return Election(won=first._trial_id == mine, trial_id=int(first.user_attrs["trial_id"]),
                        worker=str(first.user_attrs["worker"]))

    def wait(self, trial_id: int, *, timeout: float, study: optuna.Study | None = None
             ) -> FrozenTrial | None:
        """The main-study trial ``trial_id`` once finished; None if still running after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        pause = 0.02
        while True:
            trial = self.storage.get_trial(trial_id)
            if trial.state.is_finished():
                return trial
            if time.monotonic() >= deadline:
                return None
            if study is not None and _heartbeat(self.storage):
                optuna.storages.fail_stale_trials(study)
            time.sleep(pause)
            pause = min(2 * pause, 1.0)


def _heartbeat(storage: BaseStorage) -> bool:
    check = getattr(storage, "is_heartbeat_enabled", None)
    return bool(check and check())
