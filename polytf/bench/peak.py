"""The host's float32 peak, measured: what a fraction of the machine a kernel reaches is taken of.

An FMA-throughput loop is generated as LLVM IR for the target (llvmlite), compiled with the
target's own pipeline (:meth:`polytf.targets.cpu.CpuTarget.optimise`) and run on ``threads``
Python threads at once (ctypes releases the GIL, so the calls run in parallel):

.. code-block:: text

    acc[0..A) = x                                  A = 3/4 of the vector registers
    for i in 0..N:                                 independent chains hide the FMA latency
        acc[a] = fma(acc[a], x, y)   for every a   <lanes x float> each: llvm.fma.v{lanes}f32
    out = sum(acc)                                 stored, so nothing is optimised away

One call executes ``lanes · 2 · A · N`` float32 operations (an FMA is a multiply and an add).
With enough chains the loop is bound by the FMA ports alone: the figure is the machine's
sustained vector FMA throughput at the clock it holds under that load (AVX-512 code may run at
a lower clock than scalar code).

Source: the throughput method of Agner Fog's instruction tables and of Intel's "Intel 64 and
IA-32 Architectures Optimization Reference Manual" (independent dependency chains, at least
latency × throughput of them).
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from polytf.errors import PolytfError

__all__ = ["PeakMeasurement", "measure_fp32_peak", "fma_peak_ir", "accumulator_count", "FUNCTION_NAME"]

#: Name of the generated function: ``void fma_peak(float *inputs, float *output, i64 iterations)``.
FUNCTION_NAME = "fma_peak"
_FUNCTION_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
#: Loop trips of the first, calibrating call.
_CALIBRATION_ITERATIONS = 1 << 14


@dataclass(frozen=True)
class PeakMeasurement:
    """The measured float32 peak of the host.

    Attributes:
        gflops: total GFLOP/s of all threads (10^9 float32 operations per second; an FMA counts 2).
        threads: threads that ran the loop at once.
        vector_lanes: float32 lanes of each FMA (16 with AVX-512, 8 with AVX2).
        cpu_name: LLVM CPU name the loop was compiled for (e.g. ``"znver4"``).
        seconds: wall time of the best repeat (all threads), seconds.
        accumulators: independent accumulator chains per thread.
        iterations: loop trips per call.
    """

    gflops: float
    threads: int
    vector_lanes: int
    cpu_name: str
    seconds: float
    accumulators: int = 0
    iterations: int = 0

    @property
    def gflops_per_thread(self) -> float:
        return self.gflops / self.threads

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (as :func:`dataclasses.asdict`)."""
        return asdict(self)


