"""Measuring a compiled kernel: verify it against the numpy reference, then time it.

A candidate that computes a wrong result never gets a latency: its Measurement
carries the error instead, and the tuner records it as a failed trial.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from polytf.config import MeasurementConfig
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.plan.constant_layout import packed_constants
from polytf.poly.access_bounds import run_time_index_checks
from polytf.poly.scop import Scop
from polytf.runtime.cpu.argument_table import ArgumentTable
from polytf.runtime.cpu.guard_zones import GuardedArrays
from polytf.schedules.winograd import verification_tolerance
from polytf.targets.cache_flush import cache_flusher
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


def reference_data(kernel: LoweredKernel, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Seeded inputs of ``kernel`` and its numpy reference's outputs on them.

    Weights (graph constants) keep their real values (a batch-norm variance must stay
    positive); run-time float inputs are standard normal float32, the indices of a run-time
    gather are uniform over their table, other integers uniform in [-3, 3], bools fair coins.

    Returns:
        ``({input array name: value}, {output array name: expected value})``.
    """
    rng = np.random.default_rng(seed)
    constants = getattr(kernel, "constant_values", {})
    extents = {array: extent for array, extent, _ in run_time_index_checks(kernel.scop)}

    def draw(info) -> np.ndarray:
        if info.name in constants:
            return np.asarray(constants[info.name], dtype=info.dtype).reshape(info.shape)
        if info.name in extents:
            return rng.integers(0, extents[info.name], size=info.shape).astype(info.dtype)
        if info.dtype == "bool":
            return rng.random(info.shape) < 0.5
        if np.dtype(info.dtype).kind in "iu":
            return rng.integers(-3, 4, size=info.shape).astype(info.dtype)
        return rng.standard_normal(info.shape).astype(info.dtype)

    inputs = {a.name: draw(a) for a in kernel.input_arrays}
    return inputs, kernel.reference(inputs)


def compare_outputs(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], config: MeasurementConfig) -> tuple[str | None, float]:
    """Compare a candidate's outputs with the reference's.

    Integer and bool outputs must be equal. Float outputs must have their non-finite values
    where the reference has them (random inputs can leave an op's domain: rsqrt of a
    negative mean) and be within ``rtol`` and ``atol = atol_scale * max|finite reference| +
    1e-6`` elsewhere.

    Args:
        actual: output array name -> the candidate's values (host arrays).
        expected: output array name -> the reference's values.
        config: the tolerances.

    Returns:
        ``(error message or None, max absolute error)``.
    """
    worst = 0.0
    for name, reference in expected.items():
        values = actual[name]
        if values.dtype.kind != "f":  # integers and bools: exactly
            if not np.array_equal(values, reference):
                mismatches = int(np.count_nonzero(values != reference))
                return f"wrong result in output {name}: {mismatches} of {values.size} {values.dtype} elements differ", float("inf")
            continue
        scale = float(np.max(np.abs(reference), where=np.isfinite(reference), initial=0.0))
        atol = config.atol_scale * scale + 1e-6
        if not np.all(np.isfinite(values) == np.isfinite(reference)):
            return f"non-finite values in output {name} (elements not written, or overflow)", float("inf")
        with np.errstate(invalid="ignore"):  # inf - inf where both are infinite: not a difference
            difference = np.abs(values - reference)
        worst = max(worst, float(np.max(difference, initial=0.0, where=np.isfinite(difference))))
        if not np.allclose(values, reference, rtol=config.rtol, atol=atol, equal_nan=True):
            return f"wrong result in output {name}: max abs error {worst:.3g} (tolerance rtol {config.rtol}, atol {atol:.3g})", worst
    return None, worst


def unwritten_fill(dtype: str):
    """What an output starts as before a verified run: NaN (floats), the minimum (integers),
    True (bools), so that an element the kernel forgets to write shows up."""
    kind = np.dtype(dtype).kind
    if kind == "f":
        return np.nan
    if kind == "b":
        return True
    return np.iinfo(dtype).min


