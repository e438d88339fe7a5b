"""Where studies persist: an Optuna journal file by default, any Optuna RDB URL for scale-out.

The default is a journal file (`studies/<study>/journal.log`) rather than SQLite: it is
append-only, so a run killed mid-write loses at most its last record, and several processes
may append to it under Optuna's file lock, where SQLite would need its own locking care.
PostgreSQL (or any SQLAlchemy URL) serves workers on several hosts.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

import optuna
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import TrialState

from cutsearch.errors import UserError
from cutsearch.outcome import FailureKind
from cutsearch.workspace import writable_dir

log = logging.getLogger(__name__)

OWNER = "cutsearch:owner"
# A database URL that lost its '://' would otherwise name a journal file (postgres//host/db).
_URL_TYPO = re.compile(r"(?:postgres(?:ql)?|mysql|mariadb|sqlite|oracle|mssql)(?:\+\w+)?(?::/|//)")
HEARTBEAT = "cutsearch:heartbeat"
HEARTBEAT_S = 20.0
GRACE_S = 120.0


def open_storage(url: str | Path) -> optuna.storages.BaseStorage:
    """An Optuna storage for `url`: an RDB URL, or a path to a journal file."""
    text = str(url)
    if "://" in text:
        text = _with_driver(text)
        try:
            return RDBStorage(text, engine_kwargs={"pool_pre_ping": True})
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy and drivers raise many types
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(f"cannot open storage {_redact(str(url))}: {reason}") from None
    if _URL_TYPO.match(text):
        raise UserError(f"--storage {_redact(text)!r} looks like a database URL without '://': "
                        "write it as scheme://..., or give a journal file's path")
    path = Path(text)
    writable_dir(path.parent, "the journal's directory")
    if _is_gzip(path):  # a recorded journal as committed: Optuna would read it as a corrupt one
        raise UserError(f"{path} is gzip-compressed: `gunzip -k {path}`, then pass the uncompressed file")
    _check_journal(path)
    try:
        _cut_torn_tail(path)
        storage = JournalStorage(JournalFileBackend(str(path)))
        storage.get_all_studies()  # reads every record now: a corrupt one is reported here, not deep in a run
        return storage
    except Exception as exc:  # noqa: BLE001 - a corrupt journal raises from deep inside Optuna
        raise UserError(f"study file {path} is corrupted or unreadable ({type(exc).__name__}: {exc}); "
                        "move it away to start afresh") from None


def load_study(name: str, url: str | Path, store: optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """The named study in the storage at `url`, or a UserError that says what is there instead.

    `store` is that storage already open, for a caller that asks again and again.
    """
    text = str(url)
    if store is None:
        if "://" not in text and Path(text).is_dir():
            raise UserError(f"no study named {name!r}: {text} is a directory, not a journal file or storage URL")
        if "://" not in text and not Path(text).is_file():
            raise UserError(f"no study named {name!r}: {text} does not exist (run `cutsearch search` first)")
        if text.startswith("sqlite:///") and not Path(text[len("sqlite:///"):]).is_file():
            # SQLAlchemy would create an empty database for a reader that only looks.
            raise UserError(f"no study named {name!r}: {text} does not exist (run `cutsearch search` first)")
        store = open_storage(text)
    try:
        return optuna.load_study(study_name=name, storage=store)
    except KeyError:
        names = ", ".join(s.study_name for s in optuna.get_all_study_summaries(store, include_best_trial=False))
        where = text if "://" not in text else f"the {text.split('://', 1)[0]} storage"  # no password
        raise UserError(f"no study named {name!r} in {where}"
                        + (f" (it holds: {names})" if names else " (it holds none)")) from None


def _is_gzip(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def _check_journal(path: Path) -> None:
    """Refuse a file that is not an Optuna journal before Optuna appends to it."""
    if path.exists() and not path.is_file():
        raise UserError(f"{path} is not a regular file: give a journal file or a storage URL")
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        first = f.readline(1 << 16)
    try:
        record = json.loads(first)
    except ValueError:
        record = None
    if not isinstance(record, dict) or "op_code" not in record:
        raise UserError(f"study file {path} is corrupted or no Optuna journal (its first line is no journal "
                        "record): move it away, or give another --storage")


def _cut_torn_tail(path: Path) -> None:
    """Drop a last record that an append cut short (a full disk, a crash of the machine).

    Optuna skips a last line without its newline when reading, but its next append would be
    glued onto that line and leave the whole journal unreadable. The torn record was never
    readable, so it is cut off, under Optuna's own journal lock so that no live append is cut.
    A tail that does not even start like a record is not ours to cut: the file is reported.
    """
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        with open(path, "r+b") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(end - 1)
            if f.read(1) == b"\n":
                return  # a live append, finished while this waited for the lock

            start = end
            while start > 0:  # back to the last newline, a block at a time
                step = min(start, 1 << 16)
                f.seek(start - step)
                block = f.read(step)
                newline = block.rfind(b"\n")
                if newline >= 0:
                    start = start - step + newline + 1
                    break
                start -= step
            f.seek(start)
            if not f.read(2).startswith(b"{"):
                raise ValueError(f"its last {end - start} bytes are not a journal record")
            f.truncate(start)
            log.warning("%s: cut off a torn last record (%d bytes)", path, end - start)
    finally:
        lock.release()


def _with_driver(url: str) -> str:
    """postgresql:// means psycopg 3 to SQLAlchemy 2.1; cutsearch's `postgres` extra installs psycopg2."""
    import importlib.util

    if url.startswith("postgresql://") and importlib.util.find_spec("psycopg") is None \
            and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


