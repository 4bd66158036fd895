"""KernelCache: tuning records on disk, keyed by everything that changes the code.

Layout of a cache directory::

    records/<key digest>.json   one TuningRecord per kernel × target × versions × knobs
    studies.db                  the Optuna study storage (SQLite) of every tuning run

The directory is the user's cache directory (platformdirs) unless ``--cache-dir`` or
``POLYTF_CACHE_DIR`` says otherwise. Records are written atomically (temporary file
then rename), so an interrupted run never leaves a half-written record.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import islpy
import llvmlite
import platformdirs

import polytf
from polytf.config import CACHE_DIR_ENVIRONMENT_VARIABLE
from polytf.errors import CacheError
from polytf.schedules.recipe import ScheduleRecipe


def default_cache_dir() -> Path:
    """``$POLYTF_CACHE_DIR`` if set, else the user's cache directory for polytf."""
    override = os.environ.get(CACHE_DIR_ENVIRONMENT_VARIABLE)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir("polytf", appauthor=False))


@dataclass(frozen=True)
class CacheKey:
    """What a tuning record is valid for.

    Attributes:
        scop_fingerprint: the kernel's computation, shapes and dtypes (Scop.fingerprint).
        target: the target's fingerprint (triple, CPU name and features, LLVM version).
        threads: thread count the kernel was measured with.
        knobs: code-changing settings from polytf.config.
        versions: polytf, islpy and llvmlite versions.
    """

    scop_fingerprint: str
    target: dict
    threads: int
    knobs: dict
    versions: dict = field(default_factory=lambda: {"polytf": polytf.__version__, "islpy": islpy.__version__, "llvmlite": llvmlite.__version__})

    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class TuningRecord:
    """The outcome of tuning one kernel (the recipe, never a binary).

    Attributes:
        key: the CacheKey, as a dict.
        kernel: kernel name where it was tuned (informational).
        ops: op types fused into it.
        recipe: the best recipe, as a dict (ScheduleRecipe.to_dict).
        default_latency_s: median latency of the default recipe.
        best_latency_s: median latency of the best recipe.
        trials: trials run; failed_trials: of which failed (illegal, compile error, wrong result).
        complete: False when tuning was interrupted before all trials ran.
    """

    key: dict
    kernel: str
    ops: tuple[str, ...]
    recipe: dict
    default_latency_s: float
    best_latency_s: float
    trials: int
    failed_trials: int
    complete: bool = True

    @property
    def schedule_recipe(self) -> ScheduleRecipe:
        return ScheduleRecipe.from_dict(self.recipe)

    @property
    def speedup(self) -> float:
        return self.default_latency_s / self.best_latency_s if self.best_latency_s > 0 else float("nan")


class KernelCache:
    """Tuning records in ``directory`` (created on first write)."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir()

    @property
    def records_dir(self) -> Path:
        return self.directory / "records"

    @property
    def study_storage_url(self) -> str:
        """SQLAlchemy URL of the Optuna storage (creates the directory)."""
        self._ensure()
        return f"sqlite:///{(self.directory / 'studies.db').as_posix()}"

    def _ensure(self) -> None:
        try:
            self.records_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CacheError(f"cannot create cache directory {self.directory}: {error}; choose another with --cache-dir or POLYTF_CACHE_DIR") from None

    def path_for(self, key: CacheKey) -> Path:
        return self.records_dir / f"{key.digest()}.json"

    def load(self, key: CacheKey) -> TuningRecord | None:
        """The record for ``key``, or None. A corrupt record file raises CacheError."""
        path = self.path_for(key)
        if not path.exists():
            return None
        return _read_record(path)

    def save(self, record: TuningRecord, key: CacheKey) -> Path:
        """Write ``record`` atomically; returns its path."""
        self._ensure()
        path = self.path_for(key)
        try:
            with tempfile.NamedTemporaryFile("w", dir=self.records_dir, suffix=".tmp", delete=False) as handle:
                json.dump(asdict(record), handle, indent=2, sort_keys=True)
                temporary = handle.name
            os.replace(temporary, path)
        except OSError as error:
            raise CacheError(f"cannot write tuning record {path}: {error}") from None
        return path

    def records(self) -> list[TuningRecord]:
        """Every record in the cache (unreadable files are skipped)."""
        result = []
        if not self.records_dir.exists():
            return result
        for path in sorted(self.records_dir.glob("*.json")):
            try:
                result.append(_read_record(path))
            except CacheError:
                continue
        return result

    def clear(self) -> int:
        """Delete every record and the study storage; returns the number of records removed."""
        count = 0
        if self.records_dir.exists():
            for path in self.records_dir.glob("*.json"):
                path.unlink()
                count += 1
        database = self.directory / "studies.db"
        if database.exists():
            database.unlink()
        return count


def _read_record(path: Path) -> TuningRecord:
    try:
        data = json.loads(path.read_text())
        data["ops"] = tuple(data["ops"])
        return TuningRecord(**data)
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise CacheError(f"tuning record {path} is unreadable ({error}); delete it or run `polytf cache clear`") from None
