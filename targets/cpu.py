"""CpuTarget: JIT-compiles kernels for the host CPU with llvmlite (LLVM MCJIT).

The target machine is created for the host by name and features
(``get_host_cpu_name()``, ``get_host_cpu_features()``), so AVX-512 is used where
the CPU has it. Parallel kernels call libgomp (``GOMP_parallel``), loaded into the
process once.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys
import threading
from functools import lru_cache

import islpy as isl
import llvmlite
import llvmlite.binding as llvm

from polytf.config import CodegenConfig
from polytf.errors import CompileError
from polytf.poly.access_bounds import required_bytes
from polytf.poly.scop import Scop
from polytf.schedules.analytic_recipe import CacheSizes
from polytf.schedules.builder import ScheduledScop
from polytf.schedules.recipe import ScheduleRecipe
from polytf.targets.compile_driver import emit_kernel
from polytf.targets.host_caches import host_cache_sizes
from polytf.targets.llvm_codegen import KernelModuleBuilder
from polytf.targets.target import CompiledKernel, Target, parse_verified

_LOCK = threading.Lock()
KERNEL_FUNCTION_TYPE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64)


@lru_cache(maxsize=1)
def _initialise() -> bool:
    """Initialise LLVM's native target and load libgomp; returns whether OpenMP is available."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for candidate in (ctypes.util.find_library("gomp"), "libgomp.so.1"):
        if not candidate:
            continue
        try:
            llvm.load_library_permanently(candidate)
            return True
        except RuntimeError:
            continue
    return False


