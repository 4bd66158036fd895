"""The Target interface: where kernels are compiled to and run.

A target turns a Scop scheduled by a recipe into a :class:`CompiledKernel` and names
itself by a fingerprint that enters every cache key (triple, CPU name and features).
"""

from __future__ import annotations

import abc
import ctypes
from dataclasses import dataclass, field

from polytf.poly.scop import Scop
from polytf.schedules.recipe import ScheduleRecipe


@dataclass
class CompiledKernel:
    """A kernel ready to run on a table of array pointers.

    Attributes:
        scop: what it computes.
        recipe: the schedule it was compiled with.
        function: ``void f(void** arrays, int64 threads)`` as a ctypes function.
        llvm_ir: the optimised LLVM IR text (for ``polytf show``).
        owner: objects that must outlive ``function`` (the JIT engine).
    """

    scop: Scop
    recipe: ScheduleRecipe
    function: ctypes._CFuncPtr
    llvm_ir: str = ""
    assembly: str = ""
    owner: object = field(default=None, repr=False)

    def __call__(self, array_table: ctypes.Array, threads: int) -> None:
        """Run once. ``array_table[i]`` is the address of the Scop's i-th array."""
        self.function(array_table, threads)


class Target(abc.ABC):
    """A code-generation target."""

    name: str = "abstract"

    @abc.abstractmethod
    def fingerprint(self) -> dict:
        """Everything about the target that changes generated code (enters cache keys)."""

    @abc.abstractmethod
    def compile(self, scop: Scop, recipe: ScheduleRecipe) -> CompiledKernel:
        """Schedule, generate and compile ``scop``.

        Raises:
            ScheduleError: the recipe is illegal for the Scop.
            CodegenError, CompileError: code generation or LLVM failed.
        """
