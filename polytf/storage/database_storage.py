"""Tuning records and Optuna studies in a PostgreSQL database, shared by tuners on several machines.

``polytf tune MODEL --storage postgresql://USER@HOST/DATABASE`` (or ``POLYTF_STORAGE``)
keeps in that database what a cache directory keeps in files
(:mod:`polytf.storage.cache`), so that ``polytf tune`` processes on several machines
share each kernel's study and ``polytf.load(..., storage=URL)`` on any machine finds the
records tuned for its own CPU and versions (they are in the record's key)::

    polytf_tuning_records(key_digest text primary key, record text, written_at timestamptz)
    Optuna's tables (studies, trials, ...)  one study per kernel, named by its cache-key digest

What keeps it safe with several processes on several machines:

- the tables are created under the advisory lock ``"schema"``: Optuna's ``create_all`` and
  alembic stamping, like ``CREATE TABLE IF NOT EXISTS``, are not atomic in PostgreSQL (two
  processes creating one table at once fail on a duplicate ``pg_type`` key);
- a kernel's trials are claimed under its study's advisory lock (:meth:`DatabaseStorage.study_lock`,
  :mod:`polytf.storage.advisory_lock`) where the cache directory uses a file lock, so the study
  never gets more trials than asked, whichever machines claim them;
- a record is one row, written by an upsert (``INSERT ... ON CONFLICT DO UPDATE``: the last
  writer wins, as with record files) and validated when read exactly as a record file is
  (:func:`~polytf.storage.tuning_record.parse_record_text`, then its stored key against the key
  looked up): an unusable row gives one :class:`~polytf.errors.CacheWarning` naming the
  database and the key, and the kernel falls back to its default recipe.

Timing stays serialised per machine by the cache directory's ``measurement`` file lock; a
trial abandoned by a killed tuner is failed only by a tuner on the same host (its owner's
``host:pid`` can only be checked there). Messages name the database by its URL with the
password hidden (``URL.render_as_string(hide_password=True)``).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from polytf.errors import CacheError, DependencyMissingError
from polytf.storage.advisory_lock import AdvisoryLock, one_line
from polytf.storage.cache import warn_ignored_record
from polytf.storage.cache_key import CacheKey, check_stored_key
from polytf.storage.tuning_record import TuningRecord, parse_record_text, record_to_json

if TYPE_CHECKING:  # pragma: no cover
    import optuna
    import sqlalchemy

#: The table of tuning records.
RECORDS_TABLE = "polytf_tuning_records"
#: Seconds a connection attempt waits for the server.
CONNECT_TIMEOUT_S = 10
#: URL schemes accepted, and the SQLAlchemy driver each one is opened with: plain ``postgresql``
#: means psycopg 3 (the ``postgresql`` extra), whichever default the installed SQLAlchemy has.
DRIVERS = {"postgresql": "psycopg", "postgresql+psycopg": "psycopg", "postgresql+psycopg2": "psycopg2"}
#: pip package of each driver.
DRIVER_PACKAGES = {"psycopg": "'polytf[postgresql]' (psycopg 3)", "psycopg2": "psycopg2-binary"}
EXAMPLE_URL = "postgresql://USER@HOST/DATABASE"
#: What to do when the tables cannot be created.
CREATE_HINT = "the URL's user must be allowed to create tables in the database (make it the owner: createdb --owner USER DATABASE)"
#: What to do when the database fails during a run.
RETRY_HINT = "check the server and run again (finished kernels keep their records)"


def hide_password(text: str) -> str:
    """``text`` with the password of its ``user:password@`` part replaced by ``***``
    (also when SQLAlchemy cannot parse it)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(text).render_as_string(hide_password=True)
    except Exception:  # an unparseable URL: hide what looks like a password
        return re.sub(r"(://[^/@:]*):[^@/]*@", r"\1:***@", text)