@contextlib.contextmanager
def _native_stderr_silenced():
    """Discard what native code writes to file descriptor 2 meanwhile.

    LLVM's loop vectoriser prints an analysis remark for every loop that carries a
    vector-width hint and cannot be vectorised; while the tuner explores recipes that is
    expected, and the remarks would bury the progress display.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable stderr: nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def openmp_available() -> bool:
    """True when libgomp could be loaded, so parallel kernels can run."""
    return _initialise()


class CpuTarget(Target):
    """The host CPU.

    Args:
        config: LLVM settings (optimisation level, fast math).
        cpu_name: LLVM CPU name; default the host's (e.g. ``"znver5"``).
        features: LLVM feature string; default the host's.
    """

    name = "cpu"

    def __init__(self, config: CodegenConfig | None = None, cpu_name: str | None = None, features: str | None = None) -> None:
        _initialise()
        self.config = config or CodegenConfig()
        self.cpu_name = cpu_name or llvm.get_host_cpu_name()
        self.features = features if features is not None else llvm.get_host_cpu_features().flatten()
        self.triple = llvm.get_process_triple()
        self.target_machine = self._create_target_machine()

    def _create_target_machine(self) -> llvm.TargetMachine:
        # An MCJIT engine takes ownership of its target machine: each engine gets its own.
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu_name, features=self.features, opt=self.config.optimization_level, codemodel="jitdefault")

    @property
    def _enabled_features(self) -> set[str]:
        return {f[1:] for f in self.features.split(",") if f.startswith("+")}

    @property
    def vector_lanes(self) -> int:
        """float32 lanes of the widest vector registers the target has (16, 8 or 4)."""
        enabled = self._enabled_features
        if "avx512f" in enabled:
            return 16
        if "avx" in enabled:
            return 8
        return 4

    @property
    def vector_registers(self) -> int:
        """Vector registers: zmm0-31 with AVX-512, ymm0-15 / xmm0-15 otherwise (x86-64);
        32 on AArch64 (NEON)."""
        if "avx512f" in self._enabled_features or self.triple.startswith("aarch64"):
            return 32
        return 16

    @property
    def cache_sizes(self) -> CacheSizes:
        """The host's per-core data caches (sysfs; :mod:`polytf.targets.host_caches`)."""
        return host_cache_sizes()

    def fingerprint(self) -> dict:
        return {
            "target": self.name,
            "triple": self.triple,
            "cpu": self.cpu_name,
            "features": self.features,
            "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm.llvm_version_info)),
            "openmp": openmp_available(),
        }

    def emit(self, scheduled: ScheduledScop, ast: isl.AstNode, recipe: ScheduleRecipe) -> str:
        """Unoptimised LLVM IR text of a scheduled kernel (its arrays are the kernel's
        arguments), for this target's triple and data layout.

        Raises:
            CodegenError: an AST or expression the code generator does not handle.
        """
        builder = KernelModuleBuilder(
            scheduled.scop,
            ast,
            vector_width=recipe.vector_width,
            unroll=recipe.unroll,
            parallel=recipe.parallel and openmp_available(),
            fast_math=self.config.fast_math,
            native_vector_width=self.vector_lanes,
        )
        module = builder.build()
        module.triple = self.triple
        module.data_layout = str(self.target_machine.target_data)
        return str(module)

    def emit_llvm_ir(self, scop: Scop, recipe: ScheduleRecipe, constant_arrays: frozenset[str] = frozenset()) -> str:
        """Unoptimised LLVM IR of the kernel through the compile driver (raises ScheduleError /
        CodegenError); ``constant_arrays`` as for :meth:`compile`."""
        return emit_kernel(scop, recipe, self, constant_arrays).code

    def optimise(self, ir_text: str, kernel: str) -> llvm.ModuleRef:
        """Parse, verify and optimise LLVM IR text at the configured level.

        Raises:
            CompileError: LLVM rejected the module (a polytf bug: please report it).
        """
        module = parse_verified(ir_text, kernel)
        options = llvm.create_pipeline_tuning_options(speed_level=self.config.optimization_level)
        options.loop_vectorization = True
        options.slp_vectorization = True
        options.loop_unrolling = True
        options.loop_interleaving = True
        pass_builder = llvm.create_pass_builder(self.target_machine, options)
        with _native_stderr_silenced():
            pass_builder.getModulePassManager().run(module, pass_builder)
        return module

    def compile_function(self, ir_text: str, name: str) -> tuple[int, llvm.ExecutionEngine]:
        """JIT-compile a module of polytf's own helper code (not a kernel: the FMA peak loop, the
        cache flush) with the target's pipeline; returns the address of function ``name`` and
        the engine that owns it (keep it alive as long as the address is called).

        Raises:
            CompileError: LLVM rejected the module or produced no function ``name``.
        """
        with _LOCK:
            module = self.optimise(ir_text, name)
            try:
                engine = llvm.create_mcjit_compiler(module, self._create_target_machine())
                engine.finalize_object()
                address = engine.get_function_address(name)
            except RuntimeError as error:
                raise CompileError(f"LLVM could not compile {name}: {error}") from None
        if not address:
            raise CompileError(f"LLVM produced no entry point {name}")
        return address, engine

    def compile_code(self, code: str, scop: Scop, scheduled: ScheduledScop, recipe: ScheduleRecipe) -> CompiledKernel:
        """Optimise LLVM IR text from :meth:`emit` (``scheduled`` is ``scop`` scheduled with
        ``recipe``) and JIT-compile it (MCJIT).

        Raises:
            CompileError: LLVM rejected the module or produced no entry point.
        """
        kernel = scheduled.scop
        # every access of the scheduled kernel stays inside its array: these sizes suffice
        argument_bytes = required_bytes(kernel)
        with _LOCK:
            module = self.optimise(code, kernel.name)
            try:
                engine = llvm.create_mcjit_compiler(module, self._create_target_machine())
                engine.finalize_object()
                address = engine.get_function_address(kernel.name)
            except RuntimeError as error:
                raise CompileError(f"LLVM could not compile kernel {kernel.name}: {error}") from None
        if not address:
            raise CompileError(f"LLVM produced no entry point for kernel {kernel.name}")
        return CompiledKernel(
            scop,
            recipe,
            KERNEL_FUNCTION_TYPE(address),
            arrays=kernel.arrays,
            argument_bytes=argument_bytes,
            llvm_ir=str(module),
            owner=engine,
            constant_copies=scheduled.constant_copies,
        )

    def assembly(self, scop: Scop, recipe: ScheduleRecipe, constant_arrays: frozenset[str] = frozenset()) -> str:
        """Host assembly of the optimised kernel (for ``polytf show``); ``constant_arrays``
        as for :meth:`compile`."""
        return self.assembly_of(self.emit_llvm_ir(scop, recipe, constant_arrays), scop.name)

    def assembly_of(self, code: str, kernel: str) -> str:
        """Assembly of LLVM IR text from :meth:`emit`, optimised as :meth:`compile_code` does."""
        return self.target_machine.emit_assembly(self.optimise(code, kernel))