@contextlib.contextmanager
def budget_lock(study: optuna.Study) -> Iterator[None]:
    """Hold off other processes on this study while this one counts its trials and asks one.

    Workers that share a study count the trials told and in flight under this lock before each
    ask, so together they stop exactly at the trial target. PostgreSQL gets a transaction-scoped
    advisory lock; a journal file or SQLite database gets flock(2) on the file. Either is
    released when its process dies. Other databases are not locked: there, workers asking at
    the same moment may overshoot the target by one trial each.
    """
    storage = study._storage
    path = None
    if isinstance(storage, JournalStorage):
        path = getattr(storage._backend, "_file_path", None)
    elif isinstance(rdb := getattr(storage, "_backend", storage), RDBStorage):  # create_study wraps it in a cache
        engine = rdb.engine
        if engine.dialect.name == "postgresql":
            from sqlalchemy import text

            key = int.from_bytes(hashlib.sha256(f"cutsearch:{study.study_name}".encode()).digest()[:8], "big",
                                 signed=True)
            with engine.begin() as conn:
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
                yield
            return
        if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
            path = engine.url.database
    if path is None:
        yield
        return
    with open(path, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def append_run(store: optuna.storages.BaseStorage, study_name: str, run: dict) -> list[dict]:
    """Append one run to the study's history (its `runs` attribute), so a resume does not hide
    the first run's cost; returns the whole history."""
    study = optuna.load_study(study_name=study_name, storage=store)
    with budget_lock(study):  # workers that finish together must not drop each other's run
        runs = list(optuna.load_study(study_name=study_name, storage=store).user_attrs.get("runs", []))
        runs.append(run)
        study.set_user_attr("runs", runs)
    return runs


def artifact_store(root: Path) -> optuna.artifacts.FileSystemArtifactStore:
    """Where a study's build logs are kept (created if missing)."""
    from optuna.artifacts import FileSystemArtifactStore

    root.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(str(root))


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive_here(owner: str) -> bool | None:
    """Whether the owning process lives; None when it ran on another host."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


def reap_stale(study: optuna.Study, *, grace_s: float = GRACE_S) -> list[int]:
    """Fail RUNNING trials whose process died (killed run), so none stays RUNNING for ever.

    It runs under the budget lock, under which the search asks a trial and claims it as one
    step: a RUNNING trial with no owner was asked by a process that died before claiming it.
    """
    reaped = []
    with budget_lock(study):
        now = time.time()
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            owner = trial.system_attrs.get(OWNER)
            beat = trial.system_attrs.get(HEARTBEAT, trial.datetime_start.timestamp() if trial.datetime_start else now)
            alive = _alive_here(owner) if owner else False
            stale = alive is False or (alive is None and now - beat > grace_s)
            if owner == owner_id():
                stale = False
            if stale:
                try:
                    study._storage.set_trial_user_attr(trial._trial_id, "failure", {
                        "kind": FailureKind.INTERRUPTED.value,
                        "message": f"its process ({owner or 'unknown'}) stopped before it finished", "log": ""})
                    study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
                    reaped.append(trial.number)
                except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):
                    pass  # another worker reaped it first
    return reaped


class Heartbeat:
    """Marks this process's running trials as alive, for workers on other hosts to see."""

    def __init__(self, study: optuna.Study, interval_s: float = HEARTBEAT_S) -> None:
        self.study = study
        self.interval_s = interval_s
        self.trial_ids: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="cutsearch-heartbeat", daemon=True)

    def claim(self, trial: optuna.Trial) -> None:
        storage = self.study._storage
        storage.set_trial_system_attr(trial._trial_id, OWNER, owner_id())
        storage.set_trial_system_attr(trial._trial_id, HEARTBEAT, time.time())
        with self._lock:
            self.trial_ids.add(trial._trial_id)

    def release(self, trial: optuna.Trial) -> None:
        with self._lock:
            self.trial_ids.discard(trial._trial_id)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                ids = list(self.trial_ids)
            for trial_id in ids:
                try:
                    self.study._storage.set_trial_system_attr(trial_id, HEARTBEAT, time.time())
                except Exception:  # noqa: BLE001 - a finished trial or a transient storage error
                    pass

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if exc_type is not None:
            # Ctrl-C, or an error, in a process that lives on (a notebook): its trials would stay
            # RUNNING, since reaping spares the reaper's own. Fail them as a killed run's would be.
            for trial_id in list(self.trial_ids):
                try:
                    self.study._storage.set_trial_user_attr(trial_id, "failure", {
                        "kind": FailureKind.INTERRUPTED.value, "message": "its run stopped before it finished",
                        "log": ""})
                    self.study._storage.set_trial_state_values(trial_id, TrialState.FAIL)
                except Exception:  # noqa: BLE001 - the storage itself may be what failed
                    pass
