"""What lets several processes share one Optuna storage safely: opening it, the SQLite ask lock,
heartbeats, and failing the trials of dead workers.

- ``open_storage``: a path or URL becomes an ``RDBStorage`` with a heartbeat; its tables are
  created under a file lock beside a SQLite file (three workers on a fresh file otherwise race
  on ``CREATE TABLE``), with retries for a server database.
- ``ask_lock``: Optuna pops an enqueued (WAITING) trial with a read, then a write; SQLite has no
  ``SELECT ... FOR UPDATE``, so two workers could pop the same trial, and the later write could
  set a finished trial back to RUNNING. Asking under a lock file beside the database makes the
  pop atomic between workers (server databases lock the row themselves).
- ``beating``: while a trial runs, a thread records its heartbeat; ``fail_stale_trials`` then
  fails a trial whose worker died on another machine within ``grace_s``.
- ``owner`` / ``fail_dead``: each trial names its worker (host, boot, PID namespace, PID and
  start time); a worker on the same host sees at once that a RUNNING trial's process is gone
  (``kill -9``) and fails it, instead of waiting for the heartbeat to go stale.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import psutil
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

HEARTBEAT_S = 2  # Optuna's RDB heartbeat takes whole seconds
GRACE_S = 10
OWNER_ATTR = "worker"
_LOCK_TIMEOUT_S = 300.0


def open_storage(storage: str | os.PathLike | BaseStorage | None, *,
                 heartbeat_s: int | None = HEARTBEAT_S, grace_s: int | None = GRACE_S
                 ) -> BaseStorage:
    """None: in memory; an Optuna storage object: as it is; a URL (``sqlite:///x.db``,
    ``postgresql://...``) or any other text or path (a SQLite file): an ``RDBStorage`` with a
    heartbeat every ``heartbeat_s`` seconds (None: none), stale after ``grace_s``. ValueError
    naming the storage when its folder does not exist or it cannot be opened."""
    if storage is None or isinstance(storage, BaseStorage):
        return optuna.storages.get_storage(storage)
    text = check_storage(storage)
    db = sqlite_file(text)
    beat = {} if not heartbeat_s else {"heartbeat_interval": int(heartbeat_s),
                                       "grace_period": int(grace_s or 5 * heartbeat_s)}
    # SQLite's default 5 s busy timeout is short for several workers and their heartbeats.
    engine = {"connect_args": {"timeout": 120}} if db is not None else {}
    attempts = 1 if db is not None else 5
    with file_lock(db):
        for attempt in range(attempts):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    rdb = optuna.storages.RDBStorage(text, engine_kwargs=engine, **beat)
                return optuna.storages.get_storage(rdb)
            except Exception as exc:  # a server database: another worker creating the tables
                from sqlalchemy.exc import DBAPIError

                if attempt + 1 == attempts or not isinstance(exc, DBAPIError):
                    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    raise ValueError(f"storage {storage}: cannot open it "
                                     f"({type(exc).__name__}: {first})") from exc
                time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


def check_storage(storage: str | os.PathLike) -> str:
    """The storage URL of a path or URL, checked without opening it: a known database kind, a
    SQLite file's folder exists. ValueError naming the storage otherwise."""
    text = os.fspath(storage)
    if "://" not in text:
        text = "sqlite:///" + os.path.abspath(text)
    from sqlalchemy.engine import make_url

    try:
        make_url(text).get_dialect()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"storage {storage}: cannot open it ({first})") from None
    db = sqlite_file(text)
    if db is not None and not db.parent.is_dir():
        raise ValueError(f"storage {storage}: folder {db.parent} does not exist")
    return text


def sqlite_file(storage: str | BaseStorage) -> Path | None:
    """The SQLite file behind a URL or storage (None: in memory, or another database)."""
    if not isinstance(storage, str):
        backend = getattr(storage, "_backend", storage)
        storage = getattr(backend, "url", None)
        if not isinstance(storage, str):
            return None
    from sqlalchemy.engine import make_url

    try:
        url = make_url(storage)
    except Exception:
        return None
    if not url.drivername.startswith("sqlite") or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database).absolute()


