"""A kernel at batch size ``N`` run as a kernel compiled for a smaller batch size ``b``, once
per slice of ``b`` samples (:mod:`polytf.poly.sample_slicing` says when that is exact).

    arrays of the kernel at N ──► run k = 0 .. N/b - 1 of the kernel at b, on
    (sizes of N)                  each sliced array's address + k * its slice's bytes
                                  (weights: the same address every run; a scratch array
                                  the code writes: the copy of the thread running it)

The result is a :class:`~polytf.targets.target.CompiledKernel` of the Scop at ``N``: its
argument table (:mod:`polytf.runtime.cpu.argument_table`) checks every buffer against the
sizes at ``N``, and the model plans, packs and binds it as any other kernel. Its recipe and
weight packings are the base kernel's (the packed panels are read the same by every run),
its scratch arrays the base's with one copy per thread. No isl or LLVM work: a dynamic model
reaches a new batch size by building its graph, not by compiling.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import replace

from polytf.plan.binding_plan import arrays_read_ahead_only, scratch_written_whole
from polytf.poly.access_bounds import array_bytes
from polytf.poly.sample_slicing import SampleSlicing
from polytf.poly.scop import Scop
from polytf.targets.cpu import CpuTarget
from polytf.targets.target import CompiledKernel

__all__ = ["SampleLoop", "sliced_kernel"]


class SampleLoop:
    """``f(table, threads)`` running a kernel once per slice, each run on the table's addresses
    moved on by the slice's bytes (``strides``, one per argument; a NULL address, an argument
    the code never reads, stays NULL) and, on thread ``t``, by ``t`` times ``thread_strides``
    (the copy of each shared array the runs write that is that thread's).

    The kernel's slices entry point (``<kernel>_slices``: :mod:`polytf.targets.llvm_codegen`)
    runs every slice in one call and one parallel region, on at most ``copies`` threads; a
    kernel without one (code cached before kernels had it) is called once per slice from
    here, on the first copy.

    Attributes:
        function: the base kernel's ``void f(void** arrays, int64 threads)``.
        strides: bytes per slice of each argument.
        thread_strides: bytes per thread of each argument (0 but for the shared written ones).
        count: slices (runs of the kernel).
        copies: the threads the shared written arrays have copies for.
        slices: the base kernel's slices entry, or None.
    """

    def __init__(self, function, strides: Sequence[int], count: int, slices=None, thread_strides: Sequence[int] = (), copies: int = 1) -> None:
        self.function = function
        self.strides = tuple(int(stride) for stride in strides)
        self.thread_strides = tuple(int(stride) for stride in thread_strides) or (0,) * len(self.strides)
        self.count = int(count)
        self.copies = max(1, int(copies))
        self.slices = slices
        self._stride_table = (ctypes.c_int64 * len(self.strides))(*self.strides)
        self._thread_stride_table = (ctypes.c_int64 * len(self.strides))(*self.thread_strides)
        self._table_type = ctypes.c_void_p * len(self.strides)

    def __call__(self, table: ctypes.Array, threads: int) -> None:
        if self.slices is not None:
            self.slices(table, min(int(threads), self.copies), self.count, self._stride_table, self._thread_stride_table)
            return
        addresses = list(table)
        for index in range(self.count):
            moved = [None if address is None else address + index * stride for address, stride in zip(addresses, self.strides)]
            self.function(self._table_type(*moved), threads)


def sliced_kernel(base: CompiledKernel, scop: Scop, slicing: SampleSlicing, threads: int = 1) -> CompiledKernel:
    """The kernel of ``scop`` (batch size ``N``) as ``base`` (the same kernel compiled at a
    batch size ``b``) run on ``slicing.count`` slices, on up to ``threads`` threads.

    Each scratch array the base kernel's code writes (a zero-padded or im2col copy; not the
    weights its constant copies pack ahead of time, which the runs only read) gets one copy
    per thread: its :class:`~polytf.poly.scop.ArrayInfo` becomes ``[threads, *shape]``, so
    that the model's buffer plan gives it room (and zeroes it) as any scratch array.

    Args:
        base: the kernel compiled for the smaller size.
        scop: the kernel's Scop at the larger size.
        slicing: :func:`polytf.poly.sample_slicing.sample_slicing` of ``scop`` and ``base.scop``.
        threads: the most threads the kernel will be called with.

    Raises:
        ValueError: ``slicing`` does not give one stride per array of ``scop``.
    """
    if len(slicing.strides) != len(scop.arrays) or len(scop.arrays) != len(base.scop.arrays):
        raise ValueError(f"kernel {scop.name}: {len(slicing.strides)} strides for {len(scop.arrays)} arrays")
    threads = max(1, int(threads))
    packed = {copy.write.array for copy in base.constant_copies}  # written before the first call, then only read
    scratch, thread_strides = [], [0] * len(scop.arrays)
    for info in base.scratch_arrays:
        if info.name in packed or threads == 1:
            scratch.append(info)
            thread_strides.append(0)
        else:
            scratch.append(replace(info, shape=(threads, *info.shape)))
            thread_strides.append(array_bytes(info))
    strides = slicing.strides + (0,) * len(base.scratch_arrays)
    extents = [needed + (slicing.count - 1) * stride + (threads - 1) * copy for needed, stride, copy in zip(base.argument_bytes, strides, thread_strides)]
    return CompiledKernel(
        scop=scop,
        recipe=base.recipe,
        function=SampleLoop(base.function, strides, slicing.count, CpuTarget.slices_function(base.owner, base.symbol), thread_strides, threads),
        arrays=tuple(scop.arrays) + tuple(scratch),
        argument_bytes=tuple(extents),
        llvm_ir=base.llvm_ir,
        owner=base,  # the base's code (and its JIT engine) lives as long as this kernel
        constant_copies=base.constant_copies,
        # facts of the base's code (the plan would work them out from this kernel's Scop and
        # the base's recipe: another code)
        inputs_read_ahead_only=base.inputs_read_ahead_only if base.inputs_read_ahead_only is not None else arrays_read_ahead_only(base),
        scratch_written_whole=base.scratch_written_whole if base.scratch_written_whole is not None else scratch_written_whole(base),
    )
