"""Where tuning records and Optuna studies live: the cache directory, or a database.

A :class:`TuningStorage` keeps three things that tuners sharing it must agree on: the
tuning records (one per cache key), the Optuna study of each kernel (named by its
cache-key digest), and the lock under which a study's trials are claimed. It is chosen
from a URL (:func:`open_tuning_storage`):

- none (the default; also an empty ``--storage ''``): the cache directory, a
  :class:`~polytf.storage.cache.KernelCache` (record files, ``studies.db`` in SQLite, file
  locks): processes on one machine, or on machines sharing the directory's file system;
- ``postgresql://USER@HOST/DATABASE`` (also ``postgresql+psycopg2://``), from ``--storage``,
  ``storage=`` or ``$POLYTF_STORAGE``: a
  :class:`~polytf.storage.database_storage.DatabaseStorage` (a records table, Optuna's
  tables, advisory locks): tuners on several machines at once.

Whatever the storage, timing is serialised per machine by the cache directory's
``measurement`` lock, and records are validated against their key before use.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from polytf.config import STORAGE_ENVIRONMENT_VARIABLE
from polytf.storage.cache import KernelCache
from polytf.storage.cache_key import CacheKey
from polytf.storage.tuning_record import TuningRecord

if TYPE_CHECKING:  # pragma: no cover
    import optuna


class TuningStorage(Protocol):
    """What the tuner and the model builder need from a storage.

    Attributes:
        location: the storage as messages name it (a directory, or a URL without its password).
    """

    location: str

    def load(self, key: CacheKey) -> TuningRecord | None:
        """The valid record of ``key``, or None (an unusable one with one CacheWarning)."""

    def save(self, record: TuningRecord, key: CacheKey) -> Path | str:
        """Write the record of ``key`` (replacing any earlier one); returns where it went."""

    def record_location(self, key: CacheKey) -> str:
        """How a warning names the record of ``key``."""

    def study_storage(self) -> optuna.storages.BaseStorage:
        """The Optuna storage of every kernel's study."""

    def study_lock(self, study_name: str) -> AbstractContextManager:
        """The inter-process lock of one study (creation and trial claims)."""

    def translating_errors(self, action: str = "use") -> AbstractContextManager:
        """A block whose storage failures raise one CacheError naming the storage."""

    def close(self) -> None:
        """Release connections (nothing for a directory)."""


def storage_url(url: str | None) -> str | None:
    """The storage URL in force: ``url`` if given (an empty string: the cache directory),
    else ``$POLYTF_STORAGE`` if set and not empty, else None (the cache directory)."""
    if url is None:
        url = os.environ.get(STORAGE_ENVIRONMENT_VARIABLE, "")
    return url.strip() or None


def open_tuning_storage(url: str | None, cache: KernelCache) -> TuningStorage:
    """The storage named by ``url`` (see :func:`storage_url`): ``cache`` itself when none is
    named, else the database at that URL. Close it with :meth:`TuningStorage.close`.

    Raises:
        CacheError: the URL is invalid or not PostgreSQL, or its server cannot be reached
            (the message names the URL, password hidden, and what to do).
        DependencyMissingError: the PostgreSQL driver is not installed.
    """
    chosen = storage_url(url)
    if chosen is None:
        return cache
    from polytf.storage.database_storage import DatabaseStorage

    return DatabaseStorage(chosen)


__all__ = ["TuningStorage", "open_tuning_storage", "storage_url"]
