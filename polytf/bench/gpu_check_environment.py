"""What the GPU check ran on: the device, and the versions of everything that made its code.

:func:`describe_gpu` reads the current CUDA device through CuPy (name, compute capability,
SMs, clock, memory, driver and runtime versions, FP32 peak without tensor cores);
:func:`describe_emulated_device` says what ``--dry-run`` stands in for it with (the offline
CUDA target of :mod:`polytf.targets.cuda` and the CPU it emulates the device on).
:func:`package_versions` lists the versions of Python and of the packages polytf's code
generation, tests and baselines use (``None``: not installed).
"""

from __future__ import annotations

import dataclasses
import platform
from importlib import metadata
from typing import Any

__all__ = ["describe_gpu", "describe_emulated_device", "package_versions", "llvmlite_too_old", "MINIMUM_LLVMLITE"]

#: The oldest llvmlite whose NVPTX back end emits a PTX ISA the Hopper chips accept (0.44
#: writes ``.version 3.2`` for sm_90; pyproject.toml pins ``llvmlite>=0.45`` for it).
MINIMUM_LLVMLITE = (0, 45)
_PACKAGES = ("numpy", "llvmlite", "islpy", "optuna", "platformdirs", "protobuf", "cupy-cuda13x", "cupy-cuda12x", "torch", "pytest", "hypothesis")


def package_versions() -> dict[str, str | None]:
    """Python's and each package's version (``None`` where it is not installed), with LLVM's."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        import llvmlite.binding as llvm

        versions["llvm"] = ".".join(map(str, llvm.llvm_version_info))
    except ImportError:
        versions["llvm"] = None
    from polytf.version import __version__

    versions["polytf"] = __version__
    return versions


def _device_fields(device) -> dict[str, Any]:
    """A :class:`~polytf.targets.cuda.CudaDevice`'s fields and its FP32 peak in TFLOP/s."""
    return {**dataclasses.asdict(device), "fp32_peak_tflops": device.fp32_peak_flops / 1e12}


def describe_gpu() -> dict[str, Any]:
    """The current CUDA device (CuPy): its fields, memory in GiB, cuDNN's version (PyTorch's).

    Raises:
        CompileError: CuPy is missing or sees no device.
    """
    import cupy

    from polytf.targets.cuda import CudaDevice

    description = _device_fields(CudaDevice.current())
    free, total = cupy.cuda.runtime.memGetInfo()
    description.update(memory_gib=total / 2**30, free_memory_gib=free / 2**30, emulated=False)
    try:
        import torch

        description["cudnn_version"] = torch.backends.cudnn.version()
    except ImportError:
        description["cudnn_version"] = None
    return description


def describe_emulated_device() -> dict[str, Any]:
    """The offline sm_90 CUDA device the dry run compiles for, and the CPU that runs it."""
    from polytf.targets.cpu import CpuTarget
    from polytf.targets.cuda import CudaTarget

    description = _device_fields(CudaTarget(compute_capability="sm_90").device)
    description.update(emulated=True, emulated_on=f"LLVM CPU {CpuTarget().cpu_name}, {platform.machine()}")
    return description


def llvmlite_too_old(version: str | None) -> bool:
    """Whether llvmlite ``version`` cannot emit PTX the GPU takes (None: not installed)."""
    if version is None:
        return True
    parts = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    return parts < MINIMUM_LLVMLITE
