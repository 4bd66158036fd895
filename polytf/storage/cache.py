"""KernelCache: tuning records on disk, keyed by everything that changes the code.

Layout of a cache directory::

    records/<key digest>.json   one TuningRecord per kernel × target × versions × knobs
    studies.db                  the Optuna study storage (SQLite, WAL) of every tuning run
    locks/<name>.lock           file locks shared by the processes using the cache

The directory is the user's cache directory (platformdirs) unless ``--cache-dir`` or
``POLYTF_CACHE_DIR`` says otherwise.

A record is used only after it has been validated (:mod:`polytf.storage.tuning_record`)
and its stored key equals the key looked up (:mod:`polytf.storage.cache_key`): a corrupt,
foreign or malformed record is skipped with one :class:`~polytf.errors.CacheWarning` that
names the file and the reason, and the kernel falls back to its default recipe.

Several processes may use one cache at once (two ``polytf tune`` runs, a tune and a
load). Records are written under the ``records`` lock, to a temporary file renamed over
the record, so a reader sees the old record or the new one, never half of one; two
tuners of the same kernel: the last writer wins. The study database is created under the
``studies`` lock (:mod:`polytf.storage.study_storage`).

A KernelCache is the default :class:`~polytf.storage.tuning_storage.TuningStorage`;
``--storage postgresql://...`` keeps records and studies in a database instead
(:mod:`polytf.storage.database_storage`), and the cache directory then holds only the
``measurement`` lock of the machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs
from filelock import FileLock, Timeout

from polytf.config import CACHE_DIR_ENVIRONMENT_VARIABLE
from polytf.errors import CacheError, CacheWarning
from polytf.storage.cache_key import CacheKey, check_stored_key, stored_key_problem
from polytf.storage.study_storage import delete_idle_studies, open_study_storage, sqlite_url
from polytf.storage.tuner_presence import no_tuner_running, tuner_running
from polytf.storage.tuning_record import MAX_RECORD_BYTES, TuningRecord, parse_record_text, record_to_json

if TYPE_CHECKING:  # pragma: no cover
    import optuna

__all__ = ["CacheKey", "ClearReport", "KernelCache", "RecordEntry", "TuningRecord", "default_cache_dir"]

#: Seconds a process waits for a cache lock before giving up (locks are held for milliseconds to seconds).
LOCK_TIMEOUT_S = 300.0
_LOCK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def default_cache_dir() -> Path:
    """``$POLYTF_CACHE_DIR`` if set, else the user's cache directory for polytf."""
    override = os.environ.get(CACHE_DIR_ENVIRONMENT_VARIABLE)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("polytf", appauthor=False))


class CacheLock(FileLock):
    """A :class:`filelock.FileLock` whose timeout raises :class:`CacheError` (naming the lock file)."""

    def acquire(self, *args, **kwargs):
        try:
            return super().acquire(*args, **kwargs)
        except Timeout:
            raise CacheError(
                f"timed out after {self.timeout:.0f} s waiting for the cache lock {self.lock_file}: another polytf process holds it"
            ) from None


@dataclass(frozen=True)
class RecordEntry:
    """One file of ``records/``, as ``polytf cache list`` and ``polytf cache verify`` see it.

    Attributes:
        path: the record file.
        record: the parsed record, or None if it is invalid.
        problem: why the record is invalid (it is then never used), or None.
    """

    path: Path
    record: TuningRecord | None
    problem: str | None


@dataclass(frozen=True)
class ClearReport:
    """What :meth:`KernelCache.clear` removed.

    Attributes:
        records: record files removed.
        studies_removed: Optuna studies deleted from the study database.
        studies_kept: studies kept because a tuner may be using them.
        tuner_running: a live process was tuning on the cache (its studies were kept).
    """

    records: int
    studies_removed: int = 0
    studies_kept: int = 0
    tuner_running: bool = False


