"""Backends: the one place that knows the kinds of target, and the record of one chosen once.

A :class:`Backend` is what the compiler driver, the tuner, the command line and the bench
need of a target, TVM's Builder/Runner split in one record (AutoTVM: Chen et al.,
"Learning to Optimize Tensor Programs", NeurIPS 2018; ``tvm.meta_schedule.builder`` and
``tvm.meta_schedule.runner``): the target (:class:`~polytf.targets.target.Target`: compiles kernels), the
thread count its cache keys, search spaces and measurements use, how a model of a
prepared graph is built (:meth:`Backend.build_model`: a
:class:`~polytf.runtime.model.Model`), how a compiled kernel is verified and timed
(:meth:`Backend.kernel_measurer`), and on the GPU the device backend the model runs on.
It is chosen once, by name (:func:`select_backend`: ``"cpu"`` or ``"cuda"``), and nothing
after that asks which device it runs on:

- :class:`CpuBackend`: a :class:`~polytf.targets.cpu.CpuTarget`, ``--threads`` threads
  (default: the CPUs), a :class:`~polytf.runtime.cpu.compiled_model.CompiledModel`, kernels
  measured by a :class:`~polytf.runtime.cpu.kernel_bench.KernelBench`, no device (this process);
- :class:`CudaBackend`: a :class:`~polytf.targets.cuda.CudaTarget`, :data:`CUDA_THREADS`
  whatever ``--threads`` says, a :class:`~polytf.runtime.cuda.model.CudaModel`, kernels
  measured by a :class:`~polytf.runtime.cuda.kernel_bench.CudaKernelBench`, the device
  backend CuPy on the current GPU or the CPU emulation.

``"cuda"`` needs CuPy and a device: asking for it without them is a
:class:`~polytf.errors.DependencyMissingError` that says what to install, checked before
any model is read. With ``POLYTF_CUDA_EMULATION=1``
(:data:`polytf.config.CUDA_EMULATION_ENVIRONMENT_VARIABLE`) it needs no GPU: the target is
the offline CUDA target and the device the CPU emulation
(:class:`~polytf.runtime.cuda.emulation.EmulatedDevice`). Cache keys carry the target's
fingerprint, so records of one target are never used for another.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from polytf.compiler.build_options import TARGET_NAMES, BuildOptions
from polytf.compiler.kernel_compilation import compile_steps
from polytf.compiler.model_builder import build_model
from polytf.compiler.prepared_model import PreparedModel
from polytf.compiler.recorded_recipes import CachedRecipe
from polytf.compiler.sliced_kernels import sliced_kernels
from polytf.config import CUDA_EMULATION_ENVIRONMENT_VARIABLE, CodegenConfig, MeasurementConfig, default_thread_count
from polytf.errors import DependencyMissingError, PolytfError
from polytf.poly.scop import Scop
from polytf.runtime.cpu.compiled_model import CompiledModel
from polytf.runtime.cpu.kernel_bench import KernelBench, Measurement
from polytf.runtime.cuda.backend import CUDA_INSTALL_HINT, CupyBackend, DeviceBackend
from polytf.runtime.cuda.emulation import EmulatedDevice
from polytf.runtime.cuda.kernel_bench import CudaKernelBench
from polytf.runtime.cuda.model import CudaModel
from polytf.runtime.model import Model
from polytf.schedules.recipe import ScheduleRecipe
from polytf.storage.object_cache import ObjectCache
from polytf.targets.cpu import CpuTarget
from polytf.targets.cuda import DEFAULT_COMPUTE_CAPABILITY, CudaTarget, cuda_available
from polytf.targets.kernel import Kernel
from polytf.targets.target import Target

__all__ = [
    "TARGET_NAMES",
    "CUDA_THREADS",
    "Backend",
    "CpuBackend",
    "CudaBackend",
    "KernelMeasurer",
    "select_backend",
    "backend_of_options",
    "backend_for",
    "select_target",
    "target_threads",
    "device_backend",
    "cuda_emulated",
    "cuda_unavailable_reason",
    "require_cuda",
]

#: The thread count GPU kernels are keyed, searched and measured with.
CUDA_THREADS = 1

#: ``measure(kernel, config, cutoff_s, timed)``: verify a compiled kernel against the
#: reference outputs, then (when ``timed``) time it (a warm-up call slower than
#: ``cutoff_s`` is the only one timed)
KernelMeasurer = Callable[[Kernel, MeasurementConfig, float, bool], Measurement]


@dataclass(frozen=True)
class Backend(abc.ABC):
    """A target and how to build, run and measure its code (module docstring).

    Attributes:
        target: compiles the kernels.
        threads: the thread count of the target's cache keys, search spaces and
            measurements.
        device: where the models and measurements run (the GPU's device backend; None on
            the CPU: this process).
        name: the target's name (:data:`TARGET_NAMES`): what a tuning worker process
            selects its own backend by.
        restarts_after_foreign_error: an error that is not polytf's own (a CUDA error: an
            illegal address) leaves the device unusable, so a tuning worker exits after one.
    """

    name: ClassVar[str] = "abstract"
    restarts_after_foreign_error: ClassVar[bool] = False

    target: Target
    threads: int
    device: DeviceBackend | None = None

    @abc.abstractmethod
    def build_model(
        self,
        prepared: PreparedModel,
        recipes: Mapping[str, ScheduleRecipe] | None = None,
        progress: Callable[[str], None] | None = None,
        cached: Mapping[str, CachedRecipe] | None = None,
        base: Model | None = None,
    ) -> Model:
        """Compile every kernel of ``prepared`` (its recipe in ``recipes``, else its record
        in ``cached``, else the default recipe: :func:`~polytf.compiler.kernel_compilation.compile_steps`)
        and build the model. ``base``: the same dynamic model built at a smaller batch size
        whose kernels a backend may run slice by slice instead of compiling some
        (:mod:`polytf.compiler.sliced_kernels`); a backend may ignore it.

        Raises:
            PolytfError: a recipe does not compile (with the kernel's name as context).
        """

    @abc.abstractmethod
    def kernel_measurer(self, scop: Scop, inputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> KernelMeasurer:
        """How the kernels of ``scop`` are measured on ``inputs`` against the reference
        outputs ``expected`` (in a tuning worker: :mod:`polytf.autotune.worker`)."""

    def with_threads(self, threads: int) -> Backend:
        """The backend for ``threads`` threads (the same on a GPU: :data:`CUDA_THREADS`)."""
        return dataclasses.replace(self, threads=int(threads))


@dataclass(frozen=True)
class CpuBackend(Backend):
    """This CPU: native kernels JIT-compiled into this process, run on ``threads`` threads.

    Attributes:
        objects: where compiled kernels are kept (:mod:`polytf.compiler.code_cache`); None
            keeps none on disk (``compile_cache=False``, ``POLYTF_NO_CODE_CACHE=1``).
    """

    name: ClassVar[str] = "cpu"
    objects: ObjectCache | None = None

    def build_model(self, prepared, recipes=None, progress=None, cached=None, base=None) -> Model:
        given = sliced_kernels(prepared, base, set(cached or ()) | set(recipes or ())) if isinstance(base, CompiledModel) else None
        return build_model(prepared, recipes, self.target, self.threads, progress, cached, self.objects, given)

    def kernel_measurer(self, scop, inputs, expected) -> KernelMeasurer:
        bench = KernelBench(scop=scop, inputs=inputs, expected=expected)
        threads = self.threads

        def measure(kernel: Kernel, config: MeasurementConfig, cutoff_s: float, timed: bool) -> Measurement:
            return bench.measure(kernel, threads, config, cutoff_s, timed)

        return measure


@dataclass(frozen=True)
class CudaBackend(Backend):
    """A CUDA GPU (or its CPU emulation): PTX kernels launched on ``device``, every tensor of
    a model in device memory, kernels timed with CUDA events."""

    name: ClassVar[str] = "cuda"
    restarts_after_foreign_error: ClassVar[bool] = True

    device: DeviceBackend

    def build_model(self, prepared, recipes=None, progress=None, cached=None, base=None) -> Model:
        steps, tuned = compile_steps(prepared, recipes, self.target, self.threads, progress, cached)
        model = CudaModel(prepared.graph, steps, self.device)
        model.tuned_kernels = tuned
        return model

    def kernel_measurer(self, scop, inputs, expected) -> KernelMeasurer:
        return CudaKernelBench(scop, inputs, expected, self.device).measure

    def with_threads(self, threads: int) -> Backend:
        return self


def cuda_emulated() -> bool:
    """Whether ``POLYTF_CUDA_EMULATION=1``: target ``cuda`` runs on the CPU emulation."""
    return os.environ.get(CUDA_EMULATION_ENVIRONMENT_VARIABLE, "") == "1"


def cuda_unavailable_reason() -> str | None:
    """Why the CUDA target cannot run here (``"CuPy is not installed"``, ``"CuPy finds no
    CUDA device"``...), or None when it can (a GPU, or :func:`cuda_emulated`)."""
    if cuda_emulated():
        return None
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed"
    try:
        available = cuda_available()
    except Exception as error:  # noqa: BLE001 - a broken CUDA installation is a reason, not a crash
        return f"CuPy cannot reach a CUDA device ({type(error).__name__}: {error})"
    return None if available else "CuPy finds no CUDA device (no NVIDIA GPU or driver here)"


def require_cuda() -> None:
    """Raise unless the CUDA target can run here.

    Raises:
        DependencyMissingError: no CuPy or no GPU; the message says why and what to do.
    """
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise DependencyMissingError(f"target 'cuda' needs CuPy and an NVIDIA GPU ({reason}): {CUDA_INSTALL_HINT}")


def select_target(name: str, codegen: CodegenConfig | None = None) -> Target:
    """The target called ``name`` (one of :data:`TARGET_NAMES`).

    Raises:
        DependencyMissingError: ``"cuda"`` without CuPy or a GPU.
        PolytfError: an unknown name.
    """
    if name == "cpu":
        return CpuTarget(codegen)
    if name == "cuda":
        require_cuda()
        if cuda_emulated():  # the offline device, even where CuPy sees a GPU: its records are never a GPU's
            return CudaTarget(compute_capability=DEFAULT_COMPUTE_CAPABILITY, config=codegen)
        return CudaTarget(config=codegen)
    raise PolytfError(f"unknown target {name!r}; choose one of {', '.join(TARGET_NAMES)}")


def device_backend() -> DeviceBackend:
    """Where CUDA kernels run: the current GPU through CuPy, or the CPU emulation when
    :func:`cuda_emulated`.

    Raises:
        DependencyMissingError: no CuPy (and no emulation).
    """
    return EmulatedDevice() if cuda_emulated() else CupyBackend()


def backend_for(target: Target, threads: int | None = None, device: DeviceBackend | None = None) -> Backend:
    """The backend of ``target``: a :class:`CudaBackend` on ``device`` (default
    :func:`device_backend`) for a CUDA target, else a :class:`CpuBackend` on ``threads``
    threads (default :func:`~polytf.config.default_thread_count`).

    Raises:
        DependencyMissingError: a CUDA target without ``device`` and without CuPy.
    """
    if isinstance(target, CudaTarget):
        return CudaBackend(target, CUDA_THREADS, device or device_backend())
    return CpuBackend(target, int(threads or default_thread_count()))


def select_backend(name: str, codegen: CodegenConfig | None = None, threads: int | None = None) -> Backend:
    """The backend called ``name`` (one of :data:`TARGET_NAMES`), chosen once: its target
    (:func:`select_target`), its thread count (``threads`` on the CPU, default the CPUs this
    process may use; :data:`CUDA_THREADS` on a GPU) and its device.

    Raises:
        DependencyMissingError: ``"cuda"`` without CuPy or a GPU (and without the emulation).
        PolytfError: an unknown name.
    """
    return backend_for(select_target(name, codegen), threads)


def backend_of_options(options: BuildOptions, codegen: CodegenConfig | None = None) -> Backend:
    """The backend ``options`` name (:func:`select_backend` with their target and thread count);
    on the CPU it keeps compiled kernels in the ``objects/`` folder of ``options.cache_dir``
    unless :meth:`BuildOptions.code_cache_enabled` says no (with ``--storage`` too: the
    database holds recipes only, compiled code is machine-local).

    Raises:
        DependencyMissingError: target ``"cuda"`` without CuPy or a GPU (and without the emulation).
    """
    backend = select_backend(options.target, codegen, options.thread_count())
    if isinstance(backend, CpuBackend) and options.code_cache_enabled():
        return dataclasses.replace(backend, objects=ObjectCache(options.cache_dir))
    return backend


def target_threads(target: Target, threads: int) -> int:
    """The thread count of ``target``'s keys, search spaces and measurements: ``threads`` on
    the CPU, :data:`CUDA_THREADS` on a GPU (what :attr:`Backend.threads` holds)."""
    return CUDA_THREADS if isinstance(target, CudaTarget) else int(threads)
