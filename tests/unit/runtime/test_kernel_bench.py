"""Verification rejects wrong kernels before they can be timed."""

from __future__ import annotations

from dataclasses import replace

from polytf.config import MeasurementConfig
from polytf.poly.expression import Binary, Constant
from polytf.poly.scop import Scop
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.recipe import CpuRecipe
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()


def test_correct_kernel_is_timed(small_kernels):
    kernel = small_kernels("broadcast_chain")[0]
    bench = KernelBench(kernel)
    measurement = bench.measure(TARGET.compile(kernel.scop, CpuRecipe()), 1, MeasurementConfig(repeats=5, min_repeat_s=0.0))
    assert measurement.ok and len(measurement.latencies_s) >= 5 and measurement.median_s > 0


def test_wrong_kernel_is_rejected(small_kernels):
    kernel = small_kernels("matmul_bias_relu")[0]
    # sabotage: the epilogue adds 1.0 more than it should
    statements = list(kernel.scop.statements)
    last = statements[-1]
    statements[-1] = replace(last, value=Binary("add", last.value, Constant(1.0)))
    wrong = Scop(kernel.scop.name, tuple(statements), kernel.scop.arrays)
    bench = KernelBench(kernel)
    measurement = bench.measure(TARGET.compile(wrong, CpuRecipe()), 1, MeasurementConfig())
    assert not measurement.ok
    assert "wrong result" in measurement.error and measurement.latencies_s == ()


def test_unwritten_output_is_rejected(small_kernels):
    kernel = small_kernels("softmax")[0]
    statements = kernel.scop.statements[:-1]  # drop the final division: output never written
    wrong = Scop(kernel.scop.name, statements, kernel.scop.arrays)
    bench = KernelBench(kernel)
    measurement = bench.measure(TARGET.compile(wrong, CpuRecipe()), 1, MeasurementConfig())
    assert not measurement.ok
    assert "non-finite" in measurement.error


class _CountingFlusher:
    """Stands in for the host's cache flusher: records what it was asked to evict."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, ...]] = []

    def flush(self, arrays) -> None:
        self.calls.append(tuple(array.ctypes.data for array in arrays))


def test_every_timed_call_follows_a_flush_of_the_kernels_arrays(small_kernels, monkeypatch):
    import polytf.runtime.cpu.kernel_bench as measure

    flusher = _CountingFlusher()
    monkeypatch.setattr(measure, "cache_flusher", lambda: flusher)
    kernel = small_kernels("matmul_bias_relu")[0]
    bench = KernelBench(kernel)
    compiled = TARGET.compile(kernel.scop, CpuRecipe())
    table = bench.table(compiled)
    latencies = bench.time(compiled, 1, MeasurementConfig(repeats=6, min_repeat_s=0.0, warmup_runs=1), table=table)
    assert len(flusher.calls) == len(latencies) == 6
    addresses = {array.ctypes.data for array in table.bound_arrays()}
    assert all(set(call) == addresses for call in flusher.calls) and len(addresses) == len(compiled.arrays)
    flusher.calls.clear()
    bench.time(compiled, 1, MeasurementConfig(repeats=3, min_repeat_s=0.0, flush_caches=False), table=table)
    assert flusher.calls == []


def test_a_write_outside_an_array_fails_the_candidate(small_kernels):
    import ctypes

    kernel = small_kernels("matmul_bias_relu")[0]
    compiled = TARGET.compile(kernel.scop, CpuRecipe())
    bench = KernelBench(kernel)
    table = bench.table(compiled)
    output = bench.arrays[bench.index[next(iter(bench.expected))]]
    ctypes.memset(output.ctypes.data + output.nbytes + 8, 0, 4)  # what a kernel storing a vector too far does
    error, _ = bench.verify(compiled, 1, MeasurementConfig(), table)
    assert error is not None and error.startswith("out-of-bounds write: wrote outside array")
    assert "4 bytes changed up to 12 bytes past its end" in error
    assert bench.verify(compiled, 1, MeasurementConfig(), table)[0] is None, "the zone is refilled: the next call is judged alone"