class KernelCache:
    """Tuning records in ``directory`` (created on first write)."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir()

    @property
    def records_dir(self) -> Path:
        return self.directory / "records"

    @property
    def locks_dir(self) -> Path:
        return self.directory / "locks"

    @property
    def study_database(self) -> Path:
        return self.directory / "studies.db"

    @property
    def study_storage_url(self) -> str:
        """SQLAlchemy URL of the Optuna storage (creates the directory); prefer :meth:`study_storage`,
        which also sets WAL mode and a busy timeout and creates the tables under a lock."""
        self._ensure()
        return sqlite_url(self.study_database)

    def study_storage(self) -> optuna.storages.RDBStorage:
        """The Optuna storage of every study of this cache: ``studies.db`` (SQLite in WAL
        mode, connections wait up to a minute for a lock), created under the ``studies``
        lock so that concurrent processes never race on its schema.

        Raises:
            CacheError: the directory or database cannot be created or opened.
        """
        with self.lock("studies"):  # lock() creates the directory
            return open_study_storage(self.study_database)

    def lock(self, name: str) -> FileLock:
        """An inter-process lock ``locks/<name>.lock`` (reentrant within a thread; waits
        up to :data:`LOCK_TIMEOUT_S`, then raises CacheError).

        Args:
            name: letters, digits, ``.``, ``_`` and ``-`` (e.g. ``"records"``, ``"studies"``,
                ``"study-<digest>"``).

        Raises:
            CacheError: an invalid name, or the directory cannot be created.
        """
        if not _LOCK_NAME.fullmatch(name):
            raise CacheError(f"invalid cache lock name {name!r}: use letters, digits, '.', '_' and '-'")
        self._ensure()
        return CacheLock(str(self.locks_dir / f"{name}.lock"), timeout=LOCK_TIMEOUT_S, is_singleton=True)

    def _ensure(self) -> None:
        try:
            self.records_dir.mkdir(parents=True, exist_ok=True)
            self.locks_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CacheError(f"cannot create cache directory {self.directory}: {error}; choose another with --cache-dir or POLYTF_CACHE_DIR") from None

    def path_for(self, key: CacheKey) -> Path:
        return self.records_dir / f"{key.digest()}.json"

    # The TuningStorage interface (polytf.storage.tuning_storage): the cache directory is the default storage.

    @property
    def location(self) -> str:
        """Where records are kept, as messages name it: the directory."""
        return str(self.directory)

    def record_location(self, key: CacheKey) -> str:
        """How messages name the record of ``key``: its file."""
        return str(self.path_for(key))

    def study_lock(self, study_name: str) -> FileLock:
        """The lock under which a study is created and its trials are claimed: ``locks/study-<name>.lock``."""
        return self.lock(f"study-{study_name}")

    def translating_errors(self, action: str = "use") -> contextlib.AbstractContextManager:
        """Nothing to translate: the cache's own methods raise CacheError already."""
        return contextlib.nullcontext()

    def close(self) -> None:
        """Nothing to close: every file is closed after use."""

    def load(self, key: CacheKey) -> TuningRecord | None:
        """The valid record for ``key``, or None.

        A record that cannot be used (corrupt or truncated JSON, a schema violation, a
        malformed recipe, or a stored key other than ``key``) gives None and one
        :class:`CacheWarning` naming the file and the reason. Never raises because of a
        record's contents.
        """
        expected = key.as_dict()
        path = self.records_dir / f"{expected['digest']}.json"  # path_for(key), without a second digest
        try:
            if not path.is_file():
                return None
            record = _parse_file(path)
            check_stored_key(record.key, expected)
        except OSError as error:  # e.g. a records directory this user may not read
            warn_ignored_record(path, f"it cannot be read ({error.strerror or error})")
            return None
        except CacheError as error:
            warn_ignored_record(path, str(error))
            return None
        return record

    def save(self, record: TuningRecord, key: CacheKey) -> Path:
        """Write ``record`` as the record of ``key`` (its ``key`` field set to
        ``key.as_dict()``), atomically and under the ``records`` lock; returns its path.

        Raises:
            CacheError: the file cannot be written, or the record is invalid.
        """
        text = record_to_json(replace(record, key=key.as_dict()))
        path = self.path_for(key)
        with self.lock("records"):  # lock() creates the directory
            return write_atomically(path, text.encode("utf-8"), "tuning record")

    def entries(self) -> list[RecordEntry]:
        """Every file of ``records/``, valid or not, sorted by name. A record is checked
        against its own key (fields, digest, file name), not against this machine."""
        result = []
        if not self.records_dir.is_dir():
            return result
        for path in sorted(self.records_dir.glob("*.json")):
            try:
                record = _parse_file(path)
            except CacheError as error:
                result.append(RecordEntry(path, None, str(error)))
                continue
            problem = stored_key_problem(record.key, path.stem)
            result.append(RecordEntry(path, None, problem) if problem else RecordEntry(path, record, None))
        return result

    def records(self) -> list[TuningRecord]:
        """Every valid record in the cache (invalid files are skipped silently; see :meth:`entries`)."""
        return [entry.record for entry in self.entries() if entry.record is not None]

    def clear(self) -> ClearReport:
        """Delete every record and every study no tuner is using.

        Records are removed under the ``records`` lock (a tuner writing one at the same
        moment either finishes first, and its record is removed, or writes it after). The
        study database is not deleted as a file (a running tuner keeps its connections to
        it); its studies are deleted one transaction each under the ``studies`` lock: all of
        them when no live process is tuning on this cache (asked of the operating system,
        :mod:`polytf.storage.tuner_presence`; no tuner starts meanwhile), else all but those
        a tuner may be using (a running trial, or one finished in the last ten minutes):
        :func:`polytf.storage.study_storage.delete_idle_studies`.

        Raises:
            CacheError: a file cannot be removed or the study database cannot be written.
        """
        if not self.directory.is_dir():
            return ClearReport(0)
        count = 0
        with self.lock("records"):
            try:
                for path in self.records_dir.glob("*.json"):
                    path.unlink(missing_ok=True)
                    count += 1
                for path in self.records_dir.glob("*.tmp"):  # left by a process killed while writing
                    path.unlink(missing_ok=True)
            except OSError as error:
                raise CacheError(f"cannot remove tuning records from {self.records_dir}: {error}") from None
        with self.lock("studies"), no_tuner_running(self.tuners_lock_file) as idle:
            removed, kept = delete_idle_studies(self.study_database, every=bool(idle))
        return ClearReport(count, removed, kept, tuner_running=idle is False)

    @property
    def tuners_lock_file(self) -> Path:
        """The file every running tuner of this cache holds a shared lock on
        (:mod:`polytf.storage.tuner_presence`)."""
        return self.locks_dir / "tuners.lock"

    def tuning(self) -> contextlib.AbstractContextManager:
        """The block of a tuner's whole run on this cache: ``cache clear`` meanwhile keeps the
        studies it may be using (:mod:`polytf.storage.tuner_presence`).

        Raises:
            CacheError: the cache directory cannot be created.
        """
        self._ensure()
        return tuner_running(self.tuners_lock_file)


