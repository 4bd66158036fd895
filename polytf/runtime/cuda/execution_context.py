"""The CUDA execution context: one call's buffers in device memory
(:mod:`polytf.runtime.execution_context`).

A :class:`CudaExecutionContext` owns one set of the buffers that live only during a call
(intermediate tensors between steps, kernel temporaries) in device memory, and one
checked argument table (:class:`~polytf.runtime.cuda.argument_table.CudaArgumentTable`) per
kernel; the model's constants are shared device buffers, uploaded once. A call takes a
context from a :class:`~polytf.runtime.context_pool.ContextPool`, binds the inputs
and fresh outputs, and queues every kernel on the current stream.

Host steps (:mod:`polytf.lowering.host_fallback`) run between the kernels on the host:
their inputs are downloaded (a placeholder given as a host array, or a constant, is read
from its host copy instead), their results uploaded into the device buffers the next
kernels read. A run-time gather's indices are downloaded and checked before its kernel is
launched (:func:`~polytf.runtime.index_checks.check_indices`), a CheckNumerics node's
status after it (:func:`~polytf.runtime.numerics_checks.check_numerics`). They wait for the
device, so a model without them is the one that never waits between kernels.

Contexts may be used by calls on different streams one after the other: each call leaves
a fence (:meth:`DeviceBackend.fence`) that the next call using the context waits for
before it writes the context's buffers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from polytf.plan.bindings import CONSTANT, INPUT, PRIVATE, HostPlan, KernelPlan, SlotBinding
from polytf.runtime.cuda.argument_table import CudaArgumentTable
from polytf.runtime.cuda.backend import DeviceBackend
from polytf.runtime.execution_context import ExecutionContext
from polytf.runtime.index_checks import check_indices
from polytf.runtime.numerics_checks import check_numerics

__all__ = ["CudaExecutionContext"]


class CudaExecutionContext(ExecutionContext):
    """Device buffers and argument tables for one call at a time.

    Args:
        plans: the model's kernels and host steps, execution order
            (:func:`polytf.plan.binding_plan.plan_model`).
        constants: constant key -> its shared device buffer.
        host_constants: constant key -> the same value on the host (what host steps read).
        intermediate_types: storage tensor -> ``(shape, dtype)`` of each INTERMEDIATE.
        backend: the device.

    Raises:
        ShapeError: a buffer does not fit its kernel (a polytf bug).
    """

    def __init__(
        self,
        plans: Sequence[KernelPlan | HostPlan],
        constants: Mapping[str, Any],
        host_constants: Mapping[str, np.ndarray],
        intermediate_types: Mapping[str, tuple[tuple[int, ...], str]],
        backend: DeviceBackend,
    ) -> None:
        self.backend = backend
        self._host_constants = host_constants
        self._host_inputs: Mapping[str, np.ndarray] = {}
        #: what the next call waits for before it writes this context's buffers
        self.fence: Any = None
        super().__init__(plans, constants, {storage: backend.allocate(shape, dtype) for storage, (shape, dtype) in intermediate_types.items()})

    def _new_table(self, plan: KernelPlan) -> CudaArgumentTable:
        return CudaArgumentTable(plan.kernel, self.backend)

    def _allocate_private(self, table: CudaArgumentTable, plan: KernelPlan) -> None:
        for slot, binding in enumerate(plan.bindings):
            if binding.kind == PRIVATE:  # a kernel temporary, this context's own
                info = plan.kernel.arrays[slot]
                table.bind(slot, self.backend.allocate(info.shape, info.dtype, zeroed=info.role == "scratch"))

    def bind(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any], host_inputs: Mapping[str, np.ndarray] | None = None) -> None:
        """Point the per-call slots at the call's buffers (each checked by CudaArgumentTable.bind).

        Args:
            inputs: placeholder name -> its device buffer.
            outputs: storage tensor -> the fresh device buffer of an output.
            host_inputs: placeholder name -> the caller's host array, for inputs given on
                the host (host steps read those instead of downloading them again).
        """
        super().bind(inputs, outputs)
        self._host_inputs = host_inputs or {}

    def unbind(self) -> None:
        super().unbind()
        self._host_inputs = {}

    def run(self) -> None:
        """Queue every kernel (and run every host step) once, in order, on the bound buffers."""
        for step in self.steps:
            if isinstance(step, HostPlan):
                self._run_host(step)
                continue
            for slot, extent, node in self.index_checks(step):
                check_indices(self.backend.download(step.array(slot)), extent, node)
            step.launch()
            for slot, node, message in self.numerics_checks(step):
                check_numerics(self.backend.download(step.array(slot)), node, message)

    def _host_value(self, binding: SlotBinding) -> np.ndarray:
        if binding.kind == CONSTANT:
            return self._host_constants[binding.key]
        if binding.kind == INPUT and binding.key in self._host_inputs:
            return self._host_inputs[binding.key]
        return self.backend.download(self.buffer(binding))

    def _run_host(self, plan: HostPlan) -> None:
        sources = dict(zip(plan.step.inputs, plan.sources))
        types = dict(zip(plan.step.outputs, plan.step.output_types))
        staging = {tensor: np.empty(types[tensor][0], dtype=types[tensor][1]) for tensor, _ in plan.destinations}
        plan.step.run(lambda tensor: self._host_value(sources[tensor]), staging)
        for tensor, binding in plan.destinations:
            self.backend.upload_into(self.buffer(binding), staging[tensor])

    def kernel_latencies(self, repeats: int, warmup: int = 1) -> list[list[float]]:
        """Per kernel (execution order), the device seconds of each of ``repeats`` launches of
        that kernel alone on the bound buffers, after ``warmup`` runs of the whole sequence."""
        for _ in range(warmup):
            self.run()
        return [[self.backend.elapsed_s(table.launch) for _ in range(repeats)] for table in self.tables]