class KernelBench:
    """Inputs, their reference outputs, and buffers for one kernel.

    Args:
        kernel: the lowered kernel (its reference computes ``expected``).
        seed: seed of the random inputs (normal distribution, float32).
        scop, inputs, expected: instead of ``kernel`` and ``seed`` (in a tuning worker,
            where the reference is not available): the Scop and precomputed arrays.
    """

    def __init__(self, kernel: LoweredKernel | None = None, seed: int = 0, *, scop: Scop | None = None, inputs=None, expected=None) -> None:
        if kernel is not None:
            inputs, expected = reference_data(kernel, seed)
            scop = kernel.scop
        if scop is None or inputs is None or expected is None:
            raise ValueError("KernelBench needs a kernel, or a scop with inputs and expected outputs")
        self.kernel = kernel
        self.scop = scop
        self.inputs = dict(inputs)
        self.expected = dict(expected)
        # every array between guard zones: a write outside one fails the candidate
        # (:meth:`verify`) instead of corrupting this process's heap
        self.guards = GuardedArrays()
        self._scratch_guards: weakref.WeakKeyDictionary[ArgumentTable, GuardedArrays] = weakref.WeakKeyDictionary()
        self.arrays = []
        for info in scop.arrays:
            if info.name in self.inputs:
                self.arrays.append(self.guards.copy(info.name, self.inputs[info.name], info.dtype))
            else:
                self.arrays.append(self.guards.empty(info.name, tuple(info.shape), info.dtype))
        self.index = {info.name: i for i, info in enumerate(scop.arrays)}

    def table(self, compiled: CompiledKernel) -> ArgumentTable:
        """An argument table of ``compiled`` over the bench's arrays, with fresh scratch
        arrays for its data-layout transformations."""
        table = ArgumentTable(compiled)
        for slot, array in enumerate(self.arrays):
            table.bind(slot, array)
        if compiled.constant_copies:  # weights packed ahead of time, as the model does
            values = {info.name: self.arrays[self.index[info.name]] for info in self.scop.arrays if info.role == "input"}
            for name, packed in packed_constants(compiled, values).items():
                table.bind(table.slot(name), packed)
        scratch = GuardedArrays()
        table.allocate_unbound(scratch.allocate)  # zero-filled scratch: packed panels, padded and im2col copies
        self._scratch_guards[table] = scratch
        return table

    def verify(self, compiled: CompiledKernel, threads: int, config: MeasurementConfig, table: ArgumentTable | None = None) -> tuple[str | None, float]:
        """Run once on NaN-filled outputs and compare with the reference.

        Args:
            table: an argument table of ``compiled`` from :meth:`table` (default: a new one).

        Returns:
            (error message or None, max absolute error).
        """
        for info in self.scop.arrays:
            if info.role != "input":
                self.arrays[self.index[info.name]][...] = unwritten_fill(info.dtype)
        table = table or self.table(compiled)
        table.run(threads)
        scratch = self._scratch_guards.get(table)
        outside = self.guards.violation() or (scratch.violation() if scratch is not None else None)
        if outside is not None:
            return f"out-of-bounds write: {outside}", float("inf")
        config = verification_tolerance(compiled.recipe, config)  # a Winograd recipe rounds differently
        return compare_outputs({name: self.arrays[self.index[name]] for name in self.expected}, self.expected, config)

    def time(
        self, compiled: CompiledKernel, threads: int, config: MeasurementConfig, cutoff_s: float = math.inf, table: ArgumentTable | None = None
    ) -> tuple[float, ...]:
        """Latencies of ``config.repeats`` calls (at least ``min_repeat_s`` of them timed) after
        warm-up, each after a flush of the kernel's arrays when ``config.flush_caches``.

        A candidate whose warm-up call already takes longer than ``cutoff_s`` seconds cannot
        win: that one latency is returned, so slow candidates cost one call, not a dozen.
        ``table``: as for :meth:`verify`."""
        table = table or self.table(compiled)
        for _ in range(config.warmup_runs):
            begin = time.perf_counter()
            table.run(threads)
            elapsed = time.perf_counter() - begin
            if elapsed > cutoff_s:
                return (elapsed,)
        flush = cache_flusher().flush if config.flush_caches else None
        arrays = table.bound_arrays()
        samples = []
        timed_s = 0.0
        while len(samples) < config.repeats or (timed_s < config.min_repeat_s and len(samples) < 1000):
            if flush is not None:
                flush(arrays)
            begin = time.perf_counter()
            table.run(threads)
            samples.append(time.perf_counter() - begin)
            timed_s += samples[-1]
        return tuple(samples)

    def measure(self, compiled: CompiledKernel, threads: int, config: MeasurementConfig, cutoff_s: float = math.inf, timed: bool = True) -> Measurement:
        """Verify, then time unless ``timed`` is false (see :meth:`time` for ``cutoff_s``), on
        one argument table."""
        table = self.table(compiled)
        error, worst = self.verify(compiled, threads, config, table)
        if error is not None or not timed:
            return Measurement((), error, worst)
        return Measurement(self.time(compiled, threads, config, cutoff_s, table), None, worst)
