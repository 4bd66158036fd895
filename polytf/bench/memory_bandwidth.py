"""The host's memory bandwidth, measured: what a memory-bound kernel's bytes per second are taken of.

John McCalpin's STREAM triad (STREAM benchmark, "Sustainable Memory Bandwidth in Current
High Performance Computers", 1995; https://www.cs.virginia.edu/stream/) generated as LLVM
IR for the target (llvmlite), compiled with the target's own pipeline
(:meth:`polytf.targets.cpu.CpuTarget.optimise`) and run on ``threads`` OpenMP threads the way
polytf's parallel kernels run (libgomp's ``GOMP_parallel``, :mod:`polytf.targets.llvm_codegen`):

.. code-block:: text

    GOMP_parallel(worker, {a, b, c, n, s}, threads)
    worker:  t = omp_get_thread_num(), T = omp_get_num_threads()
             chunk = ceil(n / (T * lanes)) * lanes                 whole vectors per thread
             for i in [t * chunk, min(n, (t + 1) * chunk)) step lanes:
                 a[i:i+lanes] = b[i:i+lanes] + s * c[i:i+lanes]   <lanes x float>, llvm.fma

Each array is at least four times the last-level cache (STREAM's rule), so every call
streams all three arrays from and to memory. Bytes are counted as STREAM counts them: 3
arrays x 4 bytes per float32 element per call (read ``b``, read ``c``, write ``a``); the
write-allocate read of ``a`` that ordinary stores cause is **not** counted (the memory
traffic is 4/3 of the counted bytes), as in STREAM's own report. The figure is the best of
``repeats`` calls, as STREAM reports the best time.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from polytf.errors import PolytfError
from polytf.plan.buffers import aligned_empty

__all__ = ["BandwidthMeasurement", "measure_memory_bandwidth", "stream_triad_ir", "triad_elements", "FUNCTION_NAME"]

#: Name of the generated entry: ``void stream_triad(float *a, float *b, float *c, i64 elements, float scalar, i64 threads)``.
FUNCTION_NAME = "stream_triad"
_FUNCTION_TYPE = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int64
)
#: The triad's scalar (STREAM uses 3.0).
SCALAR = 3.0
#: STREAM's rule: each array at least this many times the last-level cache.
CACHE_MULTIPLE = 4
#: Arrays of at least this many bytes whatever the caches say (STREAM's minimum is 10^7 elements of 8 bytes).
MINIMUM_ARRAY_BYTES = 32 * 1024 * 1024
#: Bytes counted per element and call: read b, read c, write a (write-allocate not counted).
COUNTED_BYTES_PER_ELEMENT = 3 * 4


@dataclass(frozen=True)
class BandwidthMeasurement:
    """The measured memory bandwidth of the host (STREAM triad).

    Attributes:
        gb_per_s: counted bytes per second of all threads, 10^9 bytes/s (3 x 4 bytes per
            element: write-allocate traffic not counted, as STREAM).
        threads: OpenMP threads of the triad.
        vector_lanes: float32 lanes of each load, FMA and store.
        cpu_name: LLVM CPU name the triad was compiled for (e.g. ``"znver3"``).
        seconds: wall time of the best call, seconds.
        array_bytes: bytes of each of the three arrays.
        write_allocate_counted: always False: the figure counts what STREAM counts.
    """

    gb_per_s: float
    threads: int
    vector_lanes: int
    cpu_name: str
    seconds: float
    array_bytes: int
    write_allocate_counted: bool = False

    @property
    def counted_bytes(self) -> int:
        """Bytes one call counts: three arrays."""
        return 3 * self.array_bytes

    def describe(self) -> str:
        """``"14.2 GB/s memory bandwidth on 2 threads (STREAM triad on <8 x float>, 3 x 128 MiB arrays, ...)"``."""
        return (
            f"{self.gb_per_s:.1f} GB/s memory bandwidth on {self.threads} thread{'s' if self.threads != 1 else ''} "
            f"(STREAM triad on <{self.vector_lanes} x float>, 3 x {self.array_bytes / 2**20:.0f} MiB arrays, "
            f"write-allocate not counted, LLVM CPU {self.cpu_name})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (as :func:`dataclasses.asdict`)."""
        return asdict(self)


