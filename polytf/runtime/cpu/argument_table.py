"""ArgumentTable: the one place where buffers are handed to native code.

A compiled kernel is ``void f(void** arrays, int64 threads)``; ``arrays[i]`` must point
to a buffer of at least ``kernel.argument_bytes[i]`` bytes (the access relations of the
scheduled kernel stay inside that, :mod:`polytf.poly.access_bounds`). Every address in
a table is written by :meth:`ArgumentTable.bind`, which checks the array first, and
:meth:`ArgumentTable.run` refuses to call the kernel while a slot is unbound. A table
keeps a reference to each bound array, so no buffer can be freed while a table points
at it.

Tables are not shared between threads: each execution context
(:mod:`polytf.runtime.cpu.execution_context`) and each tuning measurement has its own.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from polytf.errors import ShapeError
from polytf.plan.buffers import aligned_empty, aligned_zeros
from polytf.targets.target import CompiledKernel

#: what :meth:`ArgumentTable.bind_unread` records for a slot: bound, with no array
_UNREAD = np.empty(0, np.uint8)


def _aligned_buffer(name: str, shape: tuple[int, ...], dtype: str, zeroed: bool) -> np.ndarray:
    """:meth:`ArgumentTable.allocate_unbound`'s default allocator: a 64-byte aligned buffer,
    zero-filled when ``zeroed`` (``name`` is not needed)."""
    return aligned_zeros(shape, dtype) if zeroed else aligned_empty(shape, dtype)


class ArgumentTable:
    """The ``void*[]`` argument table of one kernel, with checked bindings.

    Args:
        kernel: the compiled kernel; its ``arrays`` give the slots.

    Attributes:
        kernel: the kernel this table is for.
        pointers: the ctypes ``void*`` array passed to native code.
    """

    def __init__(self, kernel: CompiledKernel) -> None:
        self.kernel = kernel
        self.pointers = (ctypes.c_void_p * len(kernel.arrays))()
        self._bound: list[np.ndarray | None] = [None] * len(kernel.arrays)
        self._slots = {info.name: slot for slot, info in enumerate(kernel.arrays)}
        self._dtypes = tuple(np.dtype(info.dtype) for info in kernel.arrays)
        self._unbound = len(kernel.arrays)  # slots without an array: the kernel may not run

    def slot(self, array_name: str) -> int:
        """The slot of the kernel's array ``array_name`` (e.g. ``"A0"``)."""
        return self._slots[array_name]

    def bind(self, slot: int, array: np.ndarray) -> None:
        """Point ``slot`` at ``array`` after checking that the kernel may use it.

        Args:
            slot: index into ``kernel.arrays``.
            array: a C-contiguous numpy array of the slot's dtype and at least the slot's
                ``argument_bytes``.

        Raises:
            ShapeError: the array is not C-contiguous, has another dtype, or is smaller than
                the kernel's access relations require.
        """
        # one combined test on the hot path (it runs for every caller-provided array on every call)
        if (
            not isinstance(array, np.ndarray)
            or not array.flags.c_contiguous
            or array.dtype != self._dtypes[slot]
            or array.nbytes < self.kernel.argument_bytes[slot]
        ):
            self._refuse(slot, array)
        if self._bound[slot] is None:
            self._unbound -= 1
        self._bound[slot] = array
        self.pointers[slot] = array.ctypes.data

    def _refuse(self, slot: int, array: object) -> None:
        """Raise the ShapeError saying why ``array`` cannot be bound to ``slot``."""
        info = self.kernel.arrays[slot]
        where = f"kernel {self.kernel.scop.name}: array {info.name} ({info.tensor or info.role})"
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            raise ShapeError(f"{where} must be a C-contiguous numpy array")
        if array.dtype != self._dtypes[slot]:
            raise ShapeError(f"{where} has dtype {array.dtype}, the kernel takes {info.dtype}")
        raise ShapeError(
            f"{where} holds {array.nbytes} bytes, the kernel's accesses need {self.kernel.argument_bytes[slot]} (shape {list(info.shape)})"
        )

    def bind_unread(self, slot: int) -> None:
        """Mark ``slot`` as an argument the kernel's code never reads (a constant only its
        copies packed ahead of time read: :func:`polytf.plan.binding_plan.arrays_read_ahead_only`):
        its pointer is NULL, so a read of it would fault rather than return wrong values."""
        if self._bound[slot] is None:
            self._unbound -= 1
        self._bound[slot] = _UNREAD
        self.pointers[slot] = None

    def unbind(self, slot: int) -> None:
        """Clear ``slot`` (the kernel cannot run until it is bound again)."""
        if self._bound[slot] is not None:
            self._unbound += 1
        self._bound[slot] = None
        self.pointers[slot] = None

    def allocate_scratch(self) -> None:
        """Bind fresh zero-filled buffers to the kernel's scratch arrays (packed panels,
        zero-padded and im2col copies)."""
        first = len(self.kernel.scop.arrays)
        for offset, info in enumerate(self.kernel.scratch_arrays):
            self.bind(first + offset, aligned_zeros(info.shape, info.dtype))

    def allocate_unbound(self, allocate: Callable[[str, tuple[int, ...], str, bool], np.ndarray] | None = None) -> None:
        """Bind a fresh 64-byte aligned buffer to every slot still unbound (zero-filled for a
        scratch array). ``allocate(name, shape, dtype, zeroed)`` makes the buffers instead
        when given (the tuning bench's guard zones: :mod:`polytf.runtime.cpu.guard_zones`)."""
        allocate = allocate or _aligned_buffer
        for slot, info in enumerate(self.kernel.arrays):
            if self._bound[slot] is None:
                self.bind(slot, allocate(info.name, tuple(info.shape), info.dtype, info.role == "scratch"))

    def bound_arrays(self) -> tuple[np.ndarray, ...]:
        """Every array bound now, slot order (what one call of the kernel may touch)."""
        return tuple(array for array in self._bound if array is not None and array is not _UNREAD)

    def array(self, slot: int) -> np.ndarray | None:
        """The array bound to ``slot`` (None when unbound or unread)."""
        array = self._bound[slot]
        return None if array is _UNREAD else array

    def run(self, threads: int) -> None:
        """Call the kernel once on the bound arrays (releases the GIL while it runs).

        Raises:
            ShapeError: a slot has no array bound.
        """
        if self._unbound:
            missing = [self.kernel.arrays[slot].name for slot, array in enumerate(self._bound) if array is None]
            raise ShapeError(f"kernel {self.kernel.scop.name}: arrays {missing} are not bound")
        self.kernel.function(self.pointers, int(threads))


__all__ = ["ArgumentTable"]