@contextlib.contextmanager
def file_lock(db: Path | None) -> Iterator[None]:
    """A lock file beside SQLite file ``db`` (nothing for other storages)."""
    if db is None:
        yield
        return
    from filelock import FileLock

    with FileLock(str(db) + ".costtune.lock", timeout=_LOCK_TIMEOUT_S):
        yield


def ask_lock(storage: BaseStorage):
    """The lock to hold around ``study.ask()`` on ``storage`` (see the module docstring)."""
    return file_lock(sqlite_file(storage))


def ask(study: optuna.Study) -> optuna.Trial:
    """``study.ask()`` under ``ask_lock``. Heartbeats here are recorded by ``beating`` around
    each trial, not by ``Study.optimize`` (whose absence Optuna warns about)."""
    with ask_lock(study._storage), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage")
        return study.ask()


def heartbeat_enabled(storage: BaseStorage) -> bool:
    """Whether ``storage`` records heartbeats (an RDB storage opened with an interval; Optuna's
    cached wrapper answers for its backend)."""
    interval = getattr(storage, "get_heartbeat_interval", None)
    return callable(interval) and interval() is not None


@contextlib.contextmanager
def beating(storage: BaseStorage, trial_id: int) -> Iterator[None]:
    """Record ``trial_id``'s heartbeat every interval while inside (when the storage has one)."""
    if not heartbeat_enabled(storage):
        yield
        return
    stop = threading.Event()
    interval = float(storage.get_heartbeat_interval())

    def run() -> None:
        while True:
            with contextlib.suppress(Exception):  # a missed beat only ages the trial sooner
                storage.record_heartbeat(trial_id)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=run, name=f"costtune-heartbeat-{trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def owner() -> str:
    """This process, as a trial's worker: ``host|boot|pidns:pid:start``."""
    proc = psutil.Process()
    return f"{_host()}:{proc.pid}:{proc.create_time():.2f}"


def owner_alive(name: str | None) -> bool | None:
    """Whether the worker ``name`` still runs: True/False on this host, None elsewhere (or
    unknown)."""
    if not name or name.count(":") < 2:
        return None
    host, pid, start = name.rsplit(":", 2)
    if host != _host():
        return None
    try:
        proc = psutil.Process(int(pid))
        return (f"{proc.create_time():.2f}" == start
                and proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, ValueError):
        return False
    except psutil.AccessDenied:
        return True


def fail_dead(study: optuna.Study, trial_id: int | None = None) -> list[int]:
    """Fail RUNNING trials (of ``study``, or only ``trial_id``) whose worker is dead: on this
    host at once, elsewhere once its heartbeat is stale. Returns the trial numbers failed."""
    storage = study._storage
    if heartbeat_enabled(storage):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
    if trial_id is not None:
        running = [storage.get_trial(trial_id)]
    else:
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    failed = []
    for t in running:
        if t.state == TrialState.RUNNING and owner_alive(t.user_attrs.get(OWNER_ATTR)) is False:
            with contextlib.suppress(Exception):  # finished meanwhile: nothing to fail
                if storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                    failed.append(t.number)
    return failed


def rescue(study: optuna.Study, trial: optuna.Trial, attrs: dict[str, Any], *,
           state: TrialState, value: float | None) -> FrozenTrial:
    """Store a measurement whose trial another worker finished meanwhile (it took this worker
    for dead) as a new trial, so that no worker measures the config again."""
    frozen = optuna.trial.create_trial(
        params=trial.params, distributions=trial.distributions, state=state,
        value=value if state == TrialState.COMPLETE else None,
        user_attrs={**attrs, "rescued_from": trial.number})
    trial_id = study._storage.create_new_trial(study._study_id, template_trial=frozen)
    return study._storage.get_trial(trial_id)


def _host() -> str:
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8])
    with contextlib.suppress(OSError):  # processes in another PID namespace look dead from here
        parts.append(os.readlink("/proc/self/ns/pid").strip("pid:[]"))
    return "|".join(parts)