def triad_elements(last_level_cache_bytes: int, lanes: int) -> int:
    """float32 elements of each array: ``CACHE_MULTIPLE`` x the last-level cache, at least
    :data:`MINIMUM_ARRAY_BYTES`, rounded up to whole vectors."""
    elements = max(CACHE_MULTIPLE * int(last_level_cache_bytes), MINIMUM_ARRAY_BYTES) // 4
    return -(-elements // lanes) * lanes


def stream_triad_ir(lanes: int) -> ir.Module:
    """The triad as an LLVM module (see the module docstring).

    ``void stream_triad(float *a, float *b, float *c, i64 elements, float scalar, i64 threads)``:
    ``a[i] = b[i] + scalar * c[i]`` for ``i < elements``; ``elements`` a multiple of
    ``lanes``; ``threads > 1`` runs it on that many OpenMP threads, each on a contiguous
    chunk of whole vectors (OpenMP's static schedule).

    Args:
        lanes: float32 lanes of a vector (4, 8 or 16).

    Raises:
        PolytfError: ``lanes`` below 1.
    """
    if lanes < 1:
        raise PolytfError(f"a STREAM triad needs positive vector lanes, not {lanes}")
    f32, i32, i64, i8_pointer = ir.FloatType(), ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()
    f32_pointer = f32.as_pointer()
    vector = ir.VectorType(f32, lanes)
    module = ir.Module(name="stream_triad")
    fma = ir.Function(module, ir.FunctionType(vector, [vector, vector, vector]), name=f"llvm.fma.v{lanes}f32")

    # the loop over one thread's chunk: triad_body(a, b, c, elements, scalar, thread, threads)
    body = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [f32_pointer, f32_pointer, f32_pointer, i64, f32, i64, i64]),
        name=f"{FUNCTION_NAME}_body",
    )
    body.linkage = "internal"
    for argument in body.args[:3]:
        argument.add_attribute("noalias")
    a, b, c, elements, scalar, thread, threads = body.args
    entry, loop, done = (body.append_basic_block(name) for name in ("entry", "loop", "done"))
    builder = ir.IRBuilder(entry)
    vectors = builder.udiv(elements, ir.Constant(i64, lanes))
    per_thread = builder.udiv(builder.add(vectors, builder.sub(threads, ir.Constant(i64, 1))), threads)
    start = builder.mul(builder.mul(thread, per_thread), ir.Constant(i64, lanes))
    end = builder.mul(builder.mul(builder.add(thread, ir.Constant(i64, 1)), per_thread), ir.Constant(i64, lanes))
    end = builder.select(builder.icmp_signed("<", end, elements), end, elements)
    splat = builder.insert_element(ir.Constant(vector, ir.Undefined), scalar, ir.Constant(i32, 0))
    splat = builder.shuffle_vector(splat, ir.Constant(vector, ir.Undefined), ir.Constant(ir.VectorType(i32, lanes), [0] * lanes))
    builder.cbranch(builder.icmp_signed("<", start, end), loop, done)
    builder.position_at_end(loop)
    index = builder.phi(i64, name="i")
    index.add_incoming(start, entry)

    def vector_at(pointer: ir.Value) -> ir.Value:
        return builder.bitcast(builder.gep(pointer, [index], inbounds=True), vector.as_pointer())

    value = builder.call(fma, [builder.load(vector_at(c), align=4), splat, builder.load(vector_at(b), align=4)])
    builder.store(value, vector_at(a), align=4)
    following = builder.add(index, ir.Constant(i64, lanes), flags=["nsw"])
    index.add_incoming(following, loop)
    builder.cbranch(builder.icmp_signed("<", following, end), loop, done)
    builder.position_at_end(done)
    builder.ret_void()

    # the worker every OpenMP thread runs: reads the arguments from a record
    record = ir.LiteralStructType([f32_pointer, f32_pointer, f32_pointer, i64, f32])
    worker = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8_pointer]), name=f"{FUNCTION_NAME}_worker")
    worker.linkage = "internal"
    builder = ir.IRBuilder(worker.append_basic_block("entry"))
    fields = builder.bitcast(worker.args[0], record.as_pointer())
    loaded = [builder.load(builder.gep(fields, [ir.Constant(i32, 0), ir.Constant(i32, k)])) for k in range(5)]
    get_thread = ir.Function(module, ir.FunctionType(i32, []), name="omp_get_thread_num")
    get_threads = ir.Function(module, ir.FunctionType(i32, []), name="omp_get_num_threads")
    builder.call(
        body, [*loaded, builder.sext(builder.call(get_thread, []), i64), builder.sext(builder.call(get_threads, []), i64)]
    )
    builder.ret_void()

    # the entry: one thread runs the body itself, more go through GOMP_parallel
    function = ir.Function(
        module, ir.FunctionType(ir.VoidType(), [f32_pointer, f32_pointer, f32_pointer, i64, f32, i64]), name=FUNCTION_NAME
    )
    a, b, c, elements, scalar, threads = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    gomp_parallel = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [ir.FunctionType(ir.VoidType(), [i8_pointer]).as_pointer(), i8_pointer, i32, i32]),
        name="GOMP_parallel",
    )
    with builder.if_else(builder.icmp_signed("<=", threads, ir.Constant(i64, 1))) as (single, parallel):
        with single:
            builder.call(body, [a, b, c, elements, scalar, ir.Constant(i64, 0), ir.Constant(i64, 1)])
        with parallel:
            slot = builder.alloca(record)
            for k, value in enumerate((a, b, c, elements, scalar)):
                builder.store(value, builder.gep(slot, [ir.Constant(i32, 0), ir.Constant(i32, k)]))
            builder.call(
                gomp_parallel, [worker, builder.bitcast(slot, i8_pointer), builder.trunc(threads, i32), ir.Constant(i32, 0)]
            )
    builder.ret_void()
    return module


