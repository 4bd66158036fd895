"""The one compile driver of every target: schedule -> AST -> ``target.emit`` -> ``target.compile_code``.

    compile_kernel(scop, recipe, target)
        scheduled = schedule_scop(scop, recipe, limits=target.limits)   # schedules/builder.py
        ast       = build_ast(scheduled.schedule)                       # isl AST (isl manual, "AST generation")
        code      = target.emit(scheduled, ast, recipe)                 # text: LLVM IR for the CPU
        return target.compile_code(code, scop, scheduled, recipe)       # a runnable Kernel

Scheduling and AST generation are the target-independent half of code generation (PPCG's
``ppcg.c`` runs the same steps before handing the AST to its CUDA or OpenCL printer); a
target supplies only :meth:`~polytf.targets.target.Target.emit` and
:meth:`~polytf.targets.target.Target.compile_code`, and the search-space facts
(:attr:`~polytf.targets.target.Target.limits`) that the scheduler checks a recipe against.
``polytf show --kernel`` uses :func:`emit_kernel` so that it schedules a kernel once for its
schedule tree, loop AST, LLVM IR and assembly.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polytf.islpy_on_demand import isl
from polytf.poly.scop import Scop
from polytf.schedules import builder
from polytf.schedules.recipe import ScheduleRecipe
from polytf.targets.kernel import Kernel

if TYPE_CHECKING:  # pragma: no cover - the Target interface calls this driver (Target.compile)
    from polytf.targets.target import Target

__all__ = ["EmittedKernel", "emit_kernel", "compile_kernel"]


@dataclass(frozen=True)
class EmittedKernel:
    """A kernel scheduled and emitted for a target, not yet compiled.

    Attributes:
        scheduled: the Scop after the recipe's data-layout transformations, with its
            schedule tree and the constant copies left to the caller.
        ast: the isl AST of the schedule.
        code: the target's code text (LLVM IR on the CPU).
    """

    scheduled: builder.ScheduledScop
    ast: isl.AstNode
    code: str


def emit_kernel(scop: Scop, recipe: ScheduleRecipe, target: Target, constant_arrays: frozenset[str] = frozenset()) -> EmittedKernel:
    """Schedule ``scop`` with ``recipe`` for ``target`` and emit its code.

    Args:
        constant_arrays: inputs that hold weights; their data-layout copies are left to the
            caller (:attr:`Kernel.constant_copies`).

    Raises:
        ScheduleError: the recipe is invalid or illegal for the Scop on this target.
        CodegenError: the target cannot generate code for the AST.
    """
    scheduled = builder.schedule_scop(scop, recipe, limits=target.limits, constant_arrays=constant_arrays)
    ast = builder.build_ast(scheduled.schedule)
    with _cyclic_collector_paused():
        code = target.emit(scheduled, ast, recipe)
    return EmittedKernel(scheduled, ast, code)


@contextmanager
def _cyclic_collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while code is emitted, as it was before.

    Emitting LLVM IR with llvmlite makes hundreds of thousands of small objects that refer
    to each other (each value and its users); the collector, triggered by their count,
    walked them and everything else the process holds again and again: 40% of the emission
    time of MobileNetV2's 40 distinct kernels (1.43 s with it on, 0.88 s off; AMD EPYC
    ``znver5``, one core). The cycles left behind are collected once the collector is back on.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile_kernel(scop: Scop, recipe: ScheduleRecipe, target: Target, constant_arrays: frozenset[str] = frozenset()) -> Kernel:
    """Schedule, emit and compile ``scop`` for ``target`` (module docstring).

    Raises:
        ScheduleError, CodegenError: as :func:`emit_kernel`.
        CompileError: the target's compiler rejected the code.
    """
    emitted = emit_kernel(scop, recipe, target, constant_arrays)
    return target.compile_code(emitted.code, scop, emitted.scheduled, recipe)
