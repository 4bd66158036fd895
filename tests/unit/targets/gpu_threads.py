"""The GPU kernel's own code run on CPU threads: one OS thread per CUDA thread of a block.

:class:`HostThreadModuleBuilder` is the NVPTX code generator
(:class:`polytf.targets.nvptx_codegen.NvptxModuleBuilder`: mapped loops bound to
block/thread ids, guards on instances whose mapped loop isl dropped, barriers, shared
arrays at aligned offsets) retargeted to the host: the ids come from an argument, shared
memory is a per-block buffer (private arrays stay on each thread's stack), and a barrier calls back into Python, where a
``threading.Barrier`` holds the block's threads. :func:`run_on_threads` runs a scheduled
kernel block by block, with shared memory filled with NaN first (a read before the copy
shows in the result). Tests use it to check the GPU code's semantics without a GPU.
"""

from __future__ import annotations

import ctypes
import itertools
import threading

import llvmlite.ir as ir
import numpy as np

from polytf.config import MeasurementConfig
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.builder import ScheduledScop, build_ast, schedule_scop
from polytf.targets.cpu import CpuTarget
from polytf.targets.llvm_codegen import I8_POINTER
from polytf.targets.nvptx_codegen import NvptxModuleBuilder
from polytf.targets.statement_codegen import I64, MEMORY_TYPES

BARRIER = ctypes.CFUNCTYPE(None)
KERNEL = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64), BARRIER)


class HostThreadModuleBuilder(NvptxModuleBuilder):
    """``void k(i8** arrays, i64* ids, void (*barrier)())``: ``arrays`` holds every array of
    the scheduled Scop (shared ones included), ``ids`` is (bx, by, bz, tx, ty, tz)."""

    def _kernel_function(self, name: str) -> ir.Function:
        barrier_type = ir.FunctionType(ir.VoidType(), []).as_pointer()
        function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I8_POINTER.as_pointer(), I64.as_pointer(), barrier_type]), name=name)
        self._table, self._ids, self._barrier = function.args
        return function

    def _read_hardware(self, entry: ir.IRBuilder, function: ir.Function) -> None:
        for index, key in enumerate(itertools.product(("block", "thread"), "xyz")):
            self._hardware[key] = entry.load(entry.gep(self._ids, [ir.Constant(I64, index)]))
        for index, array in enumerate(self.scop.arrays):
            pointer = entry.load(entry.gep(self._table, [ir.Constant(I64, index)]))
            self.pointers[array.name] = entry.bitcast(pointer, MEMORY_TYPES[array.dtype].as_pointer())

    def _bind_shared(self, entry: ir.IRBuilder, function: ir.Function) -> None:
        pass  # shared arrays are table entries

    def _emit_barrier(self) -> None:
        self.builder.call(self._barrier, [])


def run_on_threads(scheduled: ScheduledScop, arrays: dict[str, np.ndarray], target: CpuTarget | None = None) -> None:
    """Run the GPU code of ``scheduled`` (a GPU recipe's) on ``arrays`` (name -> array, every
    global array of the Scop), block after block, each block's threads as OS threads."""
    target = target or CpuTarget()
    launch = scheduled.launch
    builder = HostThreadModuleBuilder(scheduled.scop, build_ast(scheduled.schedule), launch, unroll=scheduled.recipe.unroll)
    module = builder.build()
    module.triple = target.triple
    module.data_layout = str(target.target_machine.target_data)
    # global scratch (a zero-padded copy written by a prologue launch) lives across launches
    arrays = dict(arrays)
    for info in scheduled.scop.arrays:
        if info.name not in arrays and info.name not in launch.shared_arrays:
            arrays[info.name] = np.full(info.shape, np.nan, np.float32)
    engines = []
    for _, phase, name in builder.phases():
        address, engine = target.compile_function(str(module), name)
        engines.append(engine)
        _run_launch(KERNEL(address), phase, scheduled, arrays)
    del engines


def _run_launch(kernel, launch, scheduled: ScheduledScop, arrays: dict[str, np.ndarray]) -> None:
    for block in itertools.product(*(range(n) for n in launch.grid)):
        # shared memory: per block, NaN until copied (a private array's table entry is unused: it lives on the stack)
        buffers = [np.full(a.shape, np.nan, np.float32) if a.name in scheduled.launch.shared_arrays else arrays[a.name] for a in scheduled.scop.arrays]
        table = (ctypes.c_void_p * len(buffers))(*(b.ctypes.data for b in buffers))
        threads = list(itertools.product(*(range(n) for n in launch.block)))
        barrier = threading.Barrier(len(threads))
        callback = BARRIER(lambda: barrier.wait(timeout=10))
        failures: list[BaseException] = []

        def run(thread, block=block, table=table, callback=callback):
            ids = (ctypes.c_int64 * 6)(*block, *thread)
            try:
                kernel(table, ids, callback)
            except BaseException as error:  # pragma: no cover - reported below
                failures.append(error)

        workers = [threading.Thread(target=run, args=(t,)) for t in threads]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert not failures, failures


def verify_on_threads(kernel, recipe, seed: int = 3) -> float:
    """Schedule ``kernel`` (a lowered kernel) with GPU ``recipe``, run its GPU code on threads
    over the seeded bench inputs (outputs NaN-filled first) and return the max abs error
    against the reference; raises AssertionError when outside the measurement tolerance."""
    config = MeasurementConfig(rtol=1e-4, atol_scale=1e-5)
    scheduled = schedule_scop(kernel.scop, recipe)
    bench = KernelBench(kernel, seed=seed)
    arrays = {info.name: bench.arrays[bench.index[info.name]] for info in kernel.scop.arrays}
    for info in kernel.scop.arrays:
        if info.role != "input":
            arrays[info.name][...] = np.nan if info.dtype == "float32" else 0
    run_on_threads(scheduled, arrays)
    worst = 0.0
    for name, expected in bench.expected.items():
        actual = arrays[name]
        if actual.dtype.kind != "f":
            assert np.array_equal(actual, expected), f"{recipe.describe()}: output {name} differs"
            continue
        scale = float(np.max(np.abs(expected), where=np.isfinite(expected), initial=0.0))
        np.testing.assert_allclose(actual, expected, rtol=config.rtol, atol=config.atol_scale * scale + 1e-6, err_msg=recipe.describe())
        worst = max(worst, float(np.nanmax(np.abs(actual - expected), initial=0.0)))
    return worst