def parse_database_url(text: str) -> sqlalchemy.URL:
    """The SQLAlchemy URL of a tuning storage, with its driver named
    (``postgresql://`` becomes ``postgresql+psycopg://``).

    Raises:
        CacheError: not a URL, not PostgreSQL, or without a database name (the message shows
            the URL with its password hidden and the form expected).
    """
    import sqlalchemy.exc
    from sqlalchemy.engine import make_url

    shown = hide_password(text)
    try:
        url = make_url(text)
    except sqlalchemy.exc.ArgumentError as error:
        raise CacheError(f"invalid storage URL {shown}: {error}; expected {EXAMPLE_URL}") from None
    except ValueError:  # SQLAlchemy's int() of the port
        raise CacheError(f"invalid storage URL {shown}: its port is not a number; expected {EXAMPLE_URL} or USER@HOST:PORT") from None
    if url.drivername not in DRIVERS:
        raise CacheError(
            f"unsupported storage URL {shown}: polytf keeps tuning in PostgreSQL ({EXAMPLE_URL}, or postgresql+psycopg2://...), "
            "or in the cache directory when --storage and POLYTF_STORAGE are not set"
        )
    if not url.database:
        raise CacheError(f"the storage URL {shown} names no database; expected {EXAMPLE_URL}")
    return url.set(drivername=f"postgresql+{DRIVERS[url.drivername]}")


def create_database_engine(url: sqlalchemy.URL, location: str) -> sqlalchemy.Engine:
    """An engine on ``url`` whose server has answered once.

    Raises:
        DependencyMissingError: the URL's driver is not installed (says what to install).
        CacheError: the server cannot be reached or refuses the connection.
    """
    import sqlalchemy
    import sqlalchemy.exc

    driver = url.get_driver_name()
    try:
        engine = sqlalchemy.create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    except ImportError:
        raise DependencyMissingError(
            f"the storage URL {location} needs the PostgreSQL driver {driver}: pip install {DRIVER_PACKAGES.get(driver, driver)}"
        ) from None
    try:
        with engine.connect():
            pass
    except sqlalchemy.exc.SQLAlchemyError as error:
        engine.dispose()
        raise CacheError(
            f"cannot connect to the tuning storage {location}: {one_line(error)}; check the URL and that the server runs and "
            "accepts this user (without --storage and POLYTF_STORAGE, tuning stays in the cache directory)"
        ) from None
    return engine


