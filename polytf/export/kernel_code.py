"""Kernels compiled to optimised LLVM IR for linking, not for running in this process.

``polytf compile`` puts every kernel of a model into one object file. A kernel goes through
the same compile driver as a JIT-compiled one (:func:`polytf.targets.compile_driver.emit_kernel`:
schedule, isl AST, LLVM IR for the target's triple and data layout) and the same LLVM
pipeline (:meth:`polytf.targets.cpu.CpuTarget.optimise`); it stops before the JIT, so a
cross target (AArch64 on an x86-64 host) works, and the host's object code is the machine
code of the very IR that ``polytf.load`` JIT-compiles (the same results, bit for bit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from polytf.poly.access_bounds import required_bytes
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement
from polytf.schedules.recipe import ScheduleRecipe
from polytf.targets.compile_driver import emit_kernel
from polytf.targets.cpu import CpuTarget

__all__ = ["LinkableKernel", "linkable_kernel"]


@dataclass(frozen=True)
class LinkableKernel:
    """One kernel as optimised LLVM IR defining ``void <name>(i8** arrays, i64 threads)``.

    Attributes:
        scop: what it computes (the lowered Scop, before data-layout transformations).
        recipe: the schedule it was compiled with.
        arrays: its arguments in table order: the scheduled Scop's arrays, then scratch.
        argument_bytes: the bytes each argument's buffer must have at least.
        llvm_ir: the optimised module text.
        constant_copies: weight packings left to the caller (run once at export).
    """

    scop: Scop
    recipe: ScheduleRecipe
    arrays: tuple[ArrayInfo, ...]
    argument_bytes: tuple[int, ...]
    llvm_ir: str
    constant_copies: tuple[Statement, ...] = ()

    @property
    def symbol(self) -> str:
        """The name of its entry function (the kernel's name)."""
        return self.scop.name


def linkable_kernel(target: CpuTarget) -> Callable[[Scop, ScheduleRecipe, frozenset[str]], LinkableKernel]:
    """A kernel compiler for :func:`polytf.compiler.kernel_compilation.compile_steps` that returns
    :class:`LinkableKernel` values for ``target``.

    The returned function raises ScheduleError (an illegal recipe), CodegenError and
    CompileError (LLVM rejected the IR), as ``Target.compile`` does.
    """

    def compile_linkable(scop: Scop, recipe: ScheduleRecipe, constant_arrays: frozenset[str] = frozenset()) -> LinkableKernel:
        emitted = emit_kernel(scop, recipe, target, constant_arrays)
        scheduled = emitted.scheduled.scop
        module = target.optimise(emitted.code, scheduled.name)
        return LinkableKernel(
            scop=scop,
            recipe=recipe,
            arrays=tuple(scheduled.arrays),
            argument_bytes=tuple(required_bytes(scheduled)),
            llvm_ir=str(module),
            constant_copies=tuple(emitted.scheduled.constant_copies),
        )

    return compile_linkable
