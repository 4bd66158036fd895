"""CudaTarget: kernels as PTX for NVIDIA GPUs (llvmlite's NVPTX back end), run with CuPy.

Code generation needs no GPU: :meth:`CudaTarget.emit` gives LLVM IR for
``nvptx64-nvidia-cuda`` (:mod:`polytf.targets.nvptx_codegen`) and :meth:`CudaTarget.ptx`
the PTX for the target's compute capability, which ``ptxas`` assembles on any machine
(:mod:`polytf.targets.ptxas`). Running needs CuPy and a device:
:class:`CudaKernel` loads its PTX with ``cupy.cuda.Module().load`` on first call and
launches it with the grid, block and dynamic shared memory of its schedule.

The PTX ISA version is the lowest one the compute capability needs (PTX ISA notes,
"PTX ISA version" table), which every driver that supports the chip accepts; LLVM exits
the process on a (cpu, PTX version) pair it does not know, so the pair is checked
against :data:`PTX_VERSIONS` before a target machine is created.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import llvmlite
import llvmlite.binding as llvm

from polytf.config import CodegenConfig
from polytf.errors import CodegenError, CompileError
from polytf.islpy_on_demand import isl
from polytf.poly.access_bounds import array_bytes, required_bytes
from polytf.poly.scop import ArrayInfo, Scop
from polytf.schedules.builder import ScheduledScop
from polytf.schedules.gpu_grid import GpuLaunch
from polytf.schedules.gpu_search_space import GpuSearchSpace
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.target_limits import TargetLimits
from polytf.targets.kernel import Kernel
from polytf.targets.nvptx_codegen import ARGUMENT_ALIGNMENT, NvptxModuleBuilder, global_arrays, kernel_names
from polytf.targets.target import Target, parse_verified

TRIPLE = "nvptx64-nvidia-cuda"
#: compute capability -> the PTX ISA version it needs (as LLVM's ``+ptxNN`` feature)
PTX_VERSIONS = {"sm_70": 60, "sm_72": 61, "sm_75": 63, "sm_80": 70, "sm_86": 71, "sm_87": 74, "sm_89": 78, "sm_90": 78}
#: compute capability the target emits for without a device
DEFAULT_COMPUTE_CAPABILITY = "sm_80"
#: FP32 lanes per streaming multiprocessor, by compute capability major.minor (CUDA C++
#: Programming Guide, "Arithmetic Instructions" throughput table)
FP32_LANES = {(7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128, (9, 0): 128}
_LOCK = threading.Lock()


def cuda_available() -> bool:
    """True when CuPy imports and sees a CUDA device."""
    try:
        import cupy
    except ImportError:
        return False
    try:
        return bool(cupy.cuda.is_available())
    except Exception:  # a driver too old or broken: no device for polytf
        return False


def _cupy():
    try:
        import cupy
    except ImportError:
        raise CompileError("running CUDA kernels needs CuPy: install cupy-cuda12x (or cupy-cuda13x) and run on a machine with an NVIDIA GPU") from None
    if not cuda_available():
        raise CompileError("no CUDA device is visible to CuPy: run on a machine with an NVIDIA GPU and its driver")
    return cupy


def ptx_compute_capability(compute_capability: str) -> str:
    """The compute capability PTX is emitted for: ``compute_capability`` itself when LLVM
    knows it, else the highest known one below it (PTX is compiled forward by the driver).

    Raises:
        CompileError: not of the form ``sm_XY``, or older than every known one.
    """
    if compute_capability in PTX_VERSIONS:
        return compute_capability
    number = compute_capability[3:].rstrip("a")
    if not compute_capability.startswith("sm_") or not number.isdigit():
        raise CompileError(f"unknown compute capability {compute_capability!r}; give one like sm_80 or sm_90")
    older = [c for c in PTX_VERSIONS if int(c[3:]) <= int(number)]
    if not older:
        raise CompileError(f"compute capability {compute_capability} is older than every one polytf emits PTX for ({', '.join(PTX_VERSIONS)})")
    return max(older, key=lambda c: int(c[3:]))


@dataclass(frozen=True)
class CudaDevice:
    """What code generation and the search space need to know of a GPU.

    Attributes:
        name: the device's name (e.g. ``"NVIDIA H100 80GB HBM3"``).
        compute_capability: ``"sm_XY"``.
        multiprocessors: streaming multiprocessors (SMs).
        clock_rate_khz: SM clock, kHz.
        max_threads_per_block: threads a block may have.
        shared_memory_per_block: shared memory a block may use, bytes (the opt-in maximum).
        warp_size: threads per warp.
        registers_per_block: 32-bit registers per block.
        driver_version, runtime_version: CUDA driver and runtime versions (e.g. 13000).
    """

    name: str = "offline"
    compute_capability: str = DEFAULT_COMPUTE_CAPABILITY
    multiprocessors: int = 0
    clock_rate_khz: int = 0
    max_threads_per_block: int = 1024
    shared_memory_per_block: int = 48 * 1024
    warp_size: int = 32
    registers_per_block: int = 65536
    driver_version: int = 0
    runtime_version: int = 0

    @staticmethod
    def current() -> CudaDevice:
        """The current CuPy device.

        Raises:
            CompileError: CuPy is missing or sees no device.
        """
        cupy = _cupy()
        runtime = cupy.cuda.runtime
        device = cupy.cuda.Device().id
        properties = runtime.getDeviceProperties(device)

        def attribute(name: str, default: int = 0) -> int:
            code = getattr(runtime, name, None)
            return int(runtime.deviceGetAttribute(code, device)) if code is not None else default

        name = properties["name"]
        return CudaDevice(
            name=name.decode() if isinstance(name, bytes) else str(name),
            compute_capability=f"sm_{properties['major']}{properties['minor']}",
            multiprocessors=int(properties["multiProcessorCount"]),
            clock_rate_khz=attribute("cudaDevAttrClockRate", int(properties.get("clockRate", 0))),
            max_threads_per_block=int(properties["maxThreadsPerBlock"]),
            shared_memory_per_block=int(properties.get("sharedMemPerBlockOptin", properties["sharedMemPerBlock"])),
            warp_size=int(properties["warpSize"]),
            registers_per_block=int(properties["regsPerBlock"]),
            driver_version=int(runtime.driverGetVersion()),
            runtime_version=int(runtime.runtimeGetVersion()),
        )

    @property
    def fp32_lanes_per_multiprocessor(self) -> int:
        major, minor = int(self.compute_capability[3:-1]), int(self.compute_capability[-1])
        return FP32_LANES.get((major, minor), 128)

    @property
    def fp32_peak_flops(self) -> float:
        """FP32 peak without tensor cores: SMs x FP32 lanes x 2 (an FMA) x clock, FLOP/s."""
        return self.multiprocessors * self.fp32_lanes_per_multiprocessor * 2 * self.clock_rate_khz * 1e3


@lru_cache(maxsize=1)
def _initialise() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@dataclass
class CudaKernel(Kernel):
    """A GPU kernel (:class:`~polytf.targets.kernel.Kernel`) compiled to PTX, launched on the
    current CUDA device.

    Attributes:
        scop, recipe, llvm_ir, arrays, argument_bytes: as a
            :class:`~polytf.targets.kernel.Kernel`'s (``recipe`` a GpuRecipe; ``arrays`` its
            global-memory arguments: shared arrays are not arguments).
        ptx: the PTX text; ``name`` the kernel's ``.entry``.
        launch: grid, block and dynamic shared memory; its prologue's launches (the
            recipe's data-layout copies, entries ``<name>_copy<i>``) run first.
    """

    scop: Scop
    recipe: ScheduleRecipe
    llvm_ir: str
    ptx: str
    name: str
    launch: GpuLaunch
    arrays: tuple[ArrayInfo, ...]
    argument_bytes: tuple[int, ...]
    _function: object = field(default=None, repr=False)
    _module: object = field(default=None, repr=False)

    @property
    def launches(self) -> tuple[tuple[str, GpuLaunch], ...]:
        """``(entry, launch)`` of each launch of one call, in order."""
        return tuple(zip(kernel_names(self.name, self.launch), (*self.launch.prologue, self.launch)))

    def functions(self) -> tuple:
        """The loaded functions of :attr:`launches` (loads the PTX on first use).

        Raises:
            CompileError: no CuPy or device, or the driver rejected the PTX.
        """
        if self._function is None:
            cupy = _cupy()
            with _LOCK:
                if self._function is None:
                    module = cupy.cuda.Module()
                    functions = []
                    try:
                        module.load(self.ptx.encode() + b"\0")
                        for entry, launch in self.launches:
                            function = module.get_function(entry)
                            if launch.shared_memory_bytes > 48 * 1024:
                                driver = cupy.cuda.driver
                                driver.funcSetAttribute(function.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.shared_memory_bytes)
                            functions.append(function)
                    except Exception as error:
                        raise CompileError(f"the CUDA driver rejected the PTX of kernel {self.name}: {error}") from None
                    self._module, self._function = module, tuple(functions)
        return self._function

    def __call__(self, arrays: Sequence, stream=None) -> None:
        """Launch on ``arrays`` (CuPy arrays, one per :attr:`arrays`, each C-contiguous, of its
        dtype and at least its :attr:`argument_bytes`).

        Raises:
            ValueError: a wrong number of arrays, or an array the kernel may not use.
            CompileError: as :meth:`function`.
        """
        if len(arrays) != len(self.arrays):
            raise ValueError(f"kernel {self.name} takes {len(self.arrays)} arrays, got {len(arrays)}")
        for array, info, needed in zip(arrays, self.arrays, self.argument_bytes):
            if str(array.dtype) != info.dtype or not array.flags.c_contiguous or array.nbytes < needed or buffer_address(array) % ARGUMENT_ALIGNMENT:
                raise ValueError(
                    f"kernel {self.name}: array {info.name} ({info.tensor}) needs a C-contiguous {info.dtype} buffer of at least "
                    f"{needed} bytes at a multiple of {ARGUMENT_ALIGNMENT} bytes, got {array.dtype} {tuple(array.shape)} "
                    f"({array.nbytes} bytes at {buffer_address(array):#x})"
                )
        arguments = tuple(arrays)
        for function, (_, launch) in zip(self.functions(), self.launches):
            function(launch.grid, launch.block, arguments, shared_mem=launch.shared_memory_bytes, stream=stream)


def buffer_address(array) -> int:
    """The device (CuPy) or host (numpy) address of an array's first element."""
    data = array.data
    return int(data.ptr) if hasattr(data, "ptr") else int(array.ctypes.data)


