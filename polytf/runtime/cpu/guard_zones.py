"""Guard zones: arrays with a filled margin on each side, checked after a kernel ran.

A candidate whose code writes outside its arrays may still compute the right outputs, and
a write into a neighbouring heap block is only noticed later, by whatever allocates next: a
tuning worker that aborts on ``malloc(): corrupted top size`` when given its next kernel
(as one did in a DenseNet121 tuning, cause not found) says nothing of the candidate that
did it. The tuning bench
(:class:`polytf.runtime.cpu.kernel_bench.KernelBench`) therefore hands every array a kernel
writes or reads (its arguments and its scratch) inside a larger allocation whose
``GUARD_BYTES`` before and after it are filled with ``FILL``; after the verified call,
:meth:`GuardedArrays.violation` names the first array whose margin changed, and the
candidate fails with that cause instead of corrupting the worker. This is the check
AddressSanitizer's redzones and Electric Fence's guard pages make, kept to what numpy can
do: a write further than ``GUARD_BYTES`` away is not caught, nor is a read.

The data of each array starts on a 64-byte boundary, as :func:`polytf.plan.buffers.aligned_empty`'s.
"""

from __future__ import annotations

import numpy as np

from polytf.plan.buffers import ALIGNMENT_BYTES

__all__ = ["FILL", "GUARD_BYTES", "GuardedArrays"]

#: bytes of margin on each side of an array (a multiple of the 64-byte alignment)
GUARD_BYTES = 4096
#: the byte the margins are filled with (0xA5A5A5A5 is neither a common float nor integer)
FILL = 0xA5


class GuardedArrays:
    """Allocates arrays with guard zones and checks the zones.

    Each array is a view into a ``uint8`` allocation of ``GUARD_BYTES`` + its bytes +
    ``GUARD_BYTES`` (plus up to 63 bytes to align its start).
    """

    def __init__(self) -> None:
        self._zones: list[tuple[str, np.ndarray, np.ndarray]] = []  # (name, before, after)

    def empty(self, name: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` and ``dtype`` between two guard
        zones; ``name`` is what :meth:`violation` calls it."""
        dtype_ = np.dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64)) * dtype_.itemsize  # a scalar's shape () makes 1 element
        raw = np.empty(GUARD_BYTES + size + GUARD_BYTES + ALIGNMENT_BYTES, dtype=np.uint8)
        start = GUARD_BYTES + (-(raw.ctypes.data + GUARD_BYTES)) % ALIGNMENT_BYTES
        before, after = raw[start - GUARD_BYTES : start], raw[start + size : start + size + GUARD_BYTES]
        before[...] = FILL
        after[...] = FILL
        self._zones.append((name, before, after))
        return raw[start : start + size].view(dtype_).reshape(shape)

    def zeros(self, name: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """Like :meth:`empty`, zero-filled."""
        array = self.empty(name, shape, dtype)
        array[...] = 0
        return array

    def copy(self, name: str, value: np.ndarray, dtype: str) -> np.ndarray:
        """Like :meth:`empty`, holding ``value`` (converted to ``dtype``)."""
        array = self.empty(name, tuple(np.shape(value)), dtype)
        array[...] = value
        return array

    def allocate(self, name: str, shape: tuple[int, ...], dtype: str, zeroed: bool) -> np.ndarray:
        """:meth:`zeros` or :meth:`empty`: the allocator that
        :meth:`polytf.runtime.cpu.argument_table.ArgumentTable.allocate_unbound` takes."""
        return self.zeros(name, shape, dtype) if zeroed else self.empty(name, shape, dtype)

    def violation(self) -> str | None:
        """The first write outside an array, as ``"wrote outside array NAME: N bytes changed
        up to K bytes past its end"`` (or ``before its start``), or None. The zones are
        refilled, so a later check sees only later writes."""
        for name, before, after in self._zones:
            for zone, side in ((before, "before its start"), (after, "past its end")):
                changed = np.flatnonzero(zone != FILL)
                if changed.size:
                    reach = (GUARD_BYTES - int(changed[0])) if zone is before else int(changed[-1]) + 1
                    zone[...] = FILL
                    return f"wrote outside array {name}: {changed.size} bytes changed up to {reach} bytes {side}"
        return None
