"""From a GraphDef file to kernels and a CompiledModel.

``prepare_model`` runs the front half of the compiler (read, infer shapes, optimize the
graph (:func:`polytf.graph.passes.pipeline.optimize`), partition into fusion groups, lower
to Scops); ``build_model`` compiles each kernel
with a recipe (from the cache, or the default) into a :class:`CompiledModel`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from polytf.config import CodegenConfig, code_knobs, default_thread_count
from polytf.errors import PolytfError
from polytf.frontend import load_graph
from polytf.graph import Graph
from polytf.graph.passes.fusion import FusionGroup, partition
from polytf.graph.passes.pipeline import optimize
from polytf.graph.passes.pruning import prune_to_outputs
from polytf.graph.passes.report import PassReport
from polytf.ops.lowering import LoweredKernel, lower_group
from polytf.ops.shape_inference import infer_types
from polytf.runtime.cache import CacheKey, KernelCache
from polytf.runtime.compiled_model import CompiledModel
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.search_space import SearchSpace
from polytf.targets.cpu import CpuTarget
from polytf.targets.target import Target


@dataclass(frozen=True)
class PreparedModel:
    """A model after the front half of the compiler.

    Attributes:
        graph: typed and optimized graph.
        groups: fusion groups in execution order.
        kernels: their lowered Scops, same order.
        passes: what each graph pass changed, in the order they ran (all rounds).
    """

    graph: Graph
    groups: tuple[FusionGroup, ...]
    kernels: tuple[LoweredKernel, ...]
    passes: tuple[PassReport, ...]


def prepare_graph(
    path: str | os.PathLike,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    outputs: Sequence[str] | None = None,
    optimize_graph: bool = True,
) -> tuple[Graph, tuple[PassReport, ...]]:
    """Read ``path``, infer its types and run the graph passes; returns the typed graph and
    what each pass changed (see :func:`prepare_model` for the arguments and errors)."""
    graph = load_graph(path, outputs=outputs)
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
) -> PreparedModel:
    """Read ``path`` and lower it to kernels.

    Args:
        path: frozen GraphDef (``.pb``/``.pbtxt``).
        input_shapes: placeholder name -> shape, for unknown dimensions.
        outputs: output node or tensor names (default: the graph's sinks).
        fuse: False puts every compute node in its own kernel.
        optimize_graph: False runs only pruning instead of every graph pass (for comparisons).

    Raises:
        GraphError: unreadable file or malformed graph (names the file).
        UnsupportedOpError: every unsupported node, in one message.
        ShapeError: shapes that cannot be inferred (says how to fix them).
    """
    graph, reports = prepare_graph(path, input_shapes, outputs, optimize_graph)
    groups = partition(graph, fuse=fuse)
    kernels = tuple(lower_group(graph, group) for group in groups)
    return PreparedModel(graph, groups, kernels, reports)


def cache_key(kernel: LoweredKernel, target: Target, threads: int, codegen: CodegenConfig) -> CacheKey:
    return CacheKey(kernel.scop.fingerprint(), target.fingerprint(), int(threads), code_knobs(codegen))


def default_recipe(kernel: LoweredKernel, threads: int) -> ScheduleRecipe:
    return SearchSpace.for_scop(kernel.scop, threads).default_recipe()


def build_model(
    prepared: PreparedModel,
    recipes: Mapping[str, ScheduleRecipe] | None = None,
    target: Target | None = None,
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> CompiledModel:
    """Compile every kernel (``recipes`` by kernel name; the default recipe elsewhere)."""
    target = target or CpuTarget()
    threads = threads or default_thread_count()
    recipes = recipes or {}
    compiled = []
    for kernel in prepared.kernels:
        recipe = recipes.get(kernel.scop.name) or default_recipe(kernel, threads)
        if progress:
            progress(kernel.scop.name)
        try:
            compiled.append((kernel, target.compile(kernel.scop, recipe)))
        except PolytfError as error:
            raise error.with_context(f"while compiling kernel {kernel.scop.name} ({', '.join(op for _, op in kernel.scop.ops)})") from None
    return CompiledModel(prepared.graph, compiled, threads)


def cached_recipes(prepared: PreparedModel, cache: KernelCache, target: Target, threads: int, codegen: CodegenConfig) -> dict[str, ScheduleRecipe]:
    """Kernel name -> tuned recipe, for the kernels that have a record in ``cache``."""
    result = {}
    for kernel in prepared.kernels:
        record = cache.load(cache_key(kernel, target, threads, codegen))
        if record is not None:
            result[kernel.scop.name] = record.schedule_recipe
    return result


def load_model(
    path: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    outputs: Sequence[str] | None = None,
    threads: int | None = None,
) -> CompiledModel:
    """A CompiledModel of ``path`` built from the tuning cache (untuned kernels use the
    default recipe). See :func:`polytf.load`."""
    threads = threads or default_thread_count()
    codegen = CodegenConfig()
    target = CpuTarget(codegen)
    prepared = prepare_model(path, input_shapes, outputs)
    recipes = cached_recipes(prepared, KernelCache(cache_dir), target, threads, codegen)
    model = build_model(prepared, recipes, target, threads)
    model.tuned_kernels = tuple(sorted(recipes))
    return model
