"""From a GraphDef file to kernels and a CompiledModel.

``prepare_model`` runs the front half of the compiler (read, infer shapes, optimize the
graph (:func:`polytf.passes.pipeline.optimize`), partition into fusion groups, lower
to Scops); ``build_model`` compiles each kernel
with a recipe (explicit, from a validated tuning record, or the default) into a
:class:`CompiledModel`; a record that cannot be used falls back to the default recipe.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from polytf.config import CodegenConfig, code_knobs, default_thread_count
from polytf.errors import PolytfError
from polytf.frontend import load_graph
from polytf.graph import FusionGroup, Graph
from polytf.lowering.host_fallback import HostNode, HostStep, lower_with_fallback
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.lowering.shape_inference import infer_types
from polytf.passes.pipeline import optimize
from polytf.passes.pruning import prune_to_outputs
from polytf.passes.report import PassReport
from polytf.plan.buffer_placement import place_in_consumer_buffers
from polytf.poly.scop import Scop
from polytf.runtime.cpu.compiled_model import CompiledModel
from polytf.schedules.builder import ScheduledScop, schedule_scop
from polytf.schedules.recipe import ScheduleRecipe
from polytf.storage.cache import CacheKey, KernelCache, warn_ignored_record
from polytf.storage.tuning_record import TuningRecord
from polytf.storage.tuning_storage import TuningStorage, open_tuning_storage
from polytf.targets.cpu import CpuTarget
from polytf.targets.target import CompiledKernel, Target


@dataclass(frozen=True)
class PreparedModel:
    """A model after the front half of the compiler.

    Attributes:
        graph: typed and optimized graph.
        groups: fusion groups in execution order, host groups (``on_host``) included.
        kernels: the lowered Scops of the compiled groups, same order.
        passes: what each graph pass changed, in the order they ran (all rounds).
        host_nodes: the nodes that run on the host, with the reason
            (:mod:`polytf.lowering.host_fallback`).
    """

    graph: Graph
    groups: tuple[FusionGroup, ...]
    kernels: tuple[LoweredKernel, ...]
    passes: tuple[PassReport, ...]
    host_nodes: tuple[HostNode, ...] = ()

    def steps(self) -> list[LoweredKernel | HostStep]:
        """Kernels and host steps in execution order."""
        kernels = iter(self.kernels)
        host = {node.name: node for node in self.host_nodes}
        return [HostStep.of(self.graph, group, host[group.nodes[0]]) if group.on_host else next(kernels) for group in self.groups]


def prepare_graph(
    path: str | os.PathLike,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    outputs: Sequence[str] | None = None,
    optimize_graph: bool = True,
    signature: str | None = None,
) -> tuple[Graph, tuple[PassReport, ...]]:
    """Read ``path``, infer its types and run the graph passes; returns the typed graph and
    what each pass changed (see :func:`prepare_model` for the arguments and errors)."""
    graph = load_graph(path, outputs=outputs, signature=signature)
    typed = infer_types(graph, input_shapes)
    if not optimize_graph:
        pruned, report = prune_to_outputs(typed)
        return pruned, (report,)
    optimized, reports = optimize(typed)
    # The passes keep types and constants in step; typing the result afresh checks every new node.
    return infer_types(optimized.with_changes(types={}, constants={}), input_shapes), reports


def prepare_model(
    path: str | os.PathLike,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    outputs: Sequence[str] | None = None,
    fuse: bool = True,
    optimize_graph: bool = True,
    fallback: bool = True,
    signature: str | None = None,
    in_place: bool = True,
) -> PreparedModel:
    """Read ``path`` and lower it to kernels.

    Args:
        path: frozen GraphDef (``.pb``/``.pbtxt``) or SavedModel directory.
        input_shapes: placeholder name -> shape, for unknown dimensions.
        outputs: output node or tensor names (default: the graph's sinks).
        fuse: False puts every compute node in its own kernel.
        optimize_graph: False runs only pruning instead of every graph pass (for comparisons).
        fallback: nodes with a numpy reference that polytf cannot lower run on the host
            (:mod:`polytf.lowering.host_fallback`); False refuses them.
        signature: SavedModel signature (default ``serving_default``).
        in_place: write the operands of ConcatV2 and Pad straight into the slabs of
            their result (:mod:`polytf.plan.buffer_placement`); False keeps the copies.

    Raises:
        GraphError: unreadable file or malformed graph (names the file).
        UnsupportedOpError: every unsupported node, in one message (with ``fallback=False``
            also every node that would run on the host).
        ShapeError: shapes that cannot be inferred (says how to fix them).
    """
    graph, reports = prepare_graph(path, input_shapes, outputs, optimize_graph, signature)
    groups, kernels, host_nodes = lower_with_fallback(graph, fuse=fuse, fallback=fallback)
    if in_place:
        groups, kernels = place_in_consumer_buffers(graph, groups, kernels)
    return PreparedModel(graph, groups, kernels, reports, host_nodes)


def cache_key(kernel: LoweredKernel, target: Target, threads: int, codegen: CodegenConfig) -> CacheKey:
    return CacheKey(kernel.scop.fingerprint(), target.fingerprint(), int(threads), code_knobs(codegen))


def default_recipe(kernel: LoweredKernel, threads: int, target: Target | None = None) -> ScheduleRecipe:
    """The recipe of a kernel without a tuning record: the analytic default of its search
    space on ``target`` (default: the host CPU)."""
    return (target or CpuTarget()).search_space(kernel.scop, threads).default_recipe()


#: Compiles one kernel: ``(scop, recipe, constant arrays) -> kernel`` (``Target.compile`` by default).
KernelCompiler = Callable[[Scop, ScheduleRecipe, frozenset[str]], CompiledKernel]


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


def build_model(
    prepared: PreparedModel,
    recipes: Mapping[str, ScheduleRecipe] | None = None,
    target: Target | None = None,
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
    cached: Mapping[str, CachedRecipe] | None = None,
) -> CompiledModel:
    """Compile every kernel (:func:`compile_steps`) into a :class:`CompiledModel`.

    Raises:
        PolytfError: a recipe of ``recipes`` or a default recipe does not compile (with the
            kernel's name as context).
    """
    target = target or CpuTarget()
    threads = threads or default_thread_count()
    steps, tuned = compile_steps(prepared, recipes, target, threads, progress, cached)
    model = CompiledModel(prepared.graph, steps, threads)
    model.tuned_kernels = tuned
    return model


def compile_steps(
    prepared: PreparedModel,
    recipes: Mapping[str, ScheduleRecipe] | None,
    target: Target,
    threads: int,
    progress: Callable[[str], None] | None = None,
    cached: Mapping[str, CachedRecipe] | None = None,
    compiler: KernelCompiler | None = None,
) -> tuple[list[tuple[LoweredKernel, CompiledKernel] | HostStep], tuple[str, ...]]:
    """Compile every kernel for ``target``: with its recipe in ``recipes`` (by kernel name),
    else its recipe from a tuning record in ``cached``, else the default recipe of
    ``target``'s search space for ``threads`` threads.

    ``compiler(scop, recipe, constant_arrays)`` compiles one kernel; default
    ``target.compile`` (a runnable :class:`CompiledKernel`). ``polytf compile`` passes one
    that stops at optimised LLVM IR (:func:`polytf.export.kernel_code.linkable_kernel`).

    A recipe from a record is untrusted: if it is invalid or illegal for its kernel (or
    fails to compile for any other reason), one :class:`CacheWarning` names the record and
    the reason, and the kernel gets its default recipe.

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
    compiler = compiler or target.compile
    compiled: list[tuple[LoweredKernel, CompiledKernel] | HostStep] = []
    tuned = []
    rejected: set[Path | str] = set()
    for kernel in prepared.steps():
        if isinstance(kernel, HostStep):
            compiled.append(kernel)
            continue
        name = kernel.scop.name
        if progress:
            progress(name)
        code = None
        if name not in recipes and name in cached:
            code = _compile_cached(kernel, cached[name], compiler, rejected)
            if code is not None:
                tuned.append(name)
        if code is None:
            code = _compile(kernel, recipes.get(name) or default_recipe(kernel, threads, target), compiler)
        compiled.append((kernel, code))
    return compiled, tuple(sorted(tuned))


def constant_arrays(kernel: LoweredKernel) -> frozenset[str]:
    """The kernel's input arrays that hold graph constants (weights): their packing runs
    once, when the model is built."""
    return frozenset(kernel.constant_values)


def _compile(kernel: LoweredKernel, recipe: ScheduleRecipe, compiler: KernelCompiler) -> CompiledKernel:
    try:
        return compiler(kernel.scop, recipe, constant_arrays(kernel))
    except PolytfError as error:
        raise error.with_context(f"while compiling kernel {kernel.scop.name} ({', '.join(op for _, op in kernel.scop.ops)})") from None


def _compile_cached(kernel: LoweredKernel, cached: CachedRecipe, compiler: KernelCompiler, rejected: set[Path | str]) -> CompiledKernel | None:
    """The kernel compiled with a record's recipe, or None (after one warning per record)."""
    if cached.record in rejected:
        return None
    try:
        return compiler(kernel.scop, cached.recipe, constant_arrays(kernel))
    except Exception as error:  # a record is untrusted input: whatever it makes the compiler raise, loading goes on
        rejected.add(cached.record)
        cause = str(error) if isinstance(error, PolytfError) else f"{type(error).__name__}: {error}"
        if kernel.scop.name not in cause:
            cause = f"kernel {kernel.scop.name}: {cause}"
        warn_ignored_record(cached.record, f"its recipe cannot be used: {cause}")
        return None


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


def cached_recipes(prepared: PreparedModel, cache: TuningStorage, target: Target, threads: int, codegen: CodegenConfig) -> dict[str, CachedRecipe]:
    """Kernel name -> its recipe from a valid record of ``cache`` (a KernelCache or a
    database storage; identical kernels share one record, read once; an unusable record
    gives one CacheWarning and no entry)."""
    by_path: dict[str, CachedRecipe | None] = {}
    result = {}
    for kernel in prepared.kernels:
        key = cache_key(kernel, target, threads, codegen)
        path = cache.record_location(key)  # one record per key digest
        if path not in by_path:
            record = cache.load(key)
            by_path[path] = None if record is None else CachedRecipe(record.schedule_recipe, path)
        if by_path[path] is not None:
            result[kernel.scop.name] = by_path[path]
    return result


def stored_recipes(
    prepared: PreparedModel, storage: str | None, cache_dir: str | os.PathLike | None, target: Target, threads: int, codegen: CodegenConfig
) -> dict[str, CachedRecipe]:
    """:func:`cached_recipes` from the tuning storage named by ``storage`` (a ``postgresql://``
    URL; default ``$POLYTF_STORAGE``, else the cache directory ``cache_dir``:
    :func:`~polytf.storage.tuning_storage.open_tuning_storage`), closed afterwards.

    Raises:
        CacheError: the storage cannot be opened or read (naming it, password hidden).
        DependencyMissingError: a storage URL whose driver is not installed.
    """
    records = open_tuning_storage(storage, KernelCache(cache_dir))
    try:
        with records.translating_errors("read tuning records from"):
            return cached_recipes(prepared, records, target, threads, codegen)
    finally:
        records.close()

