"""Measuring a GPU kernel: verify it against the numpy reference, then time it on the device.

The device counterpart of :class:`~polytf.runtime.cpu.kernel_bench.KernelBench`, used by the
tuning worker for the CUDA target (:mod:`polytf.autotune.worker`). The kernel's inputs
are uploaded once; every launch goes through a checked argument table
(:class:`~polytf.runtime.cuda.argument_table.CudaArgumentTable`).

- Verification: the outputs are filled with values no correct kernel leaves
  (:func:`~polytf.runtime.cpu.kernel_bench.unwritten_fill`: NaN for floats), the kernel is launched
  once, the outputs downloaded and compared with the reference
  (:func:`~polytf.runtime.cpu.kernel_bench.compare_outputs`, the CPU path's tolerances). A wrong
  candidate gets no latency.
- Timing: ``warmup_runs`` launches, then at least ``repeats`` launches (and at least
  ``min_repeat_s`` of them), each timed on the device by a CUDA event pair around it
  (:meth:`DeviceBackend.elapsed_s`), after the device's L2 cache was overwritten when
  ``flush_caches`` (the flush is not timed). The tuner takes the median.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from polytf.config import MeasurementConfig
from polytf.poly.scop import Scop
from polytf.runtime.cpu.kernel_bench import Measurement, compare_outputs, unwritten_fill
from polytf.runtime.cuda.argument_table import CudaArgumentTable
from polytf.runtime.cuda.backend import DeviceBackend

__all__ = ["CudaKernelBench", "MAX_TIMED_LAUNCHES"]

#: The most launches one candidate's timing makes (``min_repeat_s`` of microsecond kernels).
MAX_TIMED_LAUNCHES = 1000


class CudaKernelBench:
    """A kernel's inputs on the device, its reference outputs, and its device buffers.

    Args:
        scop: the kernel's Scop (its arrays give the buffers).
        inputs: input array name -> value (host arrays, uploaded once).
        expected: output array name -> the reference's values.
        backend: the device.
    """

    def __init__(self, scop: Scop, inputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], backend: DeviceBackend) -> None:
        self.scop = scop
        self.expected = dict(expected)
        self.backend = backend
        self.buffers = {}
        for info in scop.arrays:
            if info.name in inputs:
                self.buffers[info.name] = backend.upload(np.ascontiguousarray(inputs[info.name], dtype=info.dtype).reshape(info.shape))
            else:
                self.buffers[info.name] = backend.allocate(info.shape, info.dtype, zeroed=info.role == "scratch")

    def arguments(self, kernel) -> CudaArgumentTable:
        """The checked argument table of ``kernel`` (a GPU kernel of this Scop) over the bench's buffers."""
        arguments = CudaArgumentTable(kernel, self.backend)
        for slot, info in enumerate(kernel.arrays):
            if info.name in self.buffers:
                arguments.bind(slot, self.buffers[info.name])
        arguments.allocate_unbound()
        return arguments

    def verify(self, arguments: CudaArgumentTable, config: MeasurementConfig) -> tuple[str | None, float]:
        """Launch once on outputs filled with :func:`unwritten_fill` and compare them with the
        reference. Returns ``(error message or None, max absolute error)``."""
        for info in self.scop.arrays:
            if info.role != "input":
                self.backend.upload_into(self.buffers[info.name], np.full(info.shape, unwritten_fill(info.dtype), dtype=info.dtype))
        arguments.launch()
        actual = {name: self.backend.download(self.buffers[name]) for name in self.expected}
        return compare_outputs(actual, self.expected, config)

    def time(self, arguments: CudaArgumentTable, config: MeasurementConfig, cutoff_s: float = math.inf) -> tuple[float, ...]:
        """Device seconds of each timed launch (module docstring). A candidate whose warm-up
        launch already takes longer than ``cutoff_s`` cannot win: that one latency is
        returned."""
        for _ in range(config.warmup_runs):
            elapsed = self.backend.elapsed_s(arguments.launch)
            if elapsed > cutoff_s:
                return (elapsed,)
        samples: list[float] = []
        timed_s = 0.0
        while len(samples) < config.repeats or (timed_s < config.min_repeat_s and len(samples) < MAX_TIMED_LAUNCHES):
            if config.flush_caches:
                self.backend.flush_caches()
            samples.append(self.backend.elapsed_s(arguments.launch))
            timed_s += samples[-1]
        return tuple(samples)

    def measure(self, kernel, config: MeasurementConfig, cutoff_s: float = math.inf, timed: bool = True) -> Measurement:
        """Verify, then time unless ``timed`` is false (see :meth:`time` for ``cutoff_s``).

        Raises:
            ShapeError: a buffer does not fit the kernel (a polytf bug).
        """
        arguments = self.arguments(kernel)
        error, worst = self.verify(arguments, config)
        if error is not None or not timed:
            return Measurement((), error, worst)
        return Measurement(self.time(arguments, config, cutoff_s), None, worst)
