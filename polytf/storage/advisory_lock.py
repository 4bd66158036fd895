"""A lock shared by processes on several machines: a PostgreSQL advisory lock.

A file lock (:class:`polytf.storage.cache.CacheLock`) only serialises processes that see
one file system. Tuners on several machines that share a database claim their trials
under a lock that lives in the database instead: a session-level advisory lock
(``pg_advisory_lock(bigint)``), held on a connection of its own from :meth:`acquire`
to :meth:`release`. PostgreSQL releases it when that session ends, so a tuner killed
while holding it (or whose machine is cut off) never blocks the others for longer than
the server takes to notice the closed connection.

The lock's 64-bit key is derived from its name (:func:`advisory_key`), so every process
that names a lock ``"study-<digest>"`` takes the same one. A wait longer than the
timeout (the server's ``lock_timeout``, set on the lock's session) raises
:class:`~polytf.errors.CacheError`, as a file lock's does.

Sources: PostgreSQL manual, §9.27.10 "Advisory Lock Functions" and §13.3.5 "Advisory
Locks"; ``lock_timeout`` in §20.11.1.
"""

from __future__ import annotations

import hashlib
import threading
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from polytf.errors import CacheError

if TYPE_CHECKING:  # pragma: no cover
    import sqlalchemy

#: Seconds a process waits for an advisory lock before giving up (as for a cache file lock).
ADVISORY_LOCK_TIMEOUT_S = 300.0
#: SQLSTATE of a statement cancelled by ``lock_timeout`` (``lock_not_available``).
LOCK_NOT_AVAILABLE = "55P03"
#: Prefix of every key's name, so that polytf's keys stay apart from other applications' in one database.
KEY_NAMESPACE = "polytf:"


def advisory_key(name: str) -> int:
    """The advisory-lock key of the lock named ``name``: the first 8 bytes of
    SHA-256(``"polytf:" + name``) as a signed 64-bit integer (PostgreSQL's ``bigint``)."""
    digest = hashlib.sha256((KEY_NAMESPACE + name).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE code of a database error wrapped by SQLAlchemy (psycopg 3's ``sqlstate``,
    psycopg2's ``pgcode``), or None."""
    original = getattr(error, "orig", None)
    return getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)


def one_line(error: BaseException) -> str:
    """The driver's message of a database error on one line (without SQLAlchemy's SQL text and links)."""
    if getattr(error, "orig", None) is None and isinstance(error.__cause__, Exception):
        error = error.__cause__  # e.g. Optuna's StorageInternalError, raised from SQLAlchemy's error
    original = getattr(error, "orig", None) or error
    primary = getattr(getattr(original, "diag", None), "message_primary", None)  # the server's message, without the query's text
    text = primary or str(original)
    return " ".join(line.strip() for line in text.splitlines() if line.strip()) or type(original).__name__


class AdvisoryLock(AbstractContextManager):
    """The session-level advisory lock ``name`` of the database behind ``engine``.

    Reentrant within a thread, like the cache's file locks: nested acquisitions count, and
    the lock is released by the outermost :meth:`release`. Other threads of the process
    wait for it as other processes do.

    Args:
        engine: SQLAlchemy engine of the PostgreSQL database (its pool lends the lock's connection).
        name: the lock's name (e.g. ``"study-<digest>"``, ``"schema"``).
        location: the database as messages name it (the URL with its password hidden).
        timeout_s: longest wait for the lock.
    """

    def __init__(self, engine: sqlalchemy.Engine, name: str, location: str, timeout_s: float = ADVISORY_LOCK_TIMEOUT_S) -> None:
        self.engine, self.name, self.location, self.timeout_s = engine, name, location, timeout_s
        self.key = advisory_key(name)
        self._guard = threading.RLock()
        self._depth = 0
        self._connection = None

    def acquire(self) -> AdvisoryLock:
        """Wait for the lock (at most ``timeout_s``) and hold it.

        Raises:
            CacheError: the wait timed out, or the database cannot be reached (naming the
                lock and the database).
        """
        import sqlalchemy
        import sqlalchemy.exc

        self._guard.acquire()
        if self._depth == 0:
            connection = None
            try:
                connection = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
                milliseconds = str(max(1, round(self.timeout_s * 1000)))
                connection.execute(sqlalchemy.text("SELECT set_config('lock_timeout', :value, false)"), {"value": milliseconds})
                connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": self.key})
            except sqlalchemy.exc.SQLAlchemyError as error:
                if connection is not None:
                    connection.close()
                self._guard.release()
                if sqlstate(error) == LOCK_NOT_AVAILABLE:
                    raise CacheError(
                        f"timed out after {self.timeout_s:.0f} s waiting for the lock {self.name!r} in {self.location}: "
                        "another polytf process holds it"
                    ) from None
                raise CacheError(f"cannot take the lock {self.name!r} in {self.location}: {one_line(error)}") from None
            except BaseException:  # Ctrl-C while waiting: hold nothing
                if connection is not None:
                    connection.invalidate()  # the server ends the session, and with it a lock it may have granted meanwhile
                    connection.close()
                self._guard.release()
                raise
            self._connection = connection
        self._depth += 1
        return self

    def release(self) -> None:
        """Release one acquisition; the outermost gives the lock back. If the connection
        was lost, the server has released the lock already (it ended the session)."""
        import sqlalchemy
        import sqlalchemy.exc

        self._depth -= 1
        try:
            if self._depth == 0:
                connection, self._connection = self._connection, None
                try:
                    connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
                except sqlalchemy.exc.SQLAlchemyError:
                    connection.invalidate()
                finally:
                    connection.close()
        finally:
            self._guard.release()

    @property
    def held(self) -> bool:
        """Whether this process holds the lock (through this object)."""
        return self._depth > 0

    def __enter__(self) -> AdvisoryLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


__all__ = ["ADVISORY_LOCK_TIMEOUT_S", "AdvisoryLock", "advisory_key", "one_line", "sqlstate"]
