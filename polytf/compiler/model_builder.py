"""Building a model for a target: a CompiledModel on the CPU, a CudaModel on a GPU.

Steps of :func:`load_model` (``polytf.load``)::

    ModelSource, BuildOptions ─► target ─► prepare ─► tuning records ─► compile steps ─► model
                                 CPU or    read ...   for the target,   record, else     CompiledModel
                                 GPU       lower      threads, knobs    default recipe   or CudaModel

1. target: :func:`build_target`, the target the options name
   (:func:`polytf.compiler.target_selection.select_target`: a missing GPU fails here, before
   the model is read) and the thread count of its cache keys;
2. prepare: :func:`polytf.compiler.preparation.prepare_model`;
3. tuning records: :func:`polytf.compiler.recorded_recipes.stored_recipes`, looked up under
   the target's fingerprint, so that one target never uses another's;
4. compile steps and model: :func:`build_target_model`, every kernel compiled with its
   record's recipe, else its default recipe (:mod:`polytf.compiler.kernel_compilation`),
   into the model kind of the target.

This is the one module that knows both model kinds; the tuner (which builds a model with
its winners to time it) and ``polytf.load`` come here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from polytf.compiler.build_options import BuildOptions
from polytf.compiler.kernel_compilation import compile_steps
from polytf.compiler.model_source import ModelSource
from polytf.compiler.preparation import PreparedModel, prepare_model
from polytf.compiler.recorded_recipes import CachedRecipe, stored_recipes
from polytf.compiler.target_selection import is_gpu_target, select_target, target_threads
from polytf.config import CodegenConfig, default_thread_count
from polytf.runtime.cpu.compiled_model import CompiledModel
from polytf.runtime.cuda.cuda_model import CudaModel, build_cuda_model
from polytf.schedules.recipe import ScheduleRecipe
from polytf.targets.cpu import CpuTarget
from polytf.targets.target import Target

__all__ = ["build_model", "build_target", "build_target_model", "load_model"]


def build_target(options: BuildOptions, codegen: CodegenConfig) -> tuple[Target, int]:
    """The target ``options`` name, with the code knobs of ``codegen``, and the thread count
    of its cache keys, search spaces and measurements (``options``' threads on the CPU, one
    on a GPU: :func:`~polytf.compiler.target_selection.target_threads`).

    Raises:
        DependencyMissingError: target ``"cuda"`` without CuPy or a GPU.
    """
    target = select_target(options.target, codegen)
    return target, target_threads(target, options.thread_count())


def build_model(
    prepared: PreparedModel,
    recipes: Mapping[str, ScheduleRecipe] | None = None,
    target: Target | None = None,
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
    cached: Mapping[str, CachedRecipe] | None = None,
) -> CompiledModel:
    """Compile every kernel for the CPU (:func:`~polytf.compiler.kernel_compilation.compile_steps`)
    into a :class:`CompiledModel` on ``threads`` threads (default ``$POLYTF_THREADS`` or every
    CPU); ``target`` defaults to the host CPU.

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


def build_target_model(
    prepared: PreparedModel,
    target: Target,
    threads: int,
    recipes: Mapping[str, ScheduleRecipe] | None = None,
    cached: Mapping[str, CachedRecipe] | None = None,
) -> CompiledModel | CudaModel:
    """The model of ``prepared`` for ``target``, each kernel with its recipe in ``recipes``,
    else its record's in ``cached``, else its default recipe: a :class:`CompiledModel` on
    ``threads`` threads, or on a GPU a :class:`~polytf.runtime.cuda.cuda_model.CudaModel`
    (whose ``latency_s`` is timed with CUDA events).

    Raises:
        PolytfError: a recipe of ``recipes`` or a default recipe does not compile.
    """
    if is_gpu_target(target):
        return build_cuda_model(prepared, recipes, target, cached=cached)
    return build_model(prepared, recipes, target, threads, cached=cached)


def load_model(source: ModelSource | str | os.PathLike, options: BuildOptions | None = None) -> CompiledModel | CudaModel:
    """The model of ``source`` built as ``options`` say (default ``BuildOptions()``), from the
    tuning records (module docstring): untuned kernels, and kernels whose record cannot be
    used, get the default recipe (the latter with a CacheWarning). See :func:`polytf.load`.

    Raises:
        DependencyMissingError: target ``"cuda"`` without CuPy or a GPU (before the model is
            read); a storage URL whose driver is not installed.
        CacheError: a storage URL that is invalid or whose server cannot be reached.
        GraphError, UnsupportedOpError, ShapeError: the model cannot be compiled.
    """
    source, options = ModelSource.of(source), options or BuildOptions()
    codegen = CodegenConfig()
    target, threads = build_target(options, codegen)
    prepared = prepare_model(source, fallback=options.fallback)
    cached = stored_recipes(prepared, options, target, threads, codegen)
    return build_target_model(prepared, target, threads, cached=cached)
