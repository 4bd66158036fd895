"""Kernel: what a compiled kernel offers whoever runs, measures, shows or exports it.

Every target's :meth:`~polytf.targets.target.Target.compile` returns one: the CPU's
:class:`~polytf.targets.target.CompiledKernel` (a JIT-compiled function called on a table
of array pointers) and the GPU's :class:`~polytf.targets.cuda.CudaKernel` (PTX launched on
a grid). Both implement this protocol explicitly (they subclass it); how a kernel is
called belongs to the runtime of its target (:class:`~polytf.runtime.cpu.argument_table.ArgumentTable`,
:class:`~polytf.runtime.cuda.argument_table.CudaArgumentTable`), which binds and checks its
buffers against :attr:`Kernel.arrays` and :attr:`Kernel.argument_bytes` first.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement
from polytf.schedules.recipe import ScheduleRecipe

__all__ = ["Kernel"]


@runtime_checkable
class Kernel(Protocol):
    """A kernel compiled for a target.

    Attributes:
        scop: what it computes (before scheduling).
        recipe: the schedule it was compiled with (a CpuRecipe or a GpuRecipe).
        llvm_ir: the optimised LLVM IR text.
        arrays: its arguments, in order: ``scop.arrays`` (on the GPU those in global
            memory), then the scratch arrays the recipe's data-layout transformations
            added (packed panels, zero-padded and im2col copies), which the caller
            allocates per execution context.
        argument_bytes: the bytes each argument's buffer must have at least (the access
            relations stay inside these: :func:`polytf.poly.access_bounds.required_bytes`).
        constant_copies: copy statements the kernel leaves to its caller because they read
            only constants (packing weights into panels): each writes one scratch argument
            once, before the first call (:mod:`polytf.plan.constant_layout`). Empty on the GPU.
    """

    scop: Scop
    recipe: ScheduleRecipe
    llvm_ir: str
    arrays: tuple[ArrayInfo, ...]
    argument_bytes: tuple[int, ...]
    constant_copies: tuple[Statement, ...] = ()

    @property
    def scratch_arrays(self) -> tuple[ArrayInfo, ...]:
        """The arguments beyond the Scop's own arrays (allocated by the caller)."""
        return self.arrays[len(self.scop.arrays) :]
