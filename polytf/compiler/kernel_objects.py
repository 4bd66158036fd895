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

from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement
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
    """

    arrays: tuple[ArrayInfo, ...]
    argument_bytes: tuple[int, ...]
    constant_copies: tuple[Statement, ...]


@dataclass(frozen=True)
class CompileJob:
    """One kernel to compile: its Scop, recipe and weight arrays."""

    scop: Scop
    recipe: ScheduleRecipe
    constant_arrays: frozenset[str]


def kernel_object(kernel: CompiledKernel) -> KernelObject:
    """The cache entry of a kernel compiled by :meth:`CpuTarget.compile_code`."""
    facts = KernelFacts(tuple(kernel.arrays), tuple(kernel.argument_bytes), tuple(kernel.constant_copies))
    return KernelObject(kernel.symbol, kernel.scop.name, pickle.dumps(facts, protocol=pickle.HIGHEST_PROTOCOL), kernel.object_code)
