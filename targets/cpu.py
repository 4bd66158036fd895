"""CpuTarget: compiles kernels for a CPU with llvmlite, JIT (LLVM MCJIT) or ahead of time.

A CPU target is a triple, a CPU name and a feature string, as LLVM names them. By
default all three are the host's (``get_process_triple()``, ``get_host_cpu_name()``,
``get_host_cpu_features()``), so AVX-512 is used where the CPU has it, and kernels are
JIT-compiled into this process. Another triple (``aarch64-unknown-linux-gnu`` with CPU
``neoverse-n1``, say) is a cross target: its kernels are emitted and optimised for that
machine (its vector lanes and registers size the search space) but cannot run here;
``polytf compile`` writes them to an object file (:mod:`polytf.export`). Parallel kernels
call libgomp (``GOMP_parallel``), loaded into the process once.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys
import threading
from functools import lru_cache
from typing import TYPE_CHECKING

import llvmlite
import llvmlite.binding as llvm

from polytf.config import CPU_ENVIRONMENT_VARIABLE, CodegenConfig
from polytf.errors import CompileError, ForeignCpuError
from polytf.poly.access_bounds import required_bytes
from polytf.poly.scop import Scop
from polytf.schedules.analytic_recipe import CacheSizes
from polytf.schedules.recipe import CpuRecipe, ScheduleRecipe
from polytf.targets.cpu_kinds import cpu_kind_from_environment, missing_features
from polytf.targets.host_caches import host_cache_sizes
from polytf.targets.target import CompiledKernel, Target, parse_verified

if TYPE_CHECKING:  # the scheduler: imported where a kernel is compiled, not by a load that links
    import islpy as isl

    from polytf.schedules.builder import ScheduledScop

_LOCK = threading.Lock()
KERNEL_FUNCTION_TYPE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64)
#: ``void <kernel>_slices(void** arrays, int64 threads, int64 count, int64* strides, int64*
#: thread_strides)``: the kernel run ``count`` times on addresses moved on by ``strides`` bytes
#: per run and ``thread_strides`` per thread (:mod:`polytf.targets.llvm_codegen`,
#: :mod:`polytf.runtime.cpu.sliced_kernel`)
SLICES_FUNCTION_TYPE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64))
#: the suffix of a kernel's slices entry point
SLICES_SUFFIX = "_slices"


#: Triple aliases ``--target-triple`` accepts, and the LLVM triple each stands for.
TRIPLE_ALIASES = {"aarch64": "aarch64-unknown-linux-gnu", "arm64": "aarch64-unknown-linux-gnu", "x86_64": "x86_64-unknown-linux-gnu"}
#: Architectures a CpuTarget generates code for (the first part of the triple).
SUPPORTED_ARCHITECTURES = ("x86_64", "aarch64")


@lru_cache(maxsize=1)
def _initialise_all_targets() -> None:
    """Initialise every LLVM target in llvmlite's build (cross targets: AArch64 on x86-64)."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def normalise_triple(triple: str) -> str:
    """The LLVM triple for ``triple`` or one of :data:`TRIPLE_ALIASES` (``"aarch64"``).

    Raises:
        CompileError: an architecture polytf does not generate CPU code for, or a triple LLVM
            does not know; the message lists the supported ones.
    """
    triple = TRIPLE_ALIASES.get(triple.strip(), triple.strip())
    architecture = triple.split("-")[0]
    if architecture == "arm64":
        architecture, triple = "aarch64", "aarch64" + triple[len("arm64") :]
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise CompileError(
            f"target triple {triple!r}: polytf generates CPU code for {', '.join(SUPPORTED_ARCHITECTURES)} "
            "(e.g. aarch64-unknown-linux-gnu or x86_64-unknown-linux-gnu)"
        )
    _initialise_all_targets()
    try:
        llvm.Target.from_triple(triple)
    except RuntimeError as error:
        raise CompileError(f"target triple {triple!r}: LLVM does not know it ({error})") from None
    return triple


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