class StreamTriad:
    """The compiled triad: the JIT engine (kept alive) and its entry point.

    Args:
        target: a :class:`polytf.targets.cpu.CpuTarget` that runs here (default: the host).

    Raises:
        CompileError: LLVM could not compile the triad.
        PolytfError: threads requested but libgomp is not loaded.
    """

    def __init__(self, target: Any = None) -> None:
        if target is None:
            from polytf.targets.cpu import CpuTarget

            target = CpuTarget()
        self.target = target
        self.lanes = int(target.vector_lanes)
        module = stream_triad_ir(self.lanes)
        module.triple = target.triple
        module.data_layout = str(target.target_machine.target_data)
        address, self.engine = target.compile_function(str(module), FUNCTION_NAME)
        self.function = _FUNCTION_TYPE(address)

    def run(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, scalar: float, threads: int) -> float:
        """``a[:] = b + scalar * c`` on ``threads`` threads; returns its wall seconds.

        Raises:
            PolytfError: arrays that are not float32, contiguous, of one size, a multiple of
                the vector lanes; threads below 1, or above 1 without libgomp.
        """
        arrays = (a, b, c)
        if any(x.dtype != np.float32 or not x.flags.c_contiguous for x in arrays) or len({x.size for x in arrays}) != 1:
            raise PolytfError("the STREAM triad needs three contiguous float32 arrays of one size")
        if a.size % self.lanes:
            raise PolytfError(f"the STREAM triad needs a multiple of {self.lanes} elements, not {a.size}")
        if threads < 1 or (threads > 1 and not self.target.openmp):
            raise PolytfError(f"the STREAM triad cannot run on {threads} threads (libgomp is needed for more than one)")
        begin = time.perf_counter()
        self.function(a.ctypes.data, b.ctypes.data, c.ctypes.data, a.size, scalar, threads)
        return time.perf_counter() - begin


def measure_memory_bandwidth(
    threads: int, target: Any = None, array_bytes: int | None = None, repeats: int = 5
) -> BandwidthMeasurement:
    """Measure the memory bandwidth of ``threads`` threads with the STREAM triad.

    Args:
        threads: OpenMP threads of the triad (>= 1).
        target: a :class:`polytf.targets.cpu.CpuTarget` that runs here (default: the host);
            its ``vector_lanes`` shape the loop and its ``cache_sizes`` the arrays.
        array_bytes: bytes of each array (default: :func:`triad_elements` of the target's
            last-level cache, i.e. 4 x L3 and at least 32 MiB); rounded up to whole vectors.
        repeats: timed calls (>= 1) after one untimed call; the fastest counts.

    Returns:
        A :class:`BandwidthMeasurement` (GB/s = 10^9 counted bytes per second).

    Raises:
        PolytfError: ``threads``, ``array_bytes`` or ``repeats`` out of range, or a result that
            is not the triad's (a polytf bug).
        CompileError: LLVM could not compile the triad.
    """
    if threads < 1 or repeats < 1 or (array_bytes is not None and array_bytes < 4):
        raise PolytfError(
            f"bandwidth measurement needs threads >= 1, repeats >= 1 and array_bytes >= 4, not {threads}, {repeats}, {array_bytes}"
        )
    triad = StreamTriad(target)
    lanes = triad.lanes
    if array_bytes is None:
        elements = triad_elements(triad.target.cache_sizes.l3_bytes, lanes)
    else:
        elements = -(-(array_bytes // 4) // lanes) * lanes
    a, b, c = (aligned_empty((elements,)) for _ in range(3))
    a[...], b[...], c[...] = 0.0, 1.0, 2.0  # first touch here: no page faults in the timed calls
    triad.run(a, b, c, SCALAR, threads)
    best_s = min(triad.run(a, b, c, SCALAR, threads) for _ in range(repeats))
    expected = np.float32(1.0) + np.float32(SCALAR) * np.float32(2.0)
    if not (a[0] == expected and a[-1] == expected and a[elements // 2] == expected):
        raise PolytfError("the STREAM triad did not compute b + s * c (a polytf bug)")
    return BandwidthMeasurement(
        gb_per_s=COUNTED_BYTES_PER_ELEMENT * elements / best_s / 1e9,
        threads=int(threads),
        vector_lanes=lanes,
        cpu_name=str(triad.target.cpu_name),
        seconds=best_s,
        array_bytes=4 * elements,
    )
