"""The Target interface: where kernels are compiled to and run.

A target turns a Scop scheduled by a recipe into a :class:`~polytf.targets.kernel.Kernel`
(on the CPU a :class:`CompiledKernel`) and names itself by a fingerprint that enters every
cache key (triple, CPU name and features; compute capability on the GPU).
"""

from __future__ import annotations

import abc
import ctypes
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import llvmlite.binding as llvm

from polytf.errors import CompileError
from polytf.poly.access_bounds import array_bytes
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement
from polytf.schedules.analytic_recipe import CacheSizes
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.target_limits import TargetLimits
from polytf.targets.kernel import Kernel

if TYPE_CHECKING:  # the scheduler and the code generator: imported where a kernel is compiled,
    # not by a load that links every kernel from the cache
    import islpy as isl

    from polytf.schedules.builder import ScheduledScop
    from polytf.schedules.search_space import SearchSpace


@dataclass
class CompiledKernel(Kernel):
    """A CPU kernel (:class:`~polytf.targets.kernel.Kernel`) ready to run on a table of
    array pointers.

    Attributes:
        scop, recipe, arrays, argument_bytes, llvm_ir, constant_copies: as a
            :class:`~polytf.targets.kernel.Kernel`'s. Empty ``arrays`` means
            ``scop.arrays``; empty ``argument_bytes`` means each array's shape times its
            item size.
        function: ``void f(void** arrays, int64 threads)`` as a ctypes function.
        owner: objects that must outlive ``function`` (the JIT engine).
        object_code: the relocatable object code ``function`` was linked from (what the code
            cache stores; empty for code that was not made from an object).
        symbol: the entry point's name in ``object_code``.
        inputs_read_ahead_only: the input arrays only its constant copies read (the code never
            does), when known (a kernel linked from the code cache); None: the model's plan
            works them out from the Scop and the recipe
            (:func:`polytf.plan.binding_plan.arrays_read_ahead_only`).
        scratch_written_whole: the scratch arrays its copies write entirely on every call, when
            known; None as above (:func:`polytf.plan.binding_plan.scratch_written_whole`).
    """

    scop: Scop
    recipe: ScheduleRecipe
    function: ctypes._CFuncPtr
    arrays: tuple[ArrayInfo, ...] = ()
    argument_bytes: tuple[int, ...] = ()
    llvm_ir: str = ""
    owner: object = field(default=None, repr=False)
    constant_copies: tuple[Statement, ...] = ()
    object_code: bytes = field(default=b"", repr=False)
    symbol: str = ""
    inputs_read_ahead_only: frozenset[str] | None = None
    scratch_written_whole: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not self.arrays:
            self.arrays = tuple(self.scop.arrays)
        if not self.argument_bytes:
            self.argument_bytes = tuple(array_bytes(a) for a in self.arrays)
        if len(self.argument_bytes) != len(self.arrays):
            raise ValueError(f"kernel {self.scop.name}: {len(self.argument_bytes)} argument sizes for {len(self.arrays)} arguments")

    def __call__(self, array_table: ctypes.Array, threads: int) -> None:
        """Run once on a table built by :class:`polytf.runtime.cpu.argument_table.ArgumentTable`
        (which checks every buffer's size); ``array_table[i]`` is the address of ``arrays[i]``.

        Raises:
            ValueError: the table does not have one entry per argument.
        """
        if len(array_table) != len(self.arrays):
            raise ValueError(f"kernel {self.scop.name} takes {len(self.arrays)} arrays, the table has {len(array_table)}")
        self.function(array_table, int(threads))


def parse_verified(code: str, kernel: str, dialect: str = "") -> llvm.ModuleRef:
    """LLVM IR text (``dialect``: ``"NVPTX "`` for messages) parsed and verified.

    Raises:
        CompileError: LLVM rejected the module (a polytf bug: please report it).
    """
    try:
        module = llvm.parse_assembly(code)
        module.verify()
    except RuntimeError as error:
        raise CompileError(f"LLVM rejected the {dialect}IR of kernel {kernel}: {error}") from None
    return module


class Target(abc.ABC):
    """A code-generation target."""

    name: str = "abstract"

    @property
    @abc.abstractmethod
    def vector_lanes(self) -> int:
        """float32 lanes of the target's widest vector registers."""

    @property
    @abc.abstractmethod
    def vector_registers(self) -> int:
        """Vector registers the target has (the register tiles of the search space fit them)."""

    @property
    def limits(self) -> TargetLimits:
        """What recipe validation checks register tiles against."""
        return TargetLimits(self.vector_lanes, self.vector_registers)

    @property
    def cache_sizes(self) -> CacheSizes:
        """Per-core data cache sizes (they size the analytic default recipe)."""
        return CacheSizes()

    def search_space(self, scop: Scop, threads: int) -> SearchSpace:
        """The search space of ``scop`` on this target with ``threads`` threads: register
        tiles from its vector lanes and registers, the default recipe blocked for its caches."""
        from polytf.schedules.search_space import SearchSpace

        return SearchSpace.for_scop(scop, threads, self.vector_lanes, self.vector_registers, self.cache_sizes)

    @abc.abstractmethod
    def fingerprint(self) -> dict:
        """Everything about the target that changes generated code (enters cache keys)."""

    @abc.abstractmethod
    def emit(self, scheduled: ScheduledScop, ast: isl.AstNode, recipe: ScheduleRecipe) -> str:
        """The code text of a scheduled kernel (LLVM IR on the CPU), from its isl AST.

        Raises:
            CodegenError: the target cannot generate code for the AST.
        """

    @abc.abstractmethod
    def compile_code(self, code: str, scop: Scop, scheduled: ScheduledScop, recipe: ScheduleRecipe) -> Kernel:
        """Compile the text :meth:`emit` produced for ``scheduled`` (``scop`` scheduled with
        ``recipe``) into a runnable kernel.

        Raises:
            CompileError: the target's compiler rejected the code.
        """

    def compile(self, scop: Scop, recipe: ScheduleRecipe, constant_arrays: frozenset[str] = frozenset()) -> Kernel:
        """Schedule, generate and compile ``scop`` through the one compile driver
        (:func:`polytf.targets.compile_driver.compile_kernel`); data-layout copies of the
        arrays named in ``constant_arrays`` (inputs that hold weights) are left to the caller
        (:attr:`Kernel.constant_copies`).

        Raises:
            ScheduleError: the recipe is illegal for the Scop.
            CodegenError, CompileError: code generation or the target's compiler failed.
        """
        from polytf.targets.compile_driver import compile_kernel

        return compile_kernel(scop, recipe, self, constant_arrays)
