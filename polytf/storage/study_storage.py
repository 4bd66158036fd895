"""The Optuna study database of a cache directory, shared by concurrent tuners.

``studies.db`` is one SQLite file holding every kernel's study (named by its cache-key
digest), so an interrupted run resumes and two tuners of one cache see each other's
trials. What keeps it safe with several processes:

- the SQLAlchemy URL is built with :meth:`sqlalchemy.engine.URL.create`, never by string
  formatting, so a directory containing ``?``, ``%``, ``#``, ``{}``, spaces or non-ASCII
  characters keeps the database inside it;
- :func:`open_study_storage` runs under the cache's ``studies`` file lock (its caller
  holds it), so two processes never create the tables or stamp the schema version at
  the same time (Optuna's ``create_all`` and alembic stamping are not atomic);
- the database is in write-ahead-log mode (readers never block the writer) and every
  connection waits up to :data:`BUSY_TIMEOUT_S` for a lock instead of failing with
  "database is locked".

See https://www.sqlite.org/wal.html and Optuna's FAQ on SQLite and concurrency.
"""

from __future__ import annotations

import datetime
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from polytf.errors import CacheError

if TYPE_CHECKING:  # pragma: no cover
    import optuna

#: Seconds a connection waits for another process's lock on the database.
BUSY_TIMEOUT_S = 60.0
#: A study with a running trial, or a trial finished this recently (seconds), is in use by a tuner.
STUDY_IN_USE_S = 600.0


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of the SQLite database at ``path`` (made absolute), every special
    character of the path escaped by :meth:`URL.create`."""
    from sqlalchemy.engine import URL

    return URL.create("sqlite", database=str(Path(path).absolute())).render_as_string(hide_password=False)


def enable_write_ahead_log(path: Path) -> None:
    """Put the database at ``path`` (created if absent) in WAL journal mode; the mode is
    stored in the file, so this is needed once per database.

    Raises:
        CacheError: the file is not an SQLite database, or cannot be opened.
    """
    try:
        connection = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S)
        try:
            connection.execute("PRAGMA journal_mode=WAL").fetchone()
        finally:
            connection.close()
    except sqlite3.Error as error:
        raise CacheError(f"cannot open the study database {path}: {error}; delete it or run `polytf cache clear`") from None


def open_study_storage(path: Path) -> optuna.storages.RDBStorage:
    """An Optuna storage on the SQLite database at ``path``; the caller holds the cache's
    ``studies`` lock while it is created.

    Raises:
        CacheError: the database cannot be opened or created, or its schema belongs to
            another Optuna version.
    """
    import optuna
    import sqlalchemy.exc

    enable_write_ahead_log(path)
    try:
        return optuna.storages.RDBStorage(sqlite_url(path), engine_kwargs={"connect_args": {"timeout": BUSY_TIMEOUT_S}})
    except (sqlalchemy.exc.SQLAlchemyError, RuntimeError) as error:
        raise CacheError(f"cannot open the study database {path}: {error}; delete it or run `polytf cache clear`") from None


def delete_idle_studies(path: Path, every: bool = False) -> tuple[int, int]:
    """Delete the studies of the database at ``path`` that no tuner is using; the caller
    holds the cache's ``studies`` lock.

    With ``every`` (no tuner is running: :mod:`polytf.storage.tuner_presence`) every study is
    deleted. Otherwise a study is in use when one of its trials is running, or finished less
    than :data:`STUDY_IN_USE_S` ago (a tuner between two trials). Deleting a study is one
    transaction, so tuners using other studies of the database are not disturbed. A file
    that is not a database is deleted.

    Returns:
        (studies deleted, studies kept because a tuner is using them).

    Raises:
        CacheError: the database cannot be read or written.
    """
    import optuna
    import sqlalchemy.exc

    if not path.exists():
        return 0, 0
    try:
        storage = open_study_storage(path)
    except CacheError:
        if _is_database(path):
            raise
        remove_database_files(path)
        return 0, 0
    deleted = kept = 0
    recent = datetime.datetime.now() - datetime.timedelta(seconds=STUDY_IN_USE_S)
    try:
        for study in storage.get_all_studies():
            study_id = storage.get_study_id_from_name(study.study_name)
            trials = () if every else storage.get_all_trials(study_id, deepcopy=False)
            if any(t.state == optuna.trial.TrialState.RUNNING or (t.datetime_complete and t.datetime_complete > recent) for t in trials):
                kept += 1
                continue
            storage.delete_study(study_id)
            deleted += 1
    except (sqlalchemy.exc.SQLAlchemyError, KeyError) as error:
        raise CacheError(f"cannot delete the studies of {path}: {error}") from None
    finally:
        storage.remove_session()
        storage.engine.dispose()
    return deleted, kept


def remove_database_files(path: Path) -> None:
    """Delete the database at ``path`` and its journal, WAL and shared-memory files."""
    for candidate in (path, *(path.with_name(path.name + suffix) for suffix in ("-journal", "-wal", "-shm"))):
        candidate.unlink(missing_ok=True)


def _is_database(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(16) == b"SQLite format 3\x00" or path.stat().st_size == 0
    except OSError:
        return False
