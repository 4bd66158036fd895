"""Measuring a compiled kernel: verify it against the numpy reference, then time it.

A candidate that computes a wrong result never gets a latency: its Measurement
carries the error instead, and the tuner records it as a failed trial.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from polytf.config import MeasurementConfig
from polytf.ops.lowering import LoweredKernel
from polytf.runtime.buffers import aligned_copy, aligned_empty, pointer_table
from polytf.targets.target import CompiledKernel


@dataclass(frozen=True)
class Measurement:
    """Outcome of measuring one candidate.

    Attributes:
        latencies_s: timed calls, seconds (empty when verification failed).
        error: why the candidate was rejected, or None.
        max_error: largest absolute difference from the reference seen.
    """

    latencies_s: tuple[float, ...]
    error: str | None = None
    max_error: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.latencies_s)

    @property
    def median_s(self) -> float:
        return float(np.median(self.latencies_s)) if self.latencies_s else float("inf")


class KernelBench:
    """Random inputs, their reference outputs, and buffers for one kernel.

    Args:
        kernel: the lowered kernel.
        seed: seed of the random inputs (normal distribution, float32).
    """

    def __init__(self, kernel: LoweredKernel, seed: int = 0) -> None:
        self.kernel = kernel
        rng = np.random.default_rng(seed)
        # weights keep their real values (a batch-norm variance must stay positive);
        # run-time inputs are standard normal
        constants = getattr(kernel, "constant_values", {})
        self.inputs = {
            a.name: np.asarray(constants[a.name], dtype=a.dtype).reshape(a.shape)
            if a.name in constants
            else rng.standard_normal(a.shape).astype(a.dtype)
            for a in kernel.input_arrays
        }
        self.expected = kernel.reference(self.inputs)
        self.arrays = []
        for info in kernel.scop.arrays:
            self.arrays.append(aligned_copy(self.inputs[info.name], info.dtype) if info.name in self.inputs else aligned_empty(info.shape, info.dtype))
        self.table = pointer_table(self.arrays)
        self.index = {info.name: i for i, info in enumerate(kernel.scop.arrays)}

    def verify(self, compiled: CompiledKernel, threads: int, config: MeasurementConfig) -> tuple[str | None, float]:
        """Run once on NaN-filled outputs and compare with the reference.

        Returns:
            (error message or None, max absolute error).
        """
        for info in self.kernel.scop.arrays:
            if info.role != "input":
                self.arrays[self.index[info.name]][...] = np.nan
        compiled(self.table, threads)
        worst = 0.0
        for name, expected in self.expected.items():
            actual = self.arrays[self.index[name]]
            # random inputs can leave an op's domain (rsqrt of a negative mean): NaNs must
            # match in place, and the tolerance scales with the finite values only
            scale = float(np.max(np.abs(expected), where=np.isfinite(expected), initial=0.0))
            atol = config.atol_scale * scale + 1e-6
            if not np.all(np.isfinite(actual) == np.isfinite(expected)):
                return f"non-finite values in output {name} (elements not written, or overflow)", float("inf")
            difference = np.abs(actual - expected)
            worst = max(worst, float(np.max(difference, initial=0.0, where=np.isfinite(difference))))
            if not np.allclose(actual, expected, rtol=config.rtol, atol=atol, equal_nan=True):
                return f"wrong result in output {name}: max abs error {worst:.3g} (tolerance rtol {config.rtol}, atol {atol:.3g})", worst
        return None, worst

    def time(self, compiled: CompiledKernel, threads: int, config: MeasurementConfig, cutoff_s: float = math.inf) -> tuple[float, ...]:
        """Latencies of ``config.repeats`` calls (at least ``min_repeat_s`` in total) after warm-up.

        A candidate whose warm-up call already takes longer than ``cutoff_s`` seconds cannot
        win: that one latency is returned, so slow candidates cost one call, not a dozen."""
        for _ in range(config.warmup_runs):
            begin = time.perf_counter()
            compiled(self.table, threads)
            elapsed = time.perf_counter() - begin
            if elapsed > cutoff_s:
                return (elapsed,)
        samples = []
        started = time.perf_counter()
        while len(samples) < config.repeats or (time.perf_counter() - started < config.min_repeat_s and len(samples) < 1000):
            begin = time.perf_counter()
            compiled(self.table, threads)
            samples.append(time.perf_counter() - begin)
        return tuple(samples)

    def measure(self, compiled: CompiledKernel, threads: int, config: MeasurementConfig, cutoff_s: float = math.inf) -> Measurement:
        """Verify, then time (see :meth:`time` for ``cutoff_s``)."""
        error, worst = self.verify(compiled, threads, config)
        if error is not None:
            return Measurement((), error, worst)
        return Measurement(self.time(compiled, threads, config, cutoff_s), None, worst)
