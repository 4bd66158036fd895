"""Compiling a model's kernels: a tuning record's recipe, else the default recipe.

Each kernel of a :class:`~polytf.compiler.preparation.PreparedModel` is compiled with the
first of

1. an explicit recipe (``recipes``: the tuner's winners, a recipe file), trusted: a failure
   is an error naming the kernel;
2. its tuning record's recipe (:mod:`polytf.compiler.recorded_recipes`), untrusted: a
   recipe that is invalid or illegal for the kernel, or that fails to compile for any other
   reason, gives one :class:`~polytf.errors.CacheWarning` naming the record and the reason,
   and the kernel goes on to
3. its default recipe: the analytic default of the target's search space
   (:meth:`polytf.schedules.search_space.SearchSpace.default_recipe`).

:func:`compile_with_record` is steps 2 and 3 for one kernel, as ``polytf.load``, ``polytf
run``, ``polytf compile`` and ``polytf show`` take them; :func:`compile_steps` runs the three
for every kernel of a model. The kernel compiler is a parameter: ``Target.compile`` (a
runnable kernel) by default, :func:`polytf.export.kernel_code.linkable_kernel` (optimised
LLVM IR) for an export, :func:`polytf.targets.compile_driver.emit_kernel` (schedule, AST and
code) for ``polytf show``. Weights are packed once, when a model is built
(:func:`constant_arrays`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polytf.compiler.code_cache import PARALLEL_COMPILE_MIN_KERNELS, KernelCodeCache
from polytf.compiler.kernel_objects import CompileJob
from polytf.compiler.prepared_model import PreparedModel
from polytf.compiler.recorded_recipes import CachedRecipe
from polytf.errors import PolytfError
from polytf.lowering.host_fallback import HostStep
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.poly.scop import Scop
from polytf.schedules.builder import ScheduledScop, schedule_scop
from polytf.schedules.recipe import ScheduleRecipe
from polytf.storage.cache import warn_ignored_record
from polytf.storage.tuning_record import TuningRecord
from polytf.targets.cpu import CpuTarget
from polytf.targets.target import CompiledKernel, Target

__all__ = [
    "KernelCompilation",
    "KernelCompiler",
    "compile_steps",
    "compile_with_record",
    "constant_arrays",
    "default_recipe",
    "schedule_record",
]

#: Compiles one kernel: ``(scop, recipe, constant arrays) -> kernel`` (``Target.compile`` by default).
KernelCompiler = Callable[[Scop, ScheduleRecipe, frozenset[str]], Any]
#: A kernel's default recipe: ``kernel -> recipe``.
DefaultRecipes = Callable[[LoweredKernel], ScheduleRecipe]


@dataclass(frozen=True)
class KernelCompilation:
    """One kernel compiled by :func:`compile_with_record`.

    Attributes:
        code: what the kernel compiler returned (a :class:`~polytf.targets.target.CompiledKernel`
            with the default compiler).
        recipe: the recipe it was compiled with.
        from_record: whether that recipe is the tuning record's (else the default one).
    """

    code: Any
    recipe: ScheduleRecipe
    from_record: bool


def default_recipe(kernel: LoweredKernel, threads: int, target: Target | None = None) -> ScheduleRecipe:
    """The recipe of a kernel without a tuning record: the analytic default of its search
    space on ``target`` (default: the host CPU)."""
    return (target or CpuTarget()).search_space(kernel.scop, threads).default_recipe()


def constant_arrays(kernel: LoweredKernel) -> frozenset[str]:
    """The kernel's input arrays that hold graph constants (weights): their packing runs
    once, when the model is built."""
    return frozenset(kernel.constant_values)


def compile_with_record(
    kernel: LoweredKernel,
    cached: CachedRecipe | None,
    target: Target,
    threads: int,
    compiler: KernelCompiler | None = None,
    rejected: set[Path | str] | None = None,
    defaults: DefaultRecipes | None = None,
) -> KernelCompilation:
    """``kernel`` compiled with its record's recipe ``cached``, else (no record, or a recipe
    that cannot be used) with its default recipe on ``target`` for ``threads`` threads.

    Args:
        compiler: ``(scop, recipe, constant arrays) -> code``; default ``target.compile``.
        rejected: records already found unusable (each warned about once; a kernel that
            shares one goes straight to its default recipe); a record rejected here is
            added.
        defaults: ``kernel -> its default recipe``; default :func:`default_recipe` on
            ``target`` (a :class:`~polytf.compiler.code_cache.KernelCodeCache` remembers them).

    Raises:
        PolytfError: the default recipe does not compile (with the kernel's name as context).
    """
    compiler = compiler or target.compile
    rejected = set() if rejected is None else rejected
    if cached is not None and cached.record not in rejected:
        try:
            return KernelCompilation(compiler(kernel.scop, cached.recipe, constant_arrays(kernel)), cached.recipe, True)
        except Exception as error:  # a record is untrusted input: whatever it makes the compiler raise, loading goes on
            rejected.add(cached.record)
            cause = str(error) if isinstance(error, PolytfError) else f"{type(error).__name__}: {error}"
            if kernel.scop.name not in cause:
                cause = f"kernel {kernel.scop.name}: {cause}"
            warn_ignored_record(cached.record, f"its recipe cannot be used: {cause}")
    recipe = defaults(kernel) if defaults else default_recipe(kernel, threads, target)
    return KernelCompilation(_compile(kernel, recipe, compiler), recipe, False)


def compile_steps(
    prepared: PreparedModel,
    recipes: Mapping[str, ScheduleRecipe] | None,
    target: Target,
    threads: int,
    progress: Callable[[str], None] | None = None,
    cached: Mapping[str, CachedRecipe] | None = None,
    compiler: KernelCompiler | None = None,
    code_cache: KernelCodeCache | None = None,
    given: Mapping[str, CompiledKernel] | None = None,
) -> tuple[list[tuple[LoweredKernel, CompiledKernel] | HostStep], tuple[str, ...]]:
    """Compile every kernel for ``target``: with its recipe in ``recipes`` (by kernel name),
    else its recipe from a tuning record in ``cached``, else the default recipe of
    ``target``'s search space for ``threads`` threads (module docstring).

    ``compiler(scop, recipe, constant_arrays)`` compiles one kernel; default
    ``target.compile`` (a runnable :class:`CompiledKernel`). ``polytf compile`` passes one
    that stops at optimised LLVM IR (:func:`polytf.export.kernel_code.linkable_kernel`).
    With ``code_cache`` (a CPU build), kernels and default recipes go through the
    compiled-code cache instead: each distinct kernel is compiled once, missing ones in
    parallel first (a progress bar on a terminal when there are more than a few), the others
    linked from their cached object code. Kernels in ``given`` (by name) are not compiled:
    they are given compiled (a dynamic model's kernels run as another size's, slice by slice:
    :mod:`polytf.compiler.sliced_kernels`).

    Returns:
        ``(steps, tuned)``: ``(lowered kernel, compiled kernel)`` pairs and host steps in
        execution order (what a model is built from), and the sorted names of the kernels
        compiled from a record.

    Raises:
        PolytfError: a recipe of ``recipes`` or a default recipe does not compile (with the
            kernel's name as context).
    """
    recipes = recipes or {}
    cached = cached or {}
    given = given or {}
    defaults = None
    if code_cache is not None:
        compiler, defaults = code_cache, code_cache.default_recipe
        _prefetch(prepared, recipes, cached, code_cache, progress, given)
    compiler = compiler or target.compile
    compiled: list[tuple[LoweredKernel, CompiledKernel] | HostStep] = []
    tuned = []
    rejected: set[Path | str] = set()
    for kernel in prepared.steps():
        if isinstance(kernel, HostStep):
            compiled.append(kernel)
            continue
        name = kernel.scop.name
        if name in given:
            compiled.append((kernel, given[name]))
            continue
        if progress:
            progress(name)
        if name in recipes:
            recipe = recipes[name] or (defaults(kernel) if defaults else default_recipe(kernel, threads, target))
            compiled.append((kernel, _compile(kernel, recipe, compiler)))
            continue
        compilation = compile_with_record(kernel, cached.get(name), target, threads, compiler, rejected, defaults)
        if compilation.from_record:
            tuned.append(name)
        compiled.append((kernel, compilation.code))
    return compiled, tuple(sorted(tuned))


def _prefetch(
    prepared: PreparedModel,
    recipes: Mapping[str, ScheduleRecipe],
    cached: Mapping[str, CachedRecipe],
    code_cache: KernelCodeCache,
    progress: Callable[[str], None] | None,
    given: Mapping[str, CompiledKernel],
) -> None:
    """Compile the kernels the code cache lacks (but those ``given`` compiled), in parallel,
    before the compile steps link them (:meth:`KernelCodeCache.prefetch`)."""
    jobs = []
    for kernel in prepared.kernels:
        name = kernel.scop.name
        if name in given:
            continue
        recipe = recipes.get(name) or (cached[name].recipe if name in cached else None) or code_cache.default_recipe(kernel)
        jobs.append(CompileJob(kernel.scop, recipe, constant_arrays(kernel)))
    missing = code_cache.missing(jobs)
    if len(missing) <= PARALLEL_COMPILE_MIN_KERNELS:
        return  # compiled one by one by the compile steps
    bar = None
    if progress is None:
        from tqdm import tqdm  # the progress bar of a library load: loaded on first use

        bar = tqdm(total=len(missing), desc="polytf: compiling kernels", unit="kernel", disable=None, leave=False, file=sys.stderr)

    def report(done: int, total: int) -> None:
        if bar is not None:
            bar.update(done - bar.n)
        elif progress:
            progress(f"{done}/{total} kernels")

    try:
        code_cache.prefetch(missing, report)
    finally:
        if bar is not None:
            bar.close()


def schedule_record(kernel: LoweredKernel, record: TuningRecord, target: Target, path: Path | str) -> ScheduledScop | None:
    """``kernel`` scheduled with ``record``'s recipe as a model runs it (weights packed ahead
    of time: :func:`constant_arrays`), or None when the recipe is invalid or
    illegal for it (a record with a sound schema may still hold one); then one CacheWarning
    names the record file ``path`` and the reason."""
    try:
        return schedule_scop(kernel.scop, record.schedule_recipe, limits=target.limits, constant_arrays=constant_arrays(kernel))
    except PolytfError as error:
        warn_ignored_record(path, f"its recipe cannot be used: {error}")
        return None


def _compile(kernel: LoweredKernel, recipe: ScheduleRecipe, compiler: KernelCompiler) -> Any:
    """``kernel`` compiled with a trusted recipe; an error names the kernel and its ops."""
    try:
        return compiler(kernel.scop, recipe, constant_arrays(kernel))
    except PolytfError as error:
        raise error.with_context(f"while compiling kernel {kernel.scop.name} ({', '.join(op for _, op in kernel.scop.ops)})") from None