@lru_cache(maxsize=1)
def _vectorised_epilogues_off() -> None:
    """Turn off LLVM's epilogue vectorisation (``-enable-epilogue-vectorization=false``, a
    process-wide LLVM option) before the first kernel is optimised.

    A vectorised loop whose trip count LLVM cannot prove a multiple of its vector width gets,
    besides its scalar remainder, a second vector loop at a narrower width for the remainder:
    a third copy of the loop body. polytf's loops are vectorised at the target's full width
    with constant bounds, the remainders are short and rare, and the third copy cost code
    generation time: a Winograd F(4×4, 3×3) kernel of ResNet50 (seventy loop nests) took
    819 ms of code generation with it and 336 ms without, ResNet50's 27 distinct kernels
    5.8 s of one core instead of 6.6 s; the models ran as fast (ResNet50 15.1 and 15.2 ms,
    MobileNetV2 2.38 and 2.34 ms, DenseNet121 13.8 and 14.2 ms, medians of four alternating
    processes, AMD EPYC ``znver5``, 2 threads).
    """
    llvm.set_option("polytf", "-enable-epilogue-vectorization=false")


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
    """A CPU: the host (default), or a cross target named by triple, CPU and features.

    Args:
        config: LLVM settings (optimisation level, fast math).
        cpu_name: LLVM CPU name (``"znver5"``, ``"neoverse-n1"``, ``"generic"``); default the
            host's for the host triple (or the kind ``POLYTF_CPU`` names:
            :mod:`polytf.targets.cpu_kinds`), ``"generic"`` for another one.
        features: LLVM feature string (``"+avx2,+fma"``, ``"+neon,+sve"``); default the host's
            when the CPU is the host's (the kind's under ``POLYTF_CPU``), else ``""`` (the
            features LLVM's CPU model implies). The search space reads vector lanes from the
            ``+`` features, so name them for an x86-64 cross target.
        triple: LLVM target triple or an alias of :data:`TRIPLE_ALIASES`; default the
            process's (the host). The fingerprint, and so every cache key, carries it.

    Raises:
        CompileError: a triple of an unsupported architecture, or one LLVM does not know.
        ArgumentError: ``POLYTF_CPU`` names no CPU kind.
    """

    name = "cpu"

    def __init__(
        self, config: CodegenConfig | None = None, cpu_name: str | None = None, features: str | None = None, triple: str | None = None
    ) -> None:
        _initialise()
        self.config = config or CodegenConfig()
        host_triple = llvm.get_process_triple()
        self.triple = normalise_triple(triple) if triple else host_triple
        #: whether the target's architecture is the host's (its programs link with the host's tools)
        self.host_architecture = self.architecture == host_triple.split("-")[0]
        host_cpu = self.host_architecture and cpu_name is None
        kind = cpu_kind_from_environment() if host_cpu and features is None and self.architecture == "x86_64" else None
        if kind is not None:
            cpu_name, features = kind.cpu_name, kind.features
        self.cpu_name = cpu_name or (llvm.get_host_cpu_name() if host_cpu else "generic")
        host_features = llvm.get_host_cpu_features().flatten() if self.host_architecture else ""
        if features is None:
            features = host_features if host_cpu else ""
        self.features = features
        #: features the code may use that this CPU lacks (empty for the host, or a cross target)
        self.missing_features = tuple(missing_features(features, host_features)) if self.host_architecture else ()
        #: whether code for this target runs in this process: the host's architecture, and no
        #: feature named in ``features`` that this CPU lacks (LLVM's CPU model may imply more:
        #: name them in ``features`` for a CPU other than the host's)
        self.runs_here = self.host_architecture and not self.missing_features
        self.target_machine = self._create_target_machine()

    def _create_target_machine(self, reloc: str = "default", codemodel: str = "jitdefault") -> llvm.TargetMachine:
        # An MCJIT engine takes ownership of its target machine: each engine gets its own.
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(
            cpu=self.cpu_name, features=self.features, opt=self.config.optimization_level, reloc=reloc, codemodel=codemodel
        )

    def object_target_machine(self) -> llvm.TargetMachine:
        """A target machine for object files: position-independent code (an object can go into
        a shared library), the default code model."""
        return self._create_target_machine(reloc="pic", codemodel="default")

    @property
    def architecture(self) -> str:
        """The triple's architecture: ``"x86_64"`` or ``"aarch64"``."""
        return self.triple.split("-")[0]

    @property
    def _enabled_features(self) -> set[str]:
        return {f[1:] for f in self.features.split(",") if f.startswith("+")}

    @property
    def vector_lanes(self) -> int:
        """float32 lanes of the widest vector registers the target has: 16 (AVX-512), 8 (AVX),
        4 (SSE; NEON on AArch64, and SVE, whose length is only known at run time and is at
        least 128 bits)."""
        if self.architecture == "aarch64":
            return 4
        enabled = self._enabled_features
        if "avx512f" in enabled:
            return 16
        if "avx" in enabled:
            return 8
        return 4

    @property
    def vector_registers(self) -> int:
        """Vector registers: zmm0-31 with AVX-512, ymm0-15 / xmm0-15 otherwise (x86-64);
        v0-v31 on AArch64 (NEON, and z0-z31 with SVE)."""
        if "avx512f" in self._enabled_features or self.architecture == "aarch64":
            return 32
        return 16

    @property
    def cache_sizes(self) -> CacheSizes:
        """The host's per-core data caches (sysfs; :mod:`polytf.targets.host_caches`); a
        common core's (:class:`CacheSizes` defaults) for a cross target."""
        return host_cache_sizes() if self.host_architecture else CacheSizes()

    @property
    def openmp(self) -> bool:
        """Whether parallel kernels call libgomp: when this process could load it, or always
        for a cross target (its programs link libgomp)."""
        return openmp_available() or not self.host_architecture

    def fingerprint(self) -> dict:
        return {
            "target": self.name,
            "triple": self.triple,
            "cpu": self.cpu_name,
            "features": self.features,
            "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm.llvm_version_info)),
            "openmp": self.openmp,
        }

    def emit(self, scheduled: ScheduledScop, ast: isl.AstNode, recipe: ScheduleRecipe) -> str:
        """Unoptimised LLVM IR text of a scheduled kernel (its arrays are the kernel's
        arguments), for this target's triple and data layout. A :class:`GpuRecipe`'s
        mapping runs as plain loops on one thread, vectorised as LLVM decides (the CUDA
        runtime's emulated device, :mod:`polytf.runtime.cuda.emulation`).

        Raises:
            CodegenError: an AST or expression the code generator does not handle.
        """
        vector_width, parallel = (recipe.vector_width, recipe.parallel) if isinstance(recipe, CpuRecipe) else (0, False)
        from polytf.targets.llvm_codegen import KernelModuleBuilder  # the code generator: not to link cached code

        builder = KernelModuleBuilder(
            scheduled.scop,
            ast,
            vector_width=vector_width,
            unroll=recipe.unroll,
            parallel=parallel and self.openmp,
            fast_math=self.config.fast_math,
            native_vector_width=self.vector_lanes,
            openmp=self.openmp,
            flush_denormals=not self.config.ieee_denormals and self.architecture == "x86_64",
        )
        module = builder.build()
        module.triple = self.triple
        module.data_layout = str(self.target_machine.target_data)
        return str(module)

    def emit_llvm_ir(self, scop: Scop, recipe: ScheduleRecipe, constant_arrays: frozenset[str] = frozenset()) -> str:
        """Unoptimised LLVM IR of the kernel through the compile driver (raises ScheduleError /
        CodegenError); ``constant_arrays`` as for :meth:`compile`."""
        from polytf.targets.compile_driver import emit_kernel

        return emit_kernel(scop, recipe, self, constant_arrays).code

    def optimise(self, ir_text: str, kernel: str) -> llvm.ModuleRef:
        """Parse, verify and optimise LLVM IR text at the configured level.

        LLVM's own loop unroller runs only where a loop asks for it (the recipe's
        ``llvm.loop.unroll.count`` or ``unroll.disable``: "OnlyWhenForced" in LLVM's pass
        pipeline): the microkernels are unrolled over their register tiles already, and the
        recipe's unroll factor is the tuner's choice. Measured on the default recipes
        (``results/load_time.md``, AMD EPYC ``znver4``, 2 threads): with the unroller on,
        optimisation and code generation of ResNet50's 27 distinct kernels took 3.7 s and the
        model ran in 39.7 ms; with it off 1.4 s and 39.4 ms (MobileNetV2: 5.4 s, 6.48 ms ->
        2.2 s, 5.87 ms; a Transformer encoder: 1.5 s, 1.66 ms -> 0.65 s, 1.68 ms); optimisation
        level 2 instead saved less time (2.0 s on ResNet50) for the same speed. Vectorised
        epilogues are off (:func:`_vectorised_epilogues_off`).

        Raises:
            CompileError: LLVM rejected the module (a polytf bug: please report it).
        """
        module = parse_verified(ir_text, kernel)
        _vectorised_epilogues_off()
        options = llvm.create_pipeline_tuning_options(speed_level=self.config.optimization_level)
        options.loop_vectorization = True
        options.slp_vectorization = True
        options.loop_unrolling = False  # only where a loop's metadata forces it (docstring)
        options.loop_interleaving = True
        pass_builder = llvm.create_pass_builder(self.target_machine, options)
        with _native_stderr_silenced():
            pass_builder.getModulePassManager().run(module, pass_builder)
        return module

    def _require_runs_here(self, what: str) -> None:
        """Raise ForeignCpuError unless code for this target can run in this process."""
        if not self.host_architecture:
            raise ForeignCpuError(
                f"{what}: code for {self.triple} cannot run on this {llvm.get_process_triple()} host; "
                "`polytf compile --target-triple ...` writes it to an object file instead"
            )
        if self.missing_features:
            raise ForeignCpuError(
                f"{what}: code for CPU {self.cpu_name} cannot run on this {llvm.get_host_cpu_name()}, which lacks "
                f"{', '.join(self.missing_features)}; to run it here, generate code for this CPU ({CPU_ENVIRONMENT_VARIABLE} unset or host)"
            )

    def compile_function(self, ir_text: str, name: str) -> tuple[int, llvm.ExecutionEngine]:
        """JIT-compile a module of polytf's own helper code (not a kernel: the FMA peak loop, the
        cache flush) with the target's pipeline; returns the address of function ``name`` and
        the engine that owns it (keep it alive as long as the address is called).

        Raises:
            CompileError: LLVM rejected the module or produced no function ``name``.
        """
        self._require_runs_here(name)
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

    def compile_object(self, code: str, kernel: str) -> tuple[bytes, str]:
        """Optimise LLVM IR text from :meth:`emit` and generate its relocatable object code,
        with the target machine a JIT engine of this target uses (so that linking the object
        with :meth:`link_object` gives the code MCJIT would have made from the IR).

        Returns:
            ``(object code, optimised LLVM IR text)``.

        Raises:
            CompileError: LLVM rejected the module.
        """
        with _LOCK:
            module = self.optimise(code, kernel)
            try:
                object_code = self._create_target_machine().emit_object(module)
            except RuntimeError as error:
                raise CompileError(f"LLVM could not compile kernel {kernel}: {error}") from None
        return object_code, str(module)

    def link_object(self, object_code: bytes, symbol: str) -> tuple[int, llvm.ExecutionEngine]:
        """Load object code from :meth:`compile_object` (this process, or a cached file of
        the same target: :mod:`polytf.compiler.code_cache`) into a JIT engine and resolve its
        entry point ``symbol`` (libgomp and libm calls against this process); returns the
        address and the engine that owns the code (keep it alive as long as the address is
        called). Takes about a millisecond: no LLVM optimisation, no code generation.

        Raises:
            ForeignCpuError: code for another architecture, or for a CPU whose features this one lacks.
            CompileError: an object LLVM cannot load, or no ``symbol`` in it.
        """
        self._require_runs_here(symbol)
        with _LOCK:
            try:
                engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._create_target_machine())
                engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
                engine.finalize_object()
                address = engine.get_function_address(symbol)
            except RuntimeError as error:
                raise CompileError(f"LLVM could not load the object code of kernel {symbol}: {error}") from None
        if not address:
            raise CompileError(f"the object code has no entry point {symbol}")
        return address, engine

    @staticmethod
    def slices_function(owner: object, symbol: str) -> ctypes._CFuncPtr | None:
        """The slices entry point (:data:`SLICES_FUNCTION_TYPE`) of kernel ``symbol`` whose code
        the JIT engine ``owner`` holds, or None (no engine, or code made before kernels had one)."""
        if not isinstance(owner, llvm.ExecutionEngine) or not symbol:
            return None
        with _LOCK:
            address = owner.get_function_address(symbol + SLICES_SUFFIX)
        return SLICES_FUNCTION_TYPE(address) if address else None

    def compile_code(self, code: str, scop: Scop, scheduled: ScheduledScop, recipe: ScheduleRecipe) -> CompiledKernel:
        """Optimise LLVM IR text from :meth:`emit` (``scheduled`` is ``scop`` scheduled with
        ``recipe``), generate its object code (:meth:`compile_object`) and link it into this
        process (:meth:`link_object`); the kernel keeps its object code for the code cache.

        Raises:
            ForeignCpuError: the code was generated (optimised, object code written) for a CPU
                this process cannot run it on.
            CompileError: LLVM rejected the module or produced no entry point.
        """
        kernel = scheduled.scop
        object_code, optimised_ir = self.compile_object(code, kernel.name)  # for any CPU: what cannot run here fails to link
        address, engine = self.link_object(object_code, kernel.name)
        return CompiledKernel(
            scop,
            recipe,
            KERNEL_FUNCTION_TYPE(address),
            arrays=kernel.arrays,
            # every access of the scheduled kernel stays inside its array: these sizes suffice
            argument_bytes=required_bytes(kernel),
            llvm_ir=optimised_ir,
            owner=engine,
            constant_copies=scheduled.constant_copies,
            object_code=object_code,
            symbol=kernel.name,
        )

    def assembly(self, scop: Scop, recipe: ScheduleRecipe, constant_arrays: frozenset[str] = frozenset()) -> str:
        """Host assembly of the optimised kernel (for ``polytf show``); ``constant_arrays``
        as for :meth:`compile`."""
        return self.assembly_of(self.emit_llvm_ir(scop, recipe, constant_arrays), scop.name)

    def assembly_of(self, code: str, kernel: str) -> str:
        """Assembly of LLVM IR text from :meth:`emit`, optimised as :meth:`compile_code` does."""
        return self.target_machine.emit_assembly(self.optimise(code, kernel))
