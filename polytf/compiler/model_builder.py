"""Building a CPU model: every kernel compiled for the host into a :class:`CompiledModel`.

    prepared model ─► compile steps ─────────────────────────► CompiledModel
                      each kernel: its recipe, else its          kernels and host steps,
                      record's, else the default recipe          on ``threads`` threads
                      (:mod:`polytf.compiler.kernel_compilation`)

The CPU backend (:class:`polytf.compiler.backends.CpuBackend`) builds its models here; the
CUDA backend builds a :class:`~polytf.runtime.cuda.model.CudaModel` from the same compile
steps. ``polytf.load`` goes through :func:`polytf.compiler.loading.load_model`, which chooses
the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from polytf.compiler.code_cache import KernelCodeCache
from polytf.compiler.kernel_compilation import compile_steps
from polytf.compiler.prepared_model import PreparedModel
from polytf.compiler.recorded_recipes import CachedRecipe
from polytf.config import default_thread_count
from polytf.runtime.cpu.compiled_model import CompiledModel
from polytf.schedules.recipe import ScheduleRecipe
from polytf.storage.object_cache import ObjectCache
from polytf.targets.cpu import CpuTarget
from polytf.targets.target import CompiledKernel, Target

__all__ = ["build_model"]


def build_model(
    prepared: PreparedModel,
    recipes: Mapping[str, ScheduleRecipe] | None = None,
    target: Target | None = None,
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
    cached: Mapping[str, CachedRecipe] | None = None,
    objects: ObjectCache | None = None,
    given: Mapping[str, CompiledKernel] | None = None,
) -> CompiledModel:
    """Compile every kernel for the CPU (:func:`~polytf.compiler.kernel_compilation.compile_steps`)
    into a :class:`CompiledModel` on ``threads`` threads (default ``$POLYTF_THREADS`` or every
    CPU); ``target`` defaults to the host CPU. Kernels go through the compiled-code cache
    (:mod:`polytf.compiler.code_cache`): compiled once per distinct kernel, in parallel, and
    kept in ``objects`` (None: nothing kept on disk). Kernels in ``given`` (by name) are
    taken as they are (:func:`~polytf.compiler.kernel_compilation.compile_steps`).

    Raises:
        PolytfError: a recipe of ``recipes`` or a default recipe does not compile (with the
            kernel's name as context).
    """
    target = target or CpuTarget()
    threads = threads or default_thread_count()
    code_cache = KernelCodeCache(target, threads, objects) if isinstance(target, CpuTarget) and target.runs_here else None
    steps, tuned = compile_steps(prepared, recipes, target, threads, progress, cached, code_cache=code_cache, given=given)
    model = CompiledModel(prepared.graph, steps, threads)
    model.tuned_kernels = tuned
    return model
