"""CudaArgumentTable: the one place where device buffers are handed to a GPU kernel.

The CUDA twin of :class:`~polytf.runtime.cpu.argument_table.ArgumentTable`. A GPU
kernel (:class:`polytf.targets.cuda.CudaKernel`) takes one global-memory pointer per
entry of ``kernel.arrays`` (its shared-memory tiles are not arguments); buffer ``i`` must
be a C-contiguous device array of ``arrays[i].dtype`` with at least
``kernel.argument_bytes[i]`` bytes, starting on a multiple of 16 bytes, since the kernel's accesses stay inside that
(:func:`polytf.poly.access_bounds.required_bytes`) and nothing on the device checks them.
Every buffer is checked when it is bound (:meth:`CudaArgumentTable.bind`), and
:meth:`CudaArgumentTable.launch` refuses to launch while a slot is unbound. The table
keeps a reference to each bound buffer, so none is freed while a launch may use it.

Tables are not shared between threads: each execution context
(:mod:`polytf.runtime.cuda.execution_context`) and each tuning measurement has its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polytf.errors import ShapeError
from polytf.runtime.cuda.backend import BUFFER_ALIGNMENT, DeviceBackend
from polytf.targets.cuda import CudaKernel, buffer_address

__all__ = ["CudaArgumentTable"]


class CudaArgumentTable:
    """The checked argument table of one GPU kernel.

    Args:
        kernel: the compiled kernel (``scop``, ``arrays``, ``argument_bytes``).
        backend: the device its buffers live on and its launches go to.
    """

    def __init__(self, kernel: CudaKernel, backend: DeviceBackend) -> None:
        self.kernel = kernel
        self.backend = backend
        self._bound: list[Any] = [None] * len(kernel.arrays)
        self._slots = {info.name: slot for slot, info in enumerate(kernel.arrays)}
        self._dtypes = tuple(np.dtype(info.dtype) for info in kernel.arrays)
        self._unbound = len(kernel.arrays)

    def slot(self, array_name: str) -> int:
        """The slot of the kernel's array ``array_name`` (e.g. ``"A0"``)."""
        return self._slots[array_name]

    def bind(self, slot: int, buffer: Any) -> None:
        """Point ``slot`` at ``buffer`` after checking that the kernel may use it.

        Raises:
            ShapeError: not a device buffer of this backend, not C-contiguous, another
                dtype, or fewer bytes than the kernel's accesses need (names the kernel,
                the array and its tensor).
        """
        if (
            not self.backend.is_device_array(buffer)
            or not buffer.flags.c_contiguous
            or buffer.dtype != self._dtypes[slot]
            or buffer.nbytes < self.kernel.argument_bytes[slot]
            or buffer_address(buffer) % BUFFER_ALIGNMENT
        ):
            self._refuse(slot, buffer)
        if self._bound[slot] is None:
            self._unbound -= 1
        self._bound[slot] = buffer

    def _refuse(self, slot: int, buffer: Any) -> None:
        info = self.kernel.arrays[slot]
        where = f"kernel {self.kernel.scop.name}: array {info.name} ({info.tensor or info.role})"
        if not self.backend.is_device_array(buffer):
            raise ShapeError(f"{where} must be a device array of the {self.backend.name} backend, not {type(buffer).__name__}")
        if not buffer.flags.c_contiguous:
            raise ShapeError(f"{where} must be a C-contiguous device array")
        if buffer.dtype != self._dtypes[slot]:
            raise ShapeError(f"{where} has dtype {buffer.dtype}, the kernel takes {info.dtype}")
        if buffer_address(buffer) % BUFFER_ALIGNMENT:
            raise ShapeError(f"{where} starts at {buffer_address(buffer):#x}, not a multiple of {BUFFER_ALIGNMENT} bytes (the kernel loads 128 bits at a time)")
        raise ShapeError(f"{where} holds {buffer.nbytes} bytes, the kernel's accesses need {self.kernel.argument_bytes[slot]} (shape {list(info.shape)})")

    def unbind(self, slot: int) -> None:
        """Clear ``slot`` (the kernel cannot be launched until it is bound again)."""
        if self._bound[slot] is not None:
            self._unbound += 1
        self._bound[slot] = None

    def allocate_unbound(self) -> None:
        """Bind a new device buffer to every slot still unbound (kernel temporaries; scratch
        arrays zero-filled)."""
        for slot, info in enumerate(self.kernel.arrays):
            if self._bound[slot] is None:
                self.bind(slot, self.backend.allocate(info.shape, info.dtype, zeroed=info.role == "scratch"))

    def array(self, slot: int) -> Any:
        """The buffer bound to ``slot`` (None when unbound)."""
        return self._bound[slot]

    def bound_arrays(self) -> tuple[Any, ...]:
        """Every buffer bound now, slot order."""
        return tuple(buffer for buffer in self._bound if buffer is not None)

    def launch(self) -> None:
        """Launch the kernel once on the bound buffers (asynchronously on the device).

        Raises:
            ShapeError: a slot has no buffer bound.
        """
        if self._unbound:
            missing = [self.kernel.arrays[slot].name for slot, buffer in enumerate(self._bound) if buffer is None]
            raise ShapeError(f"kernel {self.kernel.scop.name}: arrays {missing} are not bound")
        self.backend.run_kernel(self.kernel, self._bound)
