"""The tuning records of a model's kernels: the recipes a build tries before the default ones.

A kernel's record is found by its :class:`~polytf.storage.cache_key.CacheKey` (Scop
fingerprint × target fingerprint × threads × code knobs × versions) in the tuning storage
that the :class:`~polytf.compiler.build_options.BuildOptions` name: the cache directory, or
a ``postgresql://`` database (:func:`polytf.storage.tuning_storage.open_tuning_storage`).
The storage checks a record against its key and schema when it reads it (an unusable one
gives one :class:`~polytf.errors.CacheWarning` and no recipe); the recipe itself stays
untrusted until it compiles for its kernel (:func:`polytf.compiler.kernel_compilation.compile_with_record`).

Steps of :func:`stored_recipes`::

    BuildOptions ─► open the storage ─► per kernel: cache key ─► record ─► CachedRecipe ─► close
                    (directory or DB)   (identical kernels share one record, read once)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from polytf.compiler.build_options import BuildOptions
from polytf.compiler.prepared_model import PreparedModel
from polytf.config import CodegenConfig, code_knobs
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.schedules.recipe import ScheduleRecipe
from polytf.storage.cache import CacheKey, KernelCache
from polytf.storage.tuning_storage import TuningStorage, open_tuning_storage
from polytf.targets.target import Target

__all__ = ["CachedRecipe", "cache_key", "cached_recipes", "open_storage", "reading_records", "recorded_recipe", "stored_recipes"]


def cache_key(kernel: LoweredKernel, target: Target, threads: int, codegen: CodegenConfig) -> CacheKey:
    """The key of ``kernel``'s tuning record for ``target``, ``threads`` threads and the code
    knobs of ``codegen`` (:func:`polytf.config.code_knobs`)."""
    return CacheKey(kernel.scop.fingerprint(), target.fingerprint(), int(threads), code_knobs(codegen))


@dataclass(frozen=True)
class CachedRecipe:
    """A recipe read from a tuning record.

    Attributes:
        recipe: the record's recipe (schema-checked; not yet checked against its kernel).
        record: the record file (or its key and database), named in the warning if the
            recipe cannot be used.
    """

    recipe: ScheduleRecipe
    record: Path | str


def open_storage(options: BuildOptions, cache: KernelCache | None = None) -> TuningStorage:
    """The tuning storage ``options`` name: the database of ``options.storage`` (default
    ``$POLYTF_STORAGE``), else the cache directory (``cache``, default that of
    ``options.cache_dir``). Close it with :meth:`~polytf.storage.tuning_storage.TuningStorage.close`.

    Raises:
        CacheError: a storage URL that is invalid or whose server cannot be reached.
        DependencyMissingError: a storage URL whose driver is not installed.
    """
    return open_tuning_storage(options.storage, cache or KernelCache(options.cache_dir))


@contextlib.contextmanager
def reading_records(options: BuildOptions, action: str = "read tuning records from") -> Iterator[TuningStorage]:
    """The storage of :func:`open_storage` for a block that reads records; a failure of the
    storage inside it is one CacheError ("cannot ACTION the tuning storage ..."), and the
    storage is closed after it.

    Raises:
        CacheError, DependencyMissingError: as :func:`open_storage`, or a failed read.
    """
    records = open_storage(options)
    try:
        with records.translating_errors(action):
            yield records
    finally:
        records.close()


def recorded_recipe(records: TuningStorage, key: CacheKey) -> CachedRecipe | None:
    """The recipe of the valid record of ``key`` in ``records``, or None (no record, or an
    unusable one: then one CacheWarning)."""
    record = records.load(key)
    return None if record is None else CachedRecipe(record.schedule_recipe, records.record_location(key))


def cached_recipes(prepared: PreparedModel, cache: TuningStorage, target: Target, threads: int, codegen: CodegenConfig) -> dict[str, CachedRecipe]:
    """Kernel name -> its recipe from a valid record of ``cache`` (a KernelCache or a
    database storage; identical kernels share one record, read once; an unusable record
    gives one CacheWarning and no entry)."""
    by_location: dict[str, CachedRecipe | None] = {}
    result = {}
    for kernel in prepared.kernels:
        key = cache_key(kernel, target, threads, codegen)
        location = cache.record_location(key)  # one record per key digest
        if location not in by_location:
            by_location[location] = recorded_recipe(cache, key)
        if by_location[location] is not None:
            result[kernel.scop.name] = by_location[location]
    return result


def stored_recipes(prepared: PreparedModel, options: BuildOptions, target: Target, threads: int, codegen: CodegenConfig) -> dict[str, CachedRecipe]:
    """:func:`cached_recipes` from the tuning storage ``options`` name (:func:`reading_records`).

    Raises:
        CacheError: the storage cannot be opened or read (naming it, password hidden).
        DependencyMissingError: a storage URL whose driver is not installed.
    """
    with reading_records(options) as records:
        return cached_recipes(prepared, records, target, threads, codegen)
