"""A compiled kernel as the code cache keeps it, and a kernel to compile.

:func:`kernel_object` turns a kernel compiled by :meth:`CpuTarget.compile_code
<polytf.targets.cpu.CpuTarget.compile_code>` into a cache entry
(:class:`~polytf.storage.object_cache.KernelObject`): its object code, its entry point and
its :class:`KernelFacts`, pickled. The compile workers (:mod:`polytf.compiler.compile_workers`)
send entries back in this form and the code cache (:mod:`polytf.compiler.code_cache`) stores
and links them.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

from polytf.plan.binding_plan import arrays_read_ahead_only, kernel_code_scop, scratch_written_whole
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement
from polytf.schedules.data_layout import SCRATCH
from polytf.schedules.recipe import ScheduleRecipe
from polytf.storage.object_cache import KernelObject
from polytf.targets.target import CompiledKernel

__all__ = ["CompileJob", "KernelFacts", "kernel_object"]


@dataclass(frozen=True)
class KernelFacts:
    """What a model needs of a compiled kernel besides its code (kept with its object).

    Attributes:
        arrays: the scheduled kernel's arrays (the Scop's and the schedule's scratch arrays),
            in argument order.
        argument_bytes: the bytes each argument must have.
        constant_copies: weight packings run once when the model is built.
        inputs_read_ahead_only, scratch_written_whole: as a
            :class:`~polytf.targets.target.CompiledKernel`'s, worked out when the kernel was
            compiled, so that a model built from the cache does not apply the recipe's
            data-layout transformations again (a Winograd kernel's took 0.1 s); None in
            entries written before they were kept (the plan works them out).
    """

    arrays: tuple[ArrayInfo, ...]
    argument_bytes: tuple[int, ...]
    constant_copies: tuple[Statement, ...]
    inputs_read_ahead_only: frozenset[str] | None = None
    scratch_written_whole: frozenset[str] | None = None


@dataclass(frozen=True)
class CompileJob:
    """One kernel to compile: its Scop, recipe and weight arrays."""

    scop: Scop
    recipe: ScheduleRecipe
    constant_arrays: frozenset[str]


def kernel_object(kernel: CompiledKernel) -> KernelObject:
    """The cache entry of a kernel compiled by :meth:`CpuTarget.compile_code`."""
    code = kernel_code_scop(kernel) if kernel.constant_copies or any(info.role == SCRATCH for info in kernel.arrays) else None
    facts = KernelFacts(
        tuple(kernel.arrays),
        tuple(kernel.argument_bytes),
        tuple(kernel.constant_copies),
        arrays_read_ahead_only(kernel, code),
        scratch_written_whole(kernel, code),
    )
    return KernelObject(kernel.symbol, kernel.scop.name, pickle.dumps(facts, protocol=pickle.HIGHEST_PROTOCOL), kernel.object_code)
