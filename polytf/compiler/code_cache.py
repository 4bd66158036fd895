"""The compiled-code cache of the CPU compile driver: kernels linked from cached object code.

Compiling a kernel (isl scheduling and AST, LLVM IR, LLVM's optimiser, code generation)
costs 0.1 to 0.5 s; linking its object code costs about a millisecond. A
:class:`KernelCodeCache` is the :data:`~polytf.compiler.kernel_compilation.KernelCompiler`
of a CPU build that compiles each distinct kernel once and keeps its object code::

    compile(scop, recipe, constant arrays)
      ObjectKey(scop fingerprint, recipe, constant arrays, target, knobs, versions)
        ├─ in this build already (identical kernels of a model) ─► the same code, linked once
        ├─ objects/<digest>.o.polytf valid for the key ─────────────► link_object (no isl, no LLVM)
        └─ otherwise: target.compile (or a compile worker: prefetch) ─► save, link

It also remembers each kernel's default recipe (:meth:`default_recipe`), whose search-space
analysis computes isl dependences, so that a load whose every kernel is cached does no isl
and no LLVM work. :meth:`prefetch` compiles a model's missing kernels in parallel, one worker
process per extra core (:mod:`polytf.compiler.compile_workers`), before the compile steps
link them in order.

Besides the object code, an entry keeps the facts a model needs to run the kernel
(:class:`~polytf.compiler.kernel_objects.KernelFacts`: the scheduled arrays, their sizes, the weight packings that run once
when the model is built), pickled: the cache directory is the user's own, as numba's
``__pycache__`` is, and a file is unpickled only after its SHA-256 and its key were checked
(:mod:`polytf.storage.object_cache`). Set ``compile_cache=False`` (``polytf.load``) or
``POLYTF_NO_CODE_CACHE=1`` to compile everything afresh (the cache is then neither read nor
written; identical kernels of a model still share one compilation).
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

from polytf.compiler.compile_workers import compile_objects
from polytf.compiler.kernel_objects import CompileJob, KernelFacts, kernel_object
from polytf.config import CodegenConfig, code_knobs
from polytf.errors import CacheError, CacheWarning, PolytfError
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.poly.scop import ArrayInfo, Scop
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.validation import validate_recipe
from polytf.storage.cache_key import current_versions
from polytf.storage.object_cache import DefaultRecipeKey, KernelObject, ObjectCache, ObjectEntry, ObjectKey, warn_ignored_object
from polytf.targets.cpu import KERNEL_FUNCTION_TYPE, CpuTarget
from polytf.targets.target import CompiledKernel

__all__ = ["KernelCodeCache", "ObjectCheck", "verify_objects"]

#: a model with more kernels to compile than this shows a progress bar and uses worker processes
PARALLEL_COMPILE_MIN_KERNELS = 4


class KernelCodeCache:
    """Compiles kernels for a CPU target through a compiled-code cache (module docstring).

    Args:
        target: the CPU target (its code must run in this process).
        threads: the thread count the default recipes are made for.
        objects: the object cache, or None to keep nothing on disk.
        codegen: the code knobs in the keys (default ``target.config``).

    Attributes:
        compiled: kernels compiled in this process (LLVM ran).
        linked: kernels linked from a cache file.
    """

    def __init__(self, target: CpuTarget, threads: int, objects: ObjectCache | None, codegen: CodegenConfig | None = None) -> None:
        self.target = target
        self.threads = int(threads)
        self.objects = objects
        self.knobs = code_knobs(codegen or target.config)
        self._fingerprint = target.fingerprint()
        self._kernels: dict[str, CompiledKernel] = {}
        self._entries: dict[str, KernelObject] = {}
        self._defaults: dict[str, ScheduleRecipe] = {}
        self._keys: dict[tuple, ObjectKey] = {}
        self._writable = True
        self.compiled = 0
        self.linked = 0

    # -- keys ------------------------------------------------------------------------
    def key(self, scop: Scop, recipe: ScheduleRecipe, constant_arrays: frozenset[str]) -> ObjectKey:
        """The object key of ``scop`` compiled with ``recipe`` on this target (made once per
        distinct kernel and recipe)."""
        memo = (scop.fingerprint(), recipe, frozenset(constant_arrays))
        key = self._keys.get(memo)
        if key is None:
            key = self._keys[memo] = ObjectKey(memo[0], recipe.to_dict(), tuple(sorted(constant_arrays)), self._fingerprint, self.knobs)
        return key

    # -- default recipes ---------------------------------------------------------------
    def default_recipe(self, kernel: LoweredKernel) -> ScheduleRecipe:
        """``kernel``'s default recipe on this target (the analytic default of its search
        space), remembered in this process and in the cache."""
        fingerprint = kernel.scop.fingerprint()
        if fingerprint in self._defaults:
            return self._defaults[fingerprint]
        key = DefaultRecipeKey(fingerprint, self._fingerprint, self.threads, asdict(self.target.cache_sizes), self.knobs)
        recipe = None
        stored = self.objects.load_default_recipe(key) if self.objects is not None else None
        if stored is not None:
            try:  # the schema; and the kernel's ranges (no isl) unless the entry checked itself
                recipe = ScheduleRecipe.from_dict(stored[0])
                if not stored[1]:  # an entry without a SHA-256 (an older polytf's)
                    validate_recipe(kernel.scop, recipe, self.target.limits)  # the key keeps the recipe as it was made
            except PolytfError as error:
                recipe = None
                warn_ignored_object(self.objects.default_recipe_path(key), f"its recipe cannot be used ({error})")
        if recipe is None:
            recipe = self.target.search_space(kernel.scop, self.threads).default_recipe()
            self._save(lambda: self.objects.save_default_recipe(key, recipe.to_dict()))
        self._defaults[fingerprint] = recipe
        return recipe

    # -- compiling -----------------------------------------------------------------------
    def __call__(self, scop: Scop, recipe: ScheduleRecipe, constant_arrays: frozenset[str] = frozenset()) -> CompiledKernel:
        """``scop`` compiled with ``recipe`` (a :data:`KernelCompiler`): linked from this
        build's code or the cache when its key is there, else compiled and saved.

        Raises:
            ScheduleError, CodegenError, CompileError: as :meth:`CpuTarget.compile`.
        """
        key = self.key(scop, recipe, constant_arrays)
        digest = key.digest()
        known = self._kernels.get(digest)
        if known is not None:
            return _for_scop(known, scop, recipe)
        entry = self._entries.pop(digest, None) or self._load(key)
        kernel = self._link(entry, scop, recipe) if entry is not None else None
        if kernel is None:
            kernel = self.target.compile(scop, recipe, constant_arrays)
            self.compiled += 1
            self._save(lambda: self.objects.save(key, kernel_object(kernel)))
        else:
            self.linked += 1
        self._kernels[digest] = kernel
        return kernel

    def missing(self, jobs: Sequence[CompileJob]) -> list[CompileJob]:
        """The jobs of distinct keys that neither this build nor the cache has compiled
        (one job per key: a model's identical kernels compile once)."""
        result, seen = [], set()
        for job in jobs:
            key = self.key(job.scop, job.recipe, job.constant_arrays)
            digest = key.digest()
            if digest in seen or digest in self._kernels or digest in self._entries:
                continue
            seen.add(digest)
            path = self.objects.object_path(key) if self.objects is not None else None
            if path is None or not path.is_file():
                result.append(job)
        return result

    def prefetch(self, missing: Sequence[CompileJob], progress: Callable[[int, int], None] | None = None) -> None:
        """Compile ``missing`` (from :meth:`missing`) ahead of the compile steps, in parallel
        over the CPUs (:func:`polytf.compiler.compile_workers.compile_objects`); each result is
        saved and then linked by :meth:`__call__`. A job that fails here is compiled again by
        ``__call__``, which reports its error as usual.

        Args:
            progress: called with ``(done, total)`` after each compiled job.
        """
        for done, (job, entry) in enumerate(compile_objects(self.target, missing), start=1):
            if entry is not None:
                key = self.key(job.scop, job.recipe, job.constant_arrays)
                self._entries[key.digest()] = entry
                self.compiled += 1
                self._save(lambda key=key, entry=entry: self.objects.save(key, entry))
            if progress:
                progress(done, len(missing))

    def _load(self, key: ObjectKey) -> KernelObject | None:
        return self.objects.load(key) if self.objects is not None else None

    def _link(self, entry: KernelObject, scop: Scop, recipe: ScheduleRecipe) -> CompiledKernel | None:
        """A kernel of ``scop`` from a cache entry, or None (one CacheWarning) when its facts
        or code cannot be used."""
        try:
            facts, address, engine = _linked(entry, self.target)
        except _UNUSABLE_ENTRY as error:
            key_path = self.objects.directory if self.objects is not None else "the code cache"
            warn_ignored_object(key_path, f"the entry of kernel {scop.name} cannot be used ({type(error).__name__}: {error})")
            return None
        return CompiledKernel(
            scop,
            recipe,
            KERNEL_FUNCTION_TYPE(address),
            arrays=_own_arrays(facts.arrays, scop),
            argument_bytes=facts.argument_bytes,
            owner=engine,
            constant_copies=facts.constant_copies,
            object_code=entry.object_code,
            symbol=entry.symbol,
            inputs_read_ahead_only=facts.inputs_read_ahead_only,
            scratch_written_whole=facts.scratch_written_whole,
        )

    def _save(self, write: Callable[[], object]) -> None:
        """Run a cache write; a failure (a read-only or full disk) is one CacheWarning for the
        whole build, which goes on without writing more entries."""
        if self.objects is None or not self._writable:
            return
        try:
            write()
        except CacheError as error:
            self._writable = False
            warnings.warn(CacheWarning(f"compiled kernels are not kept: {error}"), stacklevel=3)


#: what unpickling a cache entry's facts or linking its code raises when the entry is unusable
_UNUSABLE_ENTRY = (PolytfError, pickle.UnpicklingError, TypeError, ValueError, AttributeError, EOFError, ImportError)


def _linked(entry: KernelObject, target: CpuTarget) -> tuple[KernelFacts, int, object]:
    """The facts of ``entry`` and its code linked into this process: ``(facts, address of the
    entry point, the engine that owns the code)``.

    Raises:
        one of :data:`_UNUSABLE_ENTRY`: malformed facts, or code LLVM cannot load.
    """
    facts = pickle.loads(entry.facts)
    if not isinstance(facts, KernelFacts) or len(facts.arrays) != len(facts.argument_bytes):
        raise TypeError("the kernel facts are malformed")
    address, engine = target.link_object(entry.object_code, entry.symbol)
    return facts, address, engine


def _own_arrays(arrays: Sequence[ArrayInfo], scop: Scop) -> tuple[ArrayInfo, ...]:
    """``arrays`` of an identical kernel, with the tensors of ``scop`` (for messages)."""
    own = {info.name: info for info in scop.arrays}
    return tuple(replace(info, tensor=own[info.name].tensor) if info.name in own else info for info in arrays)


def _for_scop(kernel: CompiledKernel, scop: Scop, recipe: ScheduleRecipe) -> CompiledKernel:
    """``kernel``'s code as the kernel of ``scop`` (an identical kernel: same fingerprint and
    recipe), sharing the linked function and its engine."""
    if kernel.scop is scop:
        return kernel
    return replace(kernel, scop=scop, recipe=recipe, arrays=_own_arrays(kernel.arrays, scop))


@dataclass(frozen=True)
class ObjectCheck:
    """The verdict of :func:`verify_objects` on one file of ``objects/``.

    Attributes:
        entry: the file as :meth:`ObjectCache.entries` sees it.
        status: ``"ok"`` (sound; an object of this machine also links), ``"failed"`` (corrupt,
            inconsistent or not loadable: it is never used and is recompiled when needed) or
            ``"skipped"`` (sound, but for another CPU or version: never used here).
        detail: why, in words.
    """

    entry: ObjectEntry
    status: str
    detail: str


def verify_objects(objects: ObjectCache, target: CpuTarget) -> list[ObjectCheck]:
    """Check every file of ``objects`` against itself (magic, header, sizes, SHA-256, digest
    = file name) and link each object compiled for ``target`` (its fingerprint and this
    polytf's versions) into this process, as a load would (``polytf cache verify``)."""
    fingerprint, versions = target.fingerprint(), current_versions()
    checks = []
    for entry in objects.entries():
        if entry.problem is not None:
            checks.append(ObjectCheck(entry, "failed", entry.problem))
            continue
        if entry.kind != "object":
            checks.append(ObjectCheck(entry, "ok", "default recipe"))
            continue
        if entry.key.get("target") != fingerprint or entry.key.get("versions") != versions:
            checks.append(ObjectCheck(entry, "skipped", f"compiled for CPU {entry.cpu!r} or other versions: not used here"))
            continue
        loaded = objects.load_file(entry.path)
        if loaded is None:
            checks.append(ObjectCheck(entry, "failed", "it can no longer be read"))
            continue
        try:
            _linked(loaded, target)
        except _UNUSABLE_ENTRY as error:
            checks.append(ObjectCheck(entry, "failed", f"it cannot be linked ({type(error).__name__}: {error})"))
            continue
        checks.append(ObjectCheck(entry, "ok", f"links ({entry.size_bytes / 1024:.1f} KiB)"))
    return checks
