"""Evicting a kernel's arrays from every cache level, so that it can be timed with cold caches.

Inside a model, a kernel rarely finds its weights in the caches: every other layer's weights
and activations passed through them since its last call. Timed alone and repeatedly, the
same kernel keeps its operands in L1/L2 and looks faster than it runs in the model, and a
recipe that wins hot may lose in the model. TVM therefore flushes the CPU caches before each
timed call of a candidate (``enable_cpu_cache_flush``, which runs ``clflush`` over the
arguments); polytf does the same with a generated function:

.. code-block:: text

    void cache_flush(i8 *address, i64 bytes):
        for (offset = 0; offset < bytes; offset += 64)   64: the x86 cache line
            clflush(address + offset)                   llvm.x86.sse2.clflush
        mfence()                                        llvm.x86.sse2.mfence: flushes done

``clflush`` writes a line back if it is dirty and invalidates it in every cache of the
coherence domain (Intel 64 and IA-32 Architectures Software Developer's Manual, vol. 2A,
CLFLUSH). On a target without it (not x86-64) the caches are evicted by reading and writing
a buffer twice the size of the last-level cache the target reports instead.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterable
from functools import lru_cache

import numpy as np
from llvmlite import ir

from polytf.targets.cpu import CpuTarget

__all__ = ["CacheFlusher", "cache_flusher", "cache_flush_ir", "FUNCTION_NAME", "CACHE_LINE_BYTES"]

#: Name of the generated function: ``void cache_flush(i8 *address, i64 bytes)``.
FUNCTION_NAME = "cache_flush"
#: Bytes between two ``clflush`` addresses: the cache line of every x86-64 CPU.
CACHE_LINE_BYTES = 64
_FUNCTION_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)


def cache_flush_ir() -> ir.Module:
    """The LLVM module of ``cache_flush`` (x86-64 only: it calls ``llvm.x86.sse2.clflush``)."""
    module = ir.Module(name=FUNCTION_NAME)
    byte_pointer = ir.IntType(8).as_pointer()
    i64 = ir.IntType(64)
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [byte_pointer, i64]), name=FUNCTION_NAME)
    address, size = function.args
    clflush = ir.Function(module, ir.FunctionType(ir.VoidType(), [byte_pointer]), name="llvm.x86.sse2.clflush")
    mfence = ir.Function(module, ir.FunctionType(ir.VoidType(), []), name="llvm.x86.sse2.mfence")
    entry = function.append_basic_block("entry")
    loop = function.append_basic_block("loop")
    done = function.append_basic_block("done")
    builder = ir.IRBuilder(entry)
    builder.cbranch(builder.icmp_signed(">", size, ir.Constant(i64, 0)), loop, done)
    builder.position_at_end(loop)
    offset = builder.phi(i64, name="offset")
    offset.add_incoming(ir.Constant(i64, 0), entry)
    builder.call(clflush, [builder.gep(address, [offset])])
    following = builder.add(offset, ir.Constant(i64, CACHE_LINE_BYTES))
    offset.add_incoming(following, loop)
    builder.cbranch(builder.icmp_signed("<", following, size), loop, done)
    builder.position_at_end(done)
    builder.call(mfence, [])
    builder.ret_void()
    return module


class CacheFlusher:
    """Evicts arrays from the caches of the host (see the module).

    Args:
        target: a :class:`polytf.targets.cpu.CpuTarget` for the host; it compiles
            ``cache_flush`` (x86-64) or gives the last-level cache size for the fallback.
    """

    def __init__(self, target) -> None:
        self.uses_clflush = str(target.triple).startswith("x86_64")
        self._engine = None
        self._sweep: np.ndarray | None = None
        if self.uses_clflush:
            module = cache_flush_ir()
            module.triple = target.triple
            module.data_layout = str(target.target_machine.target_data)
            address, self._engine = target.compile_function(str(module), FUNCTION_NAME)
            self._function = _FUNCTION_TYPE(address)
        else:
            caches = target.cache_sizes
            largest = max(caches.l1_bytes, caches.l2_bytes, caches.l3_bytes or 0)
            self._sweep = np.zeros(2 * largest // 4 + 1, dtype=np.float32)

    def flush(self, arrays: Iterable[np.ndarray]) -> None:
        """Write back and evict every cache line of ``arrays`` (C-contiguous numpy arrays)."""
        if not self.uses_clflush:
            self._sweep += 1.0  # reads and writes twice the last-level cache
            return
        for array in arrays:
            if array is not None and array.nbytes:
                self._function(array.ctypes.data, array.nbytes)


_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _host_flusher() -> CacheFlusher:
    return CacheFlusher(CpuTarget())


def cache_flusher() -> CacheFlusher:
    """The host's flusher, compiled once per process."""
    with _LOCK:
        return _host_flusher()
