"""A device emulated on the CPU: the CUDA runtime without a GPU.

:class:`EmulatedDevice` implements :class:`~polytf.runtime.cuda.backend.DeviceBackend`
with host memory: its buffers are :class:`EmulatedDeviceArray` (numpy arrays of a subclass,
so that "the caller gave device arrays" can be told from "the caller gave numpy arrays"),
and a launch runs the kernel's Scop, scheduled with the same GPU recipe, compiled for the
host by :class:`~polytf.targets.cpu.CpuTarget`: the blocks and threads of the grid become
plain loops, barriers become nothing, shared-memory tiles become scratch arrays
(:mod:`polytf.schedules.gpu_mapping`). The results are those of the GPU kernel up to
floating-point reassociation, so a :class:`~polytf.runtime.cuda.model.CudaModel` on this
backend checks the model runtime (bindings, constants, host steps, views, outputs) and
the GPU mapping on any machine.

It counts what it does (:attr:`EmulatedDevice.counts`): uploads, downloads, launches,
allocations, so that tests can check, e.g., that a call on device arrays copies nothing
to the host.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from polytf.plan.buffers import aligned_empty
from polytf.runtime.cpu.argument_table import ArgumentTable
from polytf.runtime.cuda.backend import BUFFER_ALIGNMENT, DeviceBackend
from polytf.targets.cpu import CpuTarget
from polytf.targets.kernel import Kernel

__all__ = ["EmulatedDevice", "EmulatedDeviceArray"]


class EmulatedDeviceArray(np.ndarray):
    """A buffer of the emulated device (a numpy array of its own class)."""


class EmulatedDevice(DeviceBackend):
    """Host memory and CPU-compiled kernels standing in for a CUDA device.

    Args:
        target: the CPU target kernels are compiled with (default: the host's).

    Attributes:
        counts: ``"upload"``, ``"download"``, ``"launch"``, ``"allocate"``,
            ``"duplicate"`` -> how many of each so far.
    """

    name = "emulated"

    def __init__(self, target: CpuTarget | None = None) -> None:
        self.target = target or CpuTarget()
        self.counts: collections.Counter[str] = collections.Counter()
        self._compiled: dict[int, tuple[Any, Any]] = {}  # id(kernel) -> (kernel, its CPU build)
        self._lock = threading.Lock()

    @staticmethod
    def _buffer(shape: Sequence[int], dtype: str) -> EmulatedDeviceArray:
        return aligned_empty(tuple(int(d) for d in shape), dtype).view(EmulatedDeviceArray)

    def is_device_array(self, value: object) -> bool:
        return isinstance(value, EmulatedDeviceArray)

    def to_device(self, array: np.ndarray) -> EmulatedDeviceArray:
        """A caller's "device array": what ``cupy.asarray(array)`` is on a GPU (counted as an upload)."""
        return self.upload(array)

    def allocate(self, shape: Sequence[int], dtype: str, zeroed: bool = False) -> EmulatedDeviceArray:
        self.counts["allocate"] += 1
        buffer = self._buffer(shape, dtype)
        if zeroed:
            buffer[...] = 0
        return buffer

    def upload(self, array: np.ndarray) -> EmulatedDeviceArray:
        self.counts["upload"] += 1
        array = np.asarray(array)
        buffer = self._buffer(array.shape, array.dtype.name)
        buffer[...] = array
        return buffer

    def upload_into(self, buffer: Any, array: np.ndarray) -> None:
        self.counts["upload"] += 1
        buffer.reshape(-1)[...] = np.asarray(array).reshape(-1)

    def download(self, buffer: Any) -> np.ndarray:
        self.counts["download"] += 1
        return np.array(buffer, copy=True, subok=False)

    def duplicate(self, buffer: Any) -> EmulatedDeviceArray:
        self.counts["duplicate"] += 1
        copy = self._buffer(buffer.shape, buffer.dtype.name)
        copy[...] = buffer
        return copy

    def adopt(self, value: Any) -> Any:
        if value.flags.c_contiguous and value.ctypes.data % BUFFER_ALIGNMENT == 0:
            return value
        return self.duplicate(np.ascontiguousarray(value))

    def cpu_kernel(self, kernel: Kernel) -> Kernel:
        """``kernel``'s Scop and GPU recipe compiled for the host (once per kernel object)."""
        with self._lock:
            entry = self._compiled.get(id(kernel))
            if entry is None or entry[0] is not kernel:
                entry = (kernel, self.target.compile(kernel.scop, kernel.recipe))
                self._compiled[id(kernel)] = entry
        return entry[1]

    def run_kernel(self, kernel: Kernel, buffers: Sequence[Any]) -> None:
        """Run the CPU build of ``kernel`` on ``buffers`` (``kernel.arrays`` order); its
        shared-memory tiles get fresh scratch arrays (one block's, reused by every block of
        the loop that stands for the grid)."""
        self.counts["launch"] += 1
        compiled = self.cpu_kernel(kernel)
        table = ArgumentTable(compiled)
        for info, buffer in zip(kernel.arrays, buffers):
            table.bind(table.slot(info.name), buffer)
        table.allocate_unbound()
        table.run(1)

    def fence(self) -> None:
        return None

    def wait(self, fence: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def elapsed_s(self, run: Callable[[], None]) -> float:
        begin = time.perf_counter()
        run()
        return time.perf_counter() - begin

    def describe(self) -> str:
        return f"emulated on the CPU ({self.target.cpu_name})"