class CudaTarget(Target):
    """An NVIDIA GPU.

    Args:
        device: the GPU (default: :meth:`CudaDevice.current` when CuPy sees one, else an
            offline device of ``compute_capability``, which can emit PTX but not run it).
        compute_capability: the PTX target without a device (default ``sm_80``).
        config: code-generation settings (optimisation level, fast math).
    """

    name = "cuda"

    def __init__(self, device: CudaDevice | None = None, compute_capability: str | None = None, config: CodegenConfig | None = None) -> None:
        _initialise()
        if device is None:
            device = CudaDevice.current() if compute_capability is None and cuda_available() else CudaDevice(compute_capability=compute_capability or DEFAULT_COMPUTE_CAPABILITY)
        self.device = device
        self.config = config or CodegenConfig()
        self.cpu_name = ptx_compute_capability(device.compute_capability)
        self.ptx_version = PTX_VERSIONS[self.cpu_name]
        target = llvm.Target.from_triple(TRIPLE)
        self.target_machine = target.create_target_machine(cpu=self.cpu_name, features=f"+ptx{self.ptx_version}", opt=self.config.optimization_level)

    # -- what the search space needs ---------------------------------------------------------
    @property
    def vector_lanes(self) -> int:
        """float32 values in one 128-bit access."""
        return 4

    @property
    def vector_registers(self) -> int:
        return 255

    @property
    def warp_size(self) -> int:
        return self.device.warp_size

    @property
    def multiprocessors(self) -> int:
        return self.device.multiprocessors

    @property
    def limits(self) -> TargetLimits:
        return TargetLimits(self.vector_lanes, self.vector_registers, self.device.max_threads_per_block, self.device.shared_memory_per_block)

    def search_space(self, scop: Scop, threads: int = 1) -> GpuSearchSpace:
        """The GPU recipes of ``scop`` (``threads``, the CPU's thread count, is ignored)."""
        return GpuSearchSpace.for_scop(scop, self.limits, self.device.multiprocessors)

    def fingerprint(self) -> dict:
        return {
            "target": self.name,
            "triple": TRIPLE,
            "gpu": self.device.name,
            "compute_capability": self.device.compute_capability,
            "ptx": f"{self.cpu_name}+ptx{self.ptx_version}",
            "driver": self.device.driver_version,
            "cuda_runtime": self.device.runtime_version,
            "shared_memory_per_block": self.device.shared_memory_per_block,
            "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm.llvm_version_info)),
        }

    # -- code ------------------------------------------------------------------------------
    def emit(self, scheduled: ScheduledScop, ast: isl.AstNode, recipe: ScheduleRecipe) -> str:
        """Unoptimised NVPTX LLVM IR of a GPU-mapped kernel.

        Raises:
            CodegenError: the recipe is not a GPU recipe, or the AST has a construct the
                code generator does not handle.
        """
        if scheduled.launch is None:
            raise CodegenError(f"kernel {scheduled.scop.name}: the CUDA target needs a GPU recipe (a GpuRecipe), got {recipe.to_json()}")
        builder = NvptxModuleBuilder(scheduled.scop, ast, scheduled.launch, unroll=recipe.unroll, fast_math=self.config.fast_math)
        module = builder.build()
        module.triple = TRIPLE
        module.data_layout = str(self.target_machine.target_data)
        return str(module)

    def optimise(self, code: str, kernel: str) -> llvm.ModuleRef:
        """Parse, verify and optimise NVPTX IR.

        Raises:
            CompileError: LLVM rejected the module (a polytf bug).
        """
        module = parse_verified(code, kernel, "NVPTX ")
        options = llvm.create_pipeline_tuning_options(speed_level=self.config.optimization_level)
        options.loop_unrolling = True
        pass_builder = llvm.create_pass_builder(self.target_machine, options)
        pass_builder.getModulePassManager().run(module, pass_builder)
        return module

    def ptx(self, code: str, kernel: str) -> tuple[str, str]:
        """(PTX, optimised LLVM IR) of NVPTX IR text from :meth:`emit`."""
        with _LOCK:
            module = self.optimise(code, kernel)
            try:
                return self.target_machine.emit_assembly(module), str(module)
            except RuntimeError as error:
                raise CompileError(f"LLVM could not emit PTX for kernel {kernel}: {error}") from None

    def compile_code(self, code: str, scop: Scop, scheduled: ScheduledScop, recipe: ScheduleRecipe) -> CudaKernel:
        """PTX of the kernel, ready to load on first launch (no device needed until then).

        Raises:
            CompileError: LLVM rejected the module.
        """
        kernel = scheduled.scop
        arguments = global_arrays(kernel, scheduled.launch)
        sizes = dict(zip((a.name for a in kernel.arrays), required_bytes(kernel)))
        ptx, optimised = self.ptx(code, kernel.name)
        return CudaKernel(
            scop, recipe, optimised, ptx, kernel.name, scheduled.launch, arrays=arguments, argument_bytes=tuple(sizes.get(a.name, array_bytes(a)) for a in arguments)
        )

    def assembly_of(self, code: str, kernel: str) -> str:
        """The PTX of NVPTX IR text from :meth:`emit` (for ``polytf show``)."""
        return self.ptx(code, kernel)[0]


__all__ = ["TRIPLE", "PTX_VERSIONS", "CudaDevice", "CudaKernel", "CudaTarget", "cuda_available", "ptx_compute_capability", "buffer_address"]
