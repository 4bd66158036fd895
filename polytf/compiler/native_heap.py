"""Giving the C heap's free pages back to the operating system after the compiler's front half.

Reading and preparing a model allocates and frees hundreds of megabytes of arrays of a few
hundred kilobytes to a few megabytes each (decoded weights, batch-norm-folded copies). glibc's
``malloc`` serves most of them from its heap once it has raised its mmap threshold (which it
does when the first such block is freed: ``mallopt(3)``, ``M_MMAP_THRESHOLD``), and a heap
keeps its free pages resident: on ResNet50 about 100 MB of free heap stayed in the resident set
after the graph passes and added to the peak of ``polytf.load``. ``malloc_trim(0)`` gives the
free pages back (``malloc_trim(3)``: all free chunks, not only the top of the heap, since
glibc 2.8). Only the process's resident set changes; no allocator setting is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["return_free_heap_memory"]


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    try:
        library = ctypes.CDLL(name) if name else ctypes.CDLL(None)
    except OSError:
        return None
    function = getattr(library, "malloc_trim", None)
    if function is not None:
        function.argtypes = [ctypes.c_size_t]
        function.restype = ctypes.c_int
    return function


def return_free_heap_memory() -> bool:
    """Give the C heap's free pages back to the operating system (module docstring); returns
    whether the C library could (glibc), False where it has no ``malloc_trim``. Takes a few
    milliseconds; the next allocations are served as before."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
