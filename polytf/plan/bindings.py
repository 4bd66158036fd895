"""Binding kinds: where the buffer of each kernel argument and host-step tensor of a model comes from.

The binding plan (:mod:`polytf.plan.binding_plan`) assigns one to every argument; the CPU
runtime (host buffers), the CUDA runtime (device buffers) and the AOT export (a workspace and
a weights blob) each make the buffers of their own memory from the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from polytf.targets.target import CompiledKernel

#: Kinds of kernel argument, by where its buffer comes from.
CONSTANT = "constant"  # a graph constant, shared by all contexts (kernels only read it)
INPUT = "input"  # a placeholder's value, the caller's (converted) array, bound per call
OUTPUT = "output"  # a model output, a fresh array per call, bound per call
INTERMEDIATE = "intermediate"  # a tensor passed between kernels, one buffer per context
PRIVATE = "private"  # a kernel temporary or scratch array, one buffer per context and kernel
UNREAD = "unread"  # a constant the kernel reads only through its copy packed ahead of time: no buffer


@dataclass(frozen=True)
class SlotBinding:
    """Where one kernel argument's buffer comes from.

    Attributes:
        kind: one of CONSTANT, INPUT, OUTPUT, INTERMEDIATE, PRIVATE, UNREAD.
        key: the storage tensor (``"node:port"``) for CONSTANT, OUTPUT and INTERMEDIATE;
            the placeholder name for INPUT; empty for PRIVATE.
        origin: for INTERMEDIATE, the element of the buffer where the argument begins (the
            kernel's array is a window of the buffer: :attr:`LoweredKernel.array_origins
            <polytf.lowering.lowered_kernel.LoweredKernel.array_origins>`); else 0.
    """

    kind: str
    key: str = ""
    origin: int = 0


@dataclass(frozen=True)
class KernelPlan:
    """One kernel of a model and the binding of each of its arguments (``kernel.arrays`` order)."""

    kernel: CompiledKernel
    bindings: tuple[SlotBinding, ...]
    #: ``(index array, table extent, node)`` of each run-time gather: checked before the kernel runs
    index_checks: tuple[tuple[str, int, str], ...] = ()
    #: ``(status array, node, message)`` of each CheckNumerics node: read after the kernel ran
    numerics_checks: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class HostPlan:
    """One host step of a model: where each input comes from and where each output goes.

    Attributes:
        step: the host step.
        sources: per input tensor, its buffer (CONSTANT, INPUT, OUTPUT or INTERMEDIATE).
        destinations: per output tensor that someone reads, ``(tensor, binding)`` with
            binding kind OUTPUT or INTERMEDIATE.
    """

    step: object  # HostStep (kept untyped: the runtime's host module imports this one)
    sources: tuple[SlotBinding, ...]
    destinations: tuple[tuple[str, SlotBinding], ...]


__all__ = ["CONSTANT", "INPUT", "OUTPUT", "INTERMEDIATE", "PRIVATE", "UNREAD", "SlotBinding", "KernelPlan", "HostPlan"]