def accumulator_count(vector_registers: int) -> int:
    """Independent chains: 3/4 of the vector registers (12 of 16 ymm, 24 of 32 zmm) — more
    than FMA latency × FMA ports (4 × 2 = 8 on recent x86 cores), leaving registers for the
    multiplicands."""
    return max(2, vector_registers * 3 // 4)


def fma_peak_ir(lanes: int, accumulators: int) -> ir.Module:
    """The FMA-throughput loop as an LLVM module (see the module docstring).

    ``void fma_peak(float *inputs, float *output, i64 iterations)``: ``inputs`` holds ``x`` and
    ``y`` (``2·lanes`` floats), ``output`` receives the ``lanes`` sums; ``iterations >= 1``.

    Args:
        lanes: float32 lanes of a vector (4, 8 or 16).
        accumulators: independent accumulator chains.
    """
    if lanes < 1 or accumulators < 1:
        raise PolytfError(f"an FMA loop needs positive lanes and accumulators, not {lanes} and {accumulators}")
    vector = ir.VectorType(ir.FloatType(), lanes)
    i64 = ir.IntType(64)
    module = ir.Module(name="fp32_peak")
    fma = ir.Function(module, ir.FunctionType(vector, [vector, vector, vector]), name=f"llvm.fma.v{lanes}f32")
    function = ir.Function(
        module, ir.FunctionType(ir.VoidType(), [ir.FloatType().as_pointer(), ir.FloatType().as_pointer(), i64]), name=FUNCTION_NAME
    )
    inputs, output, iterations = function.args
    entry, loop, done = (function.append_basic_block(name) for name in ("entry", "loop", "done"))

    builder = ir.IRBuilder(entry)
    vector_inputs = builder.bitcast(inputs, vector.as_pointer())
    x = builder.load(vector_inputs, align=4)
    y = builder.load(builder.gep(vector_inputs, [ir.Constant(i64, 1)]), align=4)
    builder.branch(loop)

    builder.position_at_end(loop)
    counter = builder.phi(i64, name="i")
    chains = [builder.phi(vector, name=f"acc{a}") for a in range(accumulators)]
    updated = [builder.call(fma, [chain, x, y]) for chain in chains]
    following = builder.add(counter, ir.Constant(i64, 1))
    builder.cbranch(builder.icmp_signed(">=", following, iterations), done, loop)
    counter.add_incoming(ir.Constant(i64, 0), entry)
    counter.add_incoming(following, loop)
    for chain, value in zip(chains, updated):
        chain.add_incoming(x, entry)
        chain.add_incoming(value, loop)

    builder.position_at_end(done)
    total = updated[0]
    for value in updated[1:]:
        total = builder.fadd(total, value)
    builder.store(total, builder.bitcast(output, vector.as_pointer()), align=4)
    builder.ret_void()
    return module


class _FmaLoop:
    """The compiled loop: the JIT engine (kept alive) and its entry point."""

    def __init__(self, target: Any, lanes: int, accumulators: int) -> None:
        self.lanes = lanes
        module = fma_peak_ir(lanes, accumulators)
        module.triple = target.triple
        module.data_layout = str(target.target_machine.target_data)
        address, self.engine = target.compile_function(str(module), FUNCTION_NAME)
        self.function = _FUNCTION_TYPE(address)

    def run(self, threads: int, iterations: int) -> float:
        """Wall seconds of ``threads`` simultaneous calls, from the first start to the last end."""
        inputs = [np.array([0.999999] * self.lanes + [1e-6] * self.lanes, dtype=np.float32) for _ in range(threads)]
        outputs = [np.zeros(self.lanes * 16, dtype=np.float32) for _ in range(threads)]  # apart: no false sharing
        starts, ends = [0.0] * threads, [0.0] * threads
        barrier = threading.Barrier(threads)

        def call(index: int) -> None:
            barrier.wait()
            starts[index] = time.perf_counter()
            self.function(inputs[index].ctypes.data, outputs[index].ctypes.data, iterations)
            ends[index] = time.perf_counter()

        workers = [threading.Thread(target=call, args=(index,), daemon=True) for index in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if not all(np.isfinite(output[: self.lanes]).all() for output in outputs):
            raise PolytfError("the FMA peak loop produced a non-finite sum (a polytf bug)")
        return max(ends) - min(starts)


def measure_fp32_peak(threads: int, target: Any = None, duration_s: float = 0.1, repeats: int = 3) -> PeakMeasurement:
    """Measure the float32 FMA peak of ``threads`` threads running at once.

    The loop trip count is calibrated so that one call takes about ``duration_s``; the figure is
    the best of ``repeats`` runs: ``threads · lanes · 2 · accumulators · iterations / seconds``.

    Args:
        threads: threads calling the loop at once (>= 1); each runs its own call.
        target: a :class:`polytf.targets.cpu.CpuTarget` (default: the host); its
            ``vector_lanes`` and ``vector_registers`` shape the loop.
        duration_s: wall time of one timed run, seconds (> 0).
        repeats: timed runs (>= 1); the fastest counts.

    Returns:
        A :class:`PeakMeasurement` (GFLOP/s = 10^9 float32 operations per second).

    Raises:
        PolytfError: ``threads``, ``duration_s`` or ``repeats`` out of range.
        CompileError: LLVM could not compile the loop.
    """
    if threads < 1 or repeats < 1 or not duration_s > 0:
        raise PolytfError(f"peak measurement needs threads >= 1, repeats >= 1 and duration_s > 0, not {threads}, {repeats}, {duration_s}")
    if target is None:
        from polytf.targets.cpu import CpuTarget

        target = CpuTarget()
    lanes, accumulators = int(target.vector_lanes), accumulator_count(int(target.vector_registers))
    loop = _FmaLoop(target, lanes, accumulators)
    iterations = _CALIBRATION_ITERATIONS
    calibration_s = loop.run(1, iterations)
    while calibration_s < duration_s / 8:  # long enough that thread start-up does not count
        iterations *= 4
        calibration_s = loop.run(1, iterations)
    iterations = max(1, int(iterations * duration_s / calibration_s))
    loop.run(threads, max(1, iterations // 4))  # warm-up: clocks settle under vector load
    best_s = min(loop.run(threads, iterations) for _ in range(repeats))
    operations = threads * lanes * 2 * accumulators * iterations
    return PeakMeasurement(
        gflops=operations / best_s / 1e9,
        threads=int(threads),
        vector_lanes=lanes,
        cpu_name=str(target.cpu_name),
        seconds=best_s,
        accumulators=accumulators,
        iterations=iterations,
    )