def write_atomically(path: Path, data: bytes | Sequence[bytes | memoryview], what: str) -> Path:
    """Write ``data`` (bytes, or buffers written one after the other, never joined in memory)
    to a temporary file beside ``path`` and rename it over ``path`` (a reader sees the old file
    or the new one, never half of one); the caller holds the lock.

    Raises:
        CacheError: the file cannot be written (naming ``what`` and ``path``).
    """
    temporary = None
    try:
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, suffix=".tmp", delete=False) as handle:
            temporary = handle.name
            for part in (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data:
                handle.write(part)
        os.replace(temporary, path)
    except OSError as error:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        raise CacheError(f"cannot write {what} {path}: {error}") from None
    return path


def write_entry(cache: KernelCache, folder: Path, path: Path, data: bytes | Sequence[bytes | memoryview], what: str) -> Path:
    """Write one entry file of a cache sub-folder (``objects``, ``models``) atomically, under
    the folder's lock, creating the folder first.

    Raises:
        CacheError: the folder cannot be created or the file written.
    """
    with cache.lock(folder.name):  # lock() creates the cache directory
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CacheError(f"cannot create {folder}: {error}; choose another cache with --cache-dir or POLYTF_CACHE_DIR") from None
        return write_atomically(path, data, what)


def clear_entries(cache: KernelCache, folder: Path, suffixes: tuple[str, ...], what: str) -> int:
    """Delete every file of a cache sub-folder whose name ends with one of ``suffixes`` (and
    the temporary files a killed writer left), under the folder's lock; returns how many
    entries (not temporary files) were removed.

    Raises:
        CacheError: a file cannot be removed (naming ``what``).
    """
    if not folder.is_dir():
        return 0
    count = 0
    with cache.lock(folder.name):
        try:
            for path in folder.iterdir():
                if path.name.endswith(suffixes):
                    count += 1
                if path.name.endswith((*suffixes, ".tmp")):
                    path.unlink(missing_ok=True)
        except OSError as error:
            raise CacheError(f"cannot remove {what} from {folder}: {error}") from None
    return count


def warn_ignored_record(path: Path | str, reason: str) -> None:
    """Emit the one CacheWarning of an unusable record: its file (or key and database), the
    reason, the fallback."""
    warnings.warn(CacheWarning(f"ignoring tuning record {path}: {reason}; the kernel uses its default recipe"), stacklevel=3)


def _parse_file(path: Path) -> TuningRecord:
    """Read and validate the record file at ``path``; the CacheError says only what is
    wrong (the caller names the file)."""
    try:
        with path.open("rb") as handle:
            text = handle.read(MAX_RECORD_BYTES + 1)  # never more, whatever the file is
    except OSError as error:
        raise CacheError(f"it cannot be read ({error.strerror or error})") from None
    return parse_record_text(text)
