"""Device backends: the operations a CUDA model needs from a device, behind one interface.

:class:`~polytf.runtime.cuda.model.CudaModel` and the CUDA tuning worker never call CuPy
themselves; they allocate, copy, launch and time through a :class:`DeviceBackend`:

==================  ==================================================================
operation           CuPy (:class:`CupyBackend`)
==================  ==================================================================
allocate            ``cupy.empty`` / ``cupy.zeros`` (the device's memory pool)
upload              ``cupy.asarray`` (host -> device, a new buffer), ``ndarray.set``
download            ``cupy.asnumpy`` (device -> host; waits for the stream)
launch              ``CudaKernel(buffers)`` (grid, block, dynamic shared memory)
fence / wait        ``cupy.cuda.Event.record`` / ``Stream.wait_event``
elapsed_s           a ``cupy.cuda.Event`` pair, ``cupy.cuda.get_elapsed_time``
==================  ==================================================================

:class:`polytf.runtime.cuda.emulation.EmulatedDevice` implements the same interface on
the CPU (numpy buffers; kernels compiled from the same Scop and GPU recipe with the CPU
target), so that every line of the model runtime runs in the default test suite.

Buffers are array objects with ``shape``, ``dtype``, ``nbytes``, ``flags.c_contiguous``
and ``reshape`` (``cupy.ndarray``, or numpy arrays for the emulation). CuPy is imported
when a :class:`CupyBackend` is made, never before (``import polytf`` works without it).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from polytf.errors import DependencyMissingError, ShapeError
from polytf.targets.nvptx_codegen import ARGUMENT_ALIGNMENT

__all__ = ["DeviceBackend", "CupyBackend", "import_cupy", "CUDA_INSTALL_HINT", "BUFFER_ALIGNMENT"]

#: Every buffer a GPU kernel takes starts on a multiple of this many bytes (its pointer
#: parameters carry ``align``: 128-bit loads and stores)
BUFFER_ALIGNMENT = ARGUMENT_ALIGNMENT
#: What to do when CuPy or a GPU is missing (in every such message).
CUDA_INSTALL_HINT = "install cupy-cuda12x and run on a machine with an NVIDIA GPU (pip install 'polytf[cuda]' installs CuPy)"


def import_cupy() -> Any:
    """The ``cupy`` module.

    Raises:
        DependencyMissingError: CuPy is not installed (says what to install).
    """
    try:
        import cupy
    except ImportError as error:
        raise DependencyMissingError(f"the CUDA runtime needs CuPy ({error}); {CUDA_INSTALL_HINT}") from None
    return cupy


class DeviceBackend(abc.ABC):
    """Memory, copies, launches and timing on one device (module docstring).

    Attributes:
        name: short name for reports (``"cupy"``, ``"emulated"``).
    """

    name: str = "abstract"

    @abc.abstractmethod
    def is_device_array(self, value: object) -> bool:
        """Whether ``value`` is a buffer of this backend's kind (a caller's device array)."""

    @abc.abstractmethod
    def allocate(self, shape: Sequence[int], dtype: str, zeroed: bool = False) -> Any:
        """A new C-contiguous device buffer of ``shape`` and ``dtype`` (zero-filled when
        ``zeroed``, else uninitialised)."""

    @abc.abstractmethod
    def upload(self, array: np.ndarray) -> Any:
        """A new device buffer holding a copy of the host array ``array`` (same shape and dtype)."""

    @abc.abstractmethod
    def upload_into(self, buffer: Any, array: np.ndarray) -> None:
        """Copy the host array ``array`` into the device buffer ``buffer`` (same number of
        bytes); ``array`` may be reused as soon as this returns."""

    @abc.abstractmethod
    def download(self, buffer: Any) -> np.ndarray:
        """A host copy of ``buffer`` (waits until the work queued before it is done)."""

    @abc.abstractmethod
    def duplicate(self, buffer: Any) -> Any:
        """A new device buffer with the contents of ``buffer`` (a device-to-device copy)."""

    @abc.abstractmethod
    def adopt(self, value: Any) -> Any:
        """The caller's device array ``value`` as a C-contiguous buffer on this backend's
        device, starting on a multiple of :data:`BUFFER_ALIGNMENT` bytes (kernels load 128
        bits at a time): ``value`` itself when it already is one, else a device copy (a
        slice that starts mid-row, say).

        Raises:
            ShapeError: ``value`` lives on another device.
        """

    @abc.abstractmethod
    def run_kernel(self, kernel: Any, buffers: Sequence[Any]) -> None:
        """Launch ``kernel`` on ``buffers`` (``kernel.arrays`` order), asynchronously.
        Called only by :class:`~polytf.runtime.cuda.argument_table.CudaArgumentTable`, after it
        has checked every buffer."""

    @abc.abstractmethod
    def fence(self) -> Any:
        """A marker of the work queued so far on the current stream (None when the backend
        runs everything in order)."""

    @abc.abstractmethod
    def wait(self, fence: Any) -> None:
        """Make the work queued from now on wait until ``fence`` (from :meth:`fence`) is reached."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait until every queued operation has finished."""

    @abc.abstractmethod
    def elapsed_s(self, run: Callable[[], None]) -> float:
        """Device seconds between the start and the end of the work ``run()`` queues."""

    def flush_caches(self) -> None:
        """Evict the device's caches before a timed launch (default: nothing to flush)."""

    def describe(self) -> str:
        """The backend and its device, for reports."""
        return self.name


