"""Execution contexts: the private workspace of one call of a model, on either target.

A model's kernels read constants (shared, never written), the caller's inputs, and
buffers that only live during a call: intermediate tensors between kernels, kernel
temporaries and the scratch arrays of data-layout transformations (packed panels,
zero-padded and im2col copies). An :class:`ExecutionContext` owns one set of those
buffers and, per kernel, one checked argument table
(:class:`~polytf.runtime.cpu.argument_table.ArgumentTable` on the CPU,
:class:`~polytf.runtime.cuda.argument_table.CudaArgumentTable` on the GPU); a call takes a
context from a :class:`~polytf.runtime.context_pool.ContextPool`, which makes a new one
when every context is in use, so concurrent calls never share a buffer.

Every buffer a context allocates is bound (and so size-checked) once, when the context is
built (an UNREAD argument, which the kernel's code never reads, gets no buffer); only the
caller's buffers (inputs, fresh outputs) are bound on each call (:meth:`ExecutionContext.bind`). Each target's context
(:class:`~polytf.runtime.cpu.execution_context.CpuExecutionContext`,
:class:`~polytf.runtime.cuda.execution_context.CudaExecutionContext`) says how a table is
made and its temporaries allocated, and runs the steps.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

from polytf.plan.bindings import CONSTANT, INPUT, INTERMEDIATE, OUTPUT, UNREAD, HostPlan, KernelPlan, SlotBinding

__all__ = ["ExecutionContext", "window"]


def window(buffer: Any, origin: int) -> Any:
    """``buffer`` (a numpy or CuPy array) seen from its element ``origin`` on: the buffer
    itself when ``origin`` is 0, else a flat view of its last ``size - origin`` elements,
    which an argument table checks against the bytes the kernel's accesses need (an array
    placed in a slab of its consumer's buffer: :class:`~polytf.plan.bindings.SlotBinding`)."""
    return buffer if not origin else buffer.reshape(-1)[origin:]


class ExecutionContext(abc.ABC):
    """Buffers and argument tables of a model's steps for one call at a time.

    Args:
        plans: the model's kernels and host steps, execution order
            (:func:`polytf.plan.binding_plan.plan_model`).
        constants: storage tensor -> the shared constant buffer.
        intermediates: storage tensor -> this context's buffer of each INTERMEDIATE.

    Attributes:
        tables: the argument table of each kernel, execution order.
        steps: execution order: an argument table or a host plan.

    Raises:
        ShapeError: a buffer does not fit its kernel (a polytf bug).
    """

    def __init__(self, plans: Sequence[KernelPlan | HostPlan], constants: Mapping[str, Any], intermediates: Mapping[str, Any]) -> None:
        self._constants = constants
        self._intermediates = intermediates
        self.tables: list[Any] = []
        self.steps: list[Any] = []
        #: per table, the (slot, binding) pairs bound on each call
        self._per_call: list[list[tuple[int, SlotBinding]]] = []
        #: id(table) -> (slot, extent, node) of each run-time index it checks before the kernel runs
        self._index_checks: dict[int, list[tuple[int, int, str]]] = {}
        #: id(table) -> (status slot, node, message) of each CheckNumerics status read after it ran
        self._numerics_checks: dict[int, list[tuple[int, str, str]]] = {}
        self._inputs: Mapping[str, Any] = {}
        self._outputs: Mapping[str, Any] = {}
        for plan in plans:
            if isinstance(plan, HostPlan):
                self.steps.append(plan)
                continue
            table = self._new_table(plan)
            per_call = []
            for slot, binding in enumerate(plan.bindings):
                if binding.kind == CONSTANT:
                    table.bind(slot, constants[binding.key])
                elif binding.kind == INTERMEDIATE:
                    table.bind(slot, window(intermediates[binding.key], binding.origin))
                elif binding.kind in (INPUT, OUTPUT):
                    per_call.append((slot, binding))
                elif binding.kind == UNREAD:  # only a copy packed ahead of time reads it: no buffer
                    table.bind_unread(slot)
            self._allocate_private(table, plan)
            if plan.index_checks:
                self._index_checks[id(table)] = [(table.slot(array), extent, node) for array, extent, node in plan.index_checks]
            if plan.numerics_checks:
                self._numerics_checks[id(table)] = [(table.slot(array), node, message) for array, node, message in plan.numerics_checks]
            self.tables.append(table)
            self._per_call.append(per_call)
            self.steps.append(table)

    @abc.abstractmethod
    def _new_table(self, plan: KernelPlan) -> Any:
        """The empty argument table of ``plan.kernel``."""

    @abc.abstractmethod
    def _allocate_private(self, table: Any, plan: KernelPlan) -> None:
        """Bind this context's own buffers to the PRIVATE slots of ``table`` (kernel
        temporaries; scratch arrays zero-filled)."""

    def bind(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
        """Point the per-call slots at the caller's buffers (each checked by its table).

        Args:
            inputs: placeholder name -> its converted input buffer.
            outputs: storage tensor -> the fresh buffer of an output.
        """
        for table, per_call in zip(self.tables, self._per_call):
            for slot, binding in per_call:
                table.bind(slot, (inputs if binding.kind == INPUT else outputs)[binding.key])
        self._inputs, self._outputs = inputs, outputs

    def unbind(self) -> None:
        """Forget the caller's buffers (a pooled context must not keep them alive)."""
        for table, per_call in zip(self.tables, self._per_call):
            for slot, _ in per_call:
                table.unbind(slot)
        self._inputs, self._outputs = {}, {}

    def index_checks(self, table: Any) -> list[tuple[int, int, str]]:
        """``(slot, extent, node)`` of each run-time index ``table``'s kernel reads (a gather's
        indices), checked before it runs (:func:`polytf.runtime.index_checks.check_indices`)."""
        return self._index_checks.get(id(table), [])

    def numerics_checks(self, table: Any) -> list[tuple[int, str, str]]:
        """``(status slot, node, message)`` of each CheckNumerics node of ``table``'s kernel,
        read after it ran (:func:`polytf.runtime.numerics_checks.check_numerics`)."""
        return self._numerics_checks.get(id(table), [])

    def buffer(self, binding: SlotBinding) -> Any:
        """The buffer a binding names in this context and the call bound to it."""
        if binding.kind == CONSTANT:
            return self._constants[binding.key]
        if binding.kind == INPUT:
            return self._inputs[binding.key]
        if binding.kind == OUTPUT:
            return self._outputs[binding.key]
        return self._intermediates[binding.key]
