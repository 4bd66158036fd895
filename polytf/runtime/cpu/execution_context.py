"""Execution contexts: the private workspace of one call of a compiled model.

A model's kernels read constants (shared, never written), the caller's inputs, and
buffers that only live during a call: intermediate tensors between kernels, kernel
temporaries and the scratch arrays of data-layout transformations (packed panels,
zero-padded and im2col copies). An :class:`ExecutionContext` owns one set of those
buffers and one :class:`~polytf.runtime.cpu.argument_table.ArgumentTable` per kernel; a call
takes a context from a :class:`ContextPool`, which makes a new one when every context is
in use, so concurrent calls never share a buffer and the pool grows to the largest
concurrency seen.

Every buffer a context allocates is bound (and so size-checked) once, when the context
is built; only the caller's arrays (inputs, fresh outputs) are bound on each call. Host
steps (:mod:`polytf.lowering.host_fallback`) run between the kernels on the same buffers.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from polytf.plan.bindings import CONSTANT, INPUT, INTERMEDIATE, OUTPUT, HostPlan, KernelPlan, SlotBinding
from polytf.plan.buffers import aligned_empty
from polytf.runtime.cpu.argument_table import ArgumentTable
from polytf.runtime.index_checks import check_indices
from polytf.runtime.timing import call_latencies


class ExecutionContext:
    """Buffers and argument tables for one call at a time.

    Args:
        plans: the model's kernels in execution order.
        constants: storage tensor -> the shared constant buffer.
        intermediate_types: storage tensor -> ``(shape, dtype)`` of each INTERMEDIATE.

    Raises:
        ShapeError: a buffer does not fit its kernel (see :meth:`ArgumentTable.bind`).
    """

    def __init__(
        self,
        plans: Sequence[KernelPlan | HostPlan],
        constants: Mapping[str, np.ndarray],
        intermediate_types: Mapping[str, tuple[tuple[int, ...], str]],
    ) -> None:
        self._intermediates = {storage: aligned_empty(shape, dtype) for storage, (shape, dtype) in intermediate_types.items()}
        self._constants = constants
        self._tables: list[ArgumentTable] = []
        #: per table, the (slot, binding) pairs bound on each call
        self._per_call: list[list[tuple[int, SlotBinding]]] = []
        #: execution order: an argument table or a host plan
        self._steps: list[ArgumentTable | HostPlan] = []
        self._inputs: Mapping[str, np.ndarray] = {}
        self._outputs: Mapping[str, np.ndarray] = {}
        self._index_checks: dict[int, list[tuple[int, int, str]]] = {}
        for plan in plans:
            if isinstance(plan, HostPlan):
                self._steps.append(plan)
                continue
            table = ArgumentTable(plan.kernel)
            per_call = []
            for slot, binding in enumerate(plan.bindings):
                if binding.kind == CONSTANT:
                    table.bind(slot, constants[binding.key])
                elif binding.kind == INTERMEDIATE:
                    table.bind(slot, self._intermediates[binding.key])
                elif binding.kind in (INPUT, OUTPUT):
                    per_call.append((slot, binding))
            table.allocate_unbound()  # temporaries and scratch (PRIVATE), zero-filled scratch
            self._tables.append(table)
            self._steps.append(table)
            if plan.index_checks:
                self._index_checks[id(table)] = [(table.slot(array), extent, node) for array, extent, node in plan.index_checks]
            self._per_call.append(per_call)

    def bind(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> None:
        """Point the per-call slots at the caller's arrays (checked by ArgumentTable.bind).

        Args:
            inputs: placeholder name -> converted input array.
            outputs: storage tensor -> fresh output array.
        """
        for table, per_call in zip(self._tables, self._per_call):
            for slot, binding in per_call:
                table.bind(slot, (inputs if binding.kind == INPUT else outputs)[binding.key])
        self._inputs, self._outputs = inputs, outputs

    def run(self, threads: int, clock: list[float] | None = None) -> None:
        """Run every kernel and host step once, in order, on the bound arrays.

        Args:
            threads: threads of each parallel kernel.
            clock: when given, ``time.perf_counter()`` is appended to it after each step
                (kernel or host step, in execution order): the profile of a real call.
        """
        for step in self._steps:
            if isinstance(step, HostPlan):
                self._run_host(step)
            else:
                checks = self._index_checks.get(id(step))
                if checks:
                    for slot, extent, node in checks:
                        check_indices(step.array(slot), extent, node)
                step.run(threads)
            if clock is not None:
                clock.append(time.perf_counter())

    def _buffer(self, binding: SlotBinding) -> np.ndarray:
        if binding.kind == CONSTANT:
            return self._constants[binding.key]
        if binding.kind == INPUT:
            return self._inputs[binding.key]
        if binding.kind == OUTPUT:
            return self._outputs[binding.key]
        return self._intermediates[binding.key]

    def _run_host(self, plan: HostPlan) -> None:
        sources = dict(zip(plan.step.inputs, plan.sources))
        plan.step.run(lambda tensor: self._buffer(sources[tensor]), {tensor: self._buffer(b) for tensor, b in plan.destinations})

    def kernel_latencies(self, threads: int, repeats: int, warmup: int = 1) -> list[list[float]]:
        """Per kernel (execution order), the seconds of each of ``repeats`` calls of that kernel
        alone, on the bound arrays, after ``warmup`` untimed calls of the whole sequence: each
        kernel finds the caches as its own previous call left them (hot)."""
        for _ in range(warmup):
            self.run(threads)
        return [call_latencies(lambda table=table: table.run(threads), repeats) for table in self._tables]

    def unbind(self) -> None:
        """Forget the caller's arrays (a pooled context must not keep them alive)."""
        for table, per_call in zip(self._tables, self._per_call):
            for slot, _ in per_call:
                table.unbind(slot)
        self._inputs, self._outputs = {}, {}


__all__ = ["ExecutionContext"]