class DatabaseStorage:
    """Tuning records, Optuna studies and study locks in the PostgreSQL database at ``url``
    (a :class:`~polytf.storage.tuning_storage.TuningStorage`).

    Raises:
        CacheError: an invalid or unsupported URL, an unreachable server, or tables that
            cannot be created.
        DependencyMissingError: the driver is not installed.
    """

    def __init__(self, url: str) -> None:
        self.url = parse_database_url(url)
        #: the database as messages name it: the URL as given, password hidden
        self.location = hide_password(url)
        self.engine = create_database_engine(self.url, self.location)
        self._study_storage: optuna.storages.RDBStorage | None = None
        self._locks: dict[str, AdvisoryLock] = {}
        self._locks_guard = threading.Lock()
        with self.translating_errors("create the table of tuning records in", CREATE_HINT), self.lock("schema"), self.engine.begin() as connection:
            connection.exec_driver_sql(
                f"CREATE TABLE IF NOT EXISTS {RECORDS_TABLE} "
                "(key_digest text PRIMARY KEY, record text NOT NULL, written_at timestamptz NOT NULL DEFAULT now())"
            )

    def lock(self, name: str) -> AdvisoryLock:
        """The advisory lock ``name`` of this database, shared with every process using it;
        one object per name, so that taking it again inside itself (in one thread) nests, as
        with the cache's file locks, instead of waiting for itself."""
        with self._locks_guard:
            if name not in self._locks:
                self._locks[name] = AdvisoryLock(self.engine, name, self.location)
            return self._locks[name]

    def study_lock(self, study_name: str) -> AdvisoryLock:
        """The lock under which a study is created and its trials are claimed."""
        return self.lock(f"study-{study_name}")

    def record_location(self, key: CacheKey) -> str:
        """How messages name the record of ``key``: its key digest and the database."""
        return f"{key.digest()} in {self.location} (table {RECORDS_TABLE})"

    def load(self, key: CacheKey) -> TuningRecord | None:
        """The valid record of ``key``, or None; an unusable row (not JSON, a schema violation,
        a stored key other than ``key``) gives None and one CacheWarning naming the database
        and the key.

        Raises:
            CacheError: the database cannot be read.
        """
        import sqlalchemy

        expected = key.as_dict()
        with self.translating_errors("read a tuning record from"), self.engine.connect() as connection:
            text = connection.execute(
                sqlalchemy.text(f"SELECT record FROM {RECORDS_TABLE} WHERE key_digest = :digest"), {"digest": expected["digest"]}
            ).scalar()
        if text is None:
            return None
        try:
            record = parse_record_text(text)
            check_stored_key(record.key, expected)
        except CacheError as error:
            warn_ignored_record(self.record_location(key), str(error))
            return None
        return record

    def save(self, record: TuningRecord, key: CacheKey) -> str:
        """Write ``record`` as the record of ``key`` (its ``key`` field set to ``key.as_dict()``),
        replacing any earlier one in one statement; returns :meth:`record_location`.

        Raises:
            CacheError: the record is invalid, or the database cannot be written.
        """
        import sqlalchemy

        text = record_to_json(replace(record, key=key.as_dict()))
        with self.translating_errors("write a tuning record to"), self.engine.begin() as connection:
            connection.execute(
                sqlalchemy.text(
                    f"INSERT INTO {RECORDS_TABLE} (key_digest, record, written_at) VALUES (:digest, :record, now()) "
                    "ON CONFLICT (key_digest) DO UPDATE SET record = excluded.record, written_at = excluded.written_at"
                ),
                {"digest": key.digest(), "record": text},
            )
        return self.record_location(key)

    def study_storage(self) -> optuna.storages.RDBStorage:
        """The Optuna storage of every study (created once per process, its tables under the
        ``schema`` lock).

        Raises:
            CacheError: the tables cannot be created, or belong to another Optuna version.
        """
        if self._study_storage is None:
            import optuna

            with self.translating_errors("open the Optuna studies in", CREATE_HINT), self.lock("schema"):
                try:
                    self._study_storage = optuna.storages.RDBStorage(
                        self.url.render_as_string(hide_password=False),
                        engine_kwargs={"pool_pre_ping": True, "connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}},
                    )
                except RuntimeError as error:  # a schema of another Optuna version
                    raise CacheError(f"cannot open the Optuna studies in {self.location}: {error}") from None
        return self._study_storage

    @contextlib.contextmanager
    def translating_errors(self, action: str = "use", hint: str = RETRY_HINT) -> Iterator[None]:
        """A block in which a failure of the database (a lost connection, a failed statement,
        here or inside Optuna) raises one CacheError naming the database, not a traceback
        from deep inside SQLAlchemy. ``action`` completes "cannot ACTION the tuning storage";
        ``hint`` says what to do.
        """
        import optuna.exceptions
        import sqlalchemy.exc

        try:
            yield
        except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as error:
            raise CacheError(f"cannot {action} the tuning storage {self.location}: {one_line(error)}; {hint}") from None

    def close(self) -> None:
        """Close every connection of this process to the database."""
        if self._study_storage is not None:
            self._study_storage.remove_session()
            self._study_storage.engine.dispose()
            self._study_storage = None
        self.engine.dispose()


__all__ = ["DRIVERS", "RECORDS_TABLE", "DatabaseStorage", "create_database_engine", "hide_password", "parse_database_url"]
