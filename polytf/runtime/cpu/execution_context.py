"""The CPU's execution context: one call's intermediate, temporary and scratch buffers in
host memory, and the argument table of each kernel (:mod:`polytf.runtime.execution_context`).

With a memory plan (:mod:`polytf.plan.memory_plan`) the intermediates, kernel temporaries and
the scratch arrays their copies write whole on every call are views of one arena per context,
at the plan's offsets (buffers never live at the same step share memory); the other scratch
arrays keep zero-filled buffers of their own. Without one, every buffer is its own allocation.

Host steps (:mod:`polytf.lowering.host_fallback`) run between the kernels on the same
buffers; a run-time gather's indices are checked before its kernel runs, a CheckNumerics
node's status after it ran.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from polytf.plan.bindings import PRIVATE, HostPlan, KernelPlan
from polytf.plan.buffers import aligned_empty
from polytf.plan.memory_plan import MemoryPlan, temporary_key
from polytf.runtime.cpu.argument_table import ArgumentTable
from polytf.runtime.execution_context import ExecutionContext
from polytf.runtime.index_checks import check_indices
from polytf.runtime.numerics_checks import check_numerics
from polytf.runtime.timing import call_latencies

__all__ = ["CpuExecutionContext"]


class CpuExecutionContext(ExecutionContext):
    """Host buffers and argument tables for one call at a time.

    Args:
        plans: the model's kernels in execution order.
        constants: storage tensor -> the shared constant buffer.
        intermediate_types: storage tensor -> ``(shape, dtype)`` of each INTERMEDIATE.
        memory_plan: offsets of the intermediates and temporaries in one arena
            (:func:`polytf.plan.memory_plan.plan_memory` of the same plans); None: a
            buffer of its own for each.

    Attributes:
        arena: the buffer holding every planned intermediate, temporary and scratch array
            (uint8, 64-byte aligned; empty without a memory plan).

    Raises:
        ShapeError: a buffer does not fit its kernel (see :meth:`ArgumentTable.bind`).
    """

    def __init__(
        self,
        plans: Sequence[KernelPlan | HostPlan],
        constants: Mapping[str, np.ndarray],
        intermediate_types: Mapping[str, tuple[tuple[int, ...], str]],
        memory_plan: MemoryPlan | None = None,
    ) -> None:
        self._memory_plan = memory_plan
        self._positions = {id(plan): position for position, plan in enumerate(plans)}
        self.arena = aligned_empty((memory_plan.arena_bytes if memory_plan else 0,), "uint8")
        if memory_plan is None:
            intermediates = {storage: aligned_empty(shape, dtype) for storage, (shape, dtype) in intermediate_types.items()}
        else:
            intermediates = {storage: memory_plan.view(self.arena, storage, shape, dtype) for storage, (shape, dtype) in intermediate_types.items()}
        super().__init__(plans, constants, intermediates)

    def _new_table(self, plan: KernelPlan) -> ArgumentTable:
        return ArgumentTable(plan.kernel)

    def _allocate_private(self, table: ArgumentTable, plan: KernelPlan) -> None:
        if self._memory_plan is not None:  # temporaries and scratch written whole: in the arena
            position = self._positions[id(plan)]
            for slot, (binding, info) in enumerate(zip(plan.bindings, plan.kernel.arrays)):
                key = temporary_key(position, slot)
                if binding.kind == PRIVATE and key in self._memory_plan.offsets:
                    table.bind(slot, self._memory_plan.view(self.arena, key, tuple(info.shape), info.dtype))
        table.allocate_unbound()  # the other PRIVATE arrays: own buffers, scratch zero-filled

    def run(self, threads: int, clock: list[float] | None = None) -> None:
        """Run every kernel and host step once, in order, on the bound arrays.

        Args:
            threads: threads of each parallel kernel.
            clock: when given, ``time.perf_counter()`` is appended to it after each step
                (kernel or host step, in execution order): the profile of a real call.
        """
        for step in self.steps:
            if isinstance(step, HostPlan):
                self._run_host(step)
            else:
                for slot, extent, node in self.index_checks(step):
                    check_indices(step.array(slot), extent, node)
                step.run(threads)
                for slot, node, message in self.numerics_checks(step):
                    check_numerics(step.array(slot), node, message)
            if clock is not None:
                clock.append(time.perf_counter())

    def _run_host(self, plan: HostPlan) -> None:
        sources = dict(zip(plan.step.inputs, plan.sources))
        plan.step.run(lambda tensor: self.buffer(sources[tensor]), {tensor: self.buffer(b) for tensor, b in plan.destinations})

    def kernel_latencies(self, threads: int, repeats: int, warmup: int = 1) -> list[list[float]]:
        """Per kernel (execution order), the seconds of each of ``repeats`` calls of that kernel
        alone, on the bound arrays, after ``warmup`` untimed calls of the whole sequence: each
        kernel finds the caches as its own previous call left them (hot)."""
        for _ in range(warmup):
            self.run(threads)
        return [call_latencies(lambda table=table: table.run(threads), repeats) for table in self.tables]
