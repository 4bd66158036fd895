"""Choosing a target by name (``polytf.load(..., target="cuda")``, ``--target cuda``).

``"cpu"`` is the host CPU (:class:`~polytf.targets.cpu.CpuTarget`); ``"cuda"`` the current
NVIDIA GPU through CuPy (:class:`polytf.targets.cuda.CudaTarget`), which needs CuPy and a
device: asking for it without them is a :class:`~polytf.errors.DependencyMissingError`
that says what to install, checked before any model is read.

Cache keys carry the target's fingerprint, so records of one target are never used for
another. A GPU kernel's code and timing do not depend on the host's thread count: its
keys, search spaces and measurements use :data:`GPU_THREADS` whatever ``--threads`` says.

With ``POLYTF_CUDA_EMULATION=1`` (:data:`polytf.config.CUDA_EMULATION_ENVIRONMENT_VARIABLE`)
``"cuda"`` needs no GPU: the target is the offline CUDA target and :func:`device_backend`
the CPU emulation of the device (:class:`~polytf.runtime.cuda.emulated_device.EmulatedDevice`).
"""

from __future__ import annotations

import importlib.util
import os

from polytf.config import CUDA_EMULATION_ENVIRONMENT_VARIABLE, CodegenConfig
from polytf.errors import DependencyMissingError, PolytfError
from polytf.runtime.cuda.device_backend import CUDA_INSTALL_HINT, DeviceBackend
from polytf.targets.target import Target

__all__ = [
    "TARGET_NAMES",
    "GPU_THREADS",
    "select_target",
    "cuda_unavailable_reason",
    "require_cuda",
    "cuda_emulated",
    "device_backend",
    "is_gpu_target",
    "target_threads",
]

#: Target names ``polytf.load``, ``polytf.tune`` and ``--target`` accept.
TARGET_NAMES = ("cpu", "cuda")
#: The thread count GPU kernels are keyed, searched and measured with.
GPU_THREADS = 1


def cuda_emulated() -> bool:
    """Whether ``POLYTF_CUDA_EMULATION=1``: target ``cuda`` runs on the CPU emulation."""
    return os.environ.get(CUDA_EMULATION_ENVIRONMENT_VARIABLE, "") == "1"


def cuda_unavailable_reason() -> str | None:
    """Why the CUDA target cannot run here (``"CuPy is not installed"``, ``"CuPy finds no
    CUDA device"``...), or None when it can (a GPU, or :func:`cuda_emulated`)."""
    if cuda_emulated():
        return None
    try:
        from polytf.targets.cuda import cuda_available
    except ImportError as error:
        return f"this polytf has no CUDA target ({error})"
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
        from polytf.targets.cpu import CpuTarget

        return CpuTarget(codegen)
    if name == "cuda":
        require_cuda()
        from polytf.targets.cuda import DEFAULT_COMPUTE_CAPABILITY, CudaTarget

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
    if cuda_emulated():
        from polytf.runtime.cuda.emulated_device import EmulatedDevice

        return EmulatedDevice()
    from polytf.runtime.cuda.device_backend import CupyBackend

    return CupyBackend()


def is_gpu_target(target: Target) -> bool:
    """Whether ``target`` compiles GPU kernels (which a :class:`~polytf.runtime.cuda.cuda_model.CudaModel` runs)."""
    return target.name == "cuda"


def target_threads(target: Target, threads: int) -> int:
    """The thread count of ``target``'s keys, search spaces and measurements: ``threads`` on
    the CPU, :data:`GPU_THREADS` on a GPU."""
    return GPU_THREADS if is_gpu_target(target) else int(threads)