class CupyBackend(DeviceBackend):
    """A CUDA device through CuPy.

    Args:
        device_id: CUDA device ordinal (default: CuPy's current device).

    Raises:
        DependencyMissingError: CuPy is not installed.
    """

    name = "cupy"

    def __init__(self, device_id: int | None = None) -> None:
        self.cupy = import_cupy()
        self.device_id = int(self.cupy.cuda.runtime.getDevice() if device_id is None else device_id)
        self.device = self.cupy.cuda.Device(self.device_id)
        self._flush_buffer = None

    def is_device_array(self, value: object) -> bool:
        return isinstance(value, self.cupy.ndarray)

    def allocate(self, shape: Sequence[int], dtype: str, zeroed: bool = False) -> Any:
        with self.device:
            make = self.cupy.zeros if zeroed else self.cupy.empty
            return make(tuple(int(d) for d in shape), dtype=np.dtype(dtype))

    def upload(self, array: np.ndarray) -> Any:
        with self.device:
            return self.cupy.array(np.ascontiguousarray(array), copy=True)

    def upload_into(self, buffer: Any, array: np.ndarray) -> None:
        with self.device:
            buffer.reshape(-1).set(np.ascontiguousarray(array).reshape(-1))

    def download(self, buffer: Any) -> np.ndarray:
        with self.device:
            return self.cupy.asnumpy(buffer)

    def duplicate(self, buffer: Any) -> Any:
        with self.device:
            return buffer.copy()

    def adopt(self, value: Any) -> Any:
        if value.device.id != self.device_id:
            raise ShapeError(f"a CuPy array on device {value.device.id} was given to a model on device {self.device_id}; copy it there first")
        if value.flags.c_contiguous and value.data.ptr % BUFFER_ALIGNMENT == 0:
            return value
        with self.device:
            return value.copy(order="C")  # a new allocation of the memory pool: 256-byte aligned

    def run_kernel(self, kernel: Any, buffers: Sequence[Any]) -> None:
        with self.device:
            kernel(buffers)

    def fence(self) -> Any:
        with self.device:
            event = self.cupy.cuda.Event(disable_timing=True)
            event.record()
            return event

    def wait(self, fence: Any) -> None:
        if fence is not None:
            with self.device:
                self.cupy.cuda.get_current_stream().wait_event(fence)

    def synchronize(self) -> None:
        with self.device:
            self.cupy.cuda.get_current_stream().synchronize()

    def elapsed_s(self, run: Callable[[], None]) -> float:
        with self.device:
            start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
            start.record()
            run()
            end.record()
            end.synchronize()
            return self.cupy.cuda.get_elapsed_time(start, end) / 1e3  # milliseconds -> seconds

    def flush_caches(self) -> None:
        """Overwrite a buffer of twice the device's L2 cache size (not timed: call it before
        :meth:`elapsed_s`), so a timed kernel finds its operands in device memory, as it does
        inside a model whose other layers used the cache."""
        with self.device:
            if self._flush_buffer is None:
                l2_bytes = int(self.cupy.cuda.runtime.getDeviceProperties(self.device_id).get("l2CacheSize", 0)) or 64 << 20
                self._flush_buffer = self.cupy.empty(2 * l2_bytes, dtype=np.uint8)
            self._flush_buffer.fill(0)

    def describe(self) -> str:
        properties = self.cupy.cuda.runtime.getDeviceProperties(self.device_id)
        name = properties["name"].decode() if isinstance(properties["name"], bytes) else str(properties["name"])
        return f"CuPy {self.cupy.__version__} on device {self.device_id} ({name})"
