"""Every knob that changes generated code or its measurement, in one place.

Anything here that changes the code a kernel compiles to is part of the cache key
(:func:`code_knobs`), so no setting can make the cache return a stale kernel.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

#: Environment variable that overrides the cache directory.
CACHE_DIR_ENVIRONMENT_VARIABLE = "POLYTF_CACHE_DIR"
#: Environment variable naming the tuning storage (``postgresql://USER@HOST/DATABASE``): the
#: Optuna studies and tuning records live in that database instead of the cache directory.
STORAGE_ENVIRONMENT_VARIABLE = "POLYTF_STORAGE"
#: Environment variable that, set to ``1``, turns the compiled-code cache off: every load
#: compiles its kernels afresh and keeps no object code (``compile_cache=False``).
NO_CODE_CACHE_ENVIRONMENT_VARIABLE = "POLYTF_NO_CODE_CACHE"
#: Environment variable that overrides the number of threads kernels run on.
THREADS_ENVIRONMENT_VARIABLE = "POLYTF_THREADS"
#: Environment variable naming the kind of CPU host kernels are generated for instead of this
#: one: ``avx2`` (8 float32 lanes, 16 vector registers) or ``avx512`` (16 lanes, 32
#: registers); unset or ``host``: this CPU (:mod:`polytf.targets.cpu_kinds`). The CPU name and
#: features enter every cache key through the target's fingerprint. Code for a kind whose
#: features this CPU lacks is emitted but never run.
CPU_ENVIRONMENT_VARIABLE = "POLYTF_CPU"

#: Environment variable that overrides how many sizes a model with size symbols keeps built
#: at once (:class:`SizeSymbolConfig`).
SIZES_KEPT_ENVIRONMENT_VARIABLE = "POLYTF_SIZES_KEPT"


def default_thread_count() -> int:
    """Threads a kernel runs on: ``POLYTF_THREADS`` if set, else the CPUs this process may use."""
    value = os.environ.get(THREADS_ENVIRONMENT_VARIABLE)
    if value:
        return max(1, int(value))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class CodegenConfig:
    """Settings of the LLVM back end that change the machine code.

    Attributes:
        optimization_level: LLVM optimisation level, 0 to 3.
        fast_math: every LLVM fast-math flag (``fast``: no NaN, no infinities, no signed
            zeros, reassociation, reciprocals, approximate functions) on all float32
            arithmetic. Off by default, as XLA's ``xla_cpu_enable_fast_math`` since 2020:
            generated code then follows TensorFlow's float semantics (NaN and ±inf
            propagate as in its CPU kernels: ``Relu(NaN)`` is NaN), with only ``contract``
            everywhere and ``reassoc`` on reductions' accumulation
            (:func:`polytf.targets.statement_codegen.float_flags`). With it, NaN and
            infinities give undefined results (``IsNan``, ``CheckNumerics`` and NaN in
            ``Relu``/``Max`` no longer hold). Part of the cache key (:func:`code_knobs`).
        ieee_denormals: keep IEEE gradual underflow in generated CPU code. Off by default:
            kernels run with flush-to-zero and denormals-are-zero, as TensorFlow's CPU
            kernels do (``tensorflow/core/platform/denormal.h``), so a denormal input or
            result is 0 in both (``1 / 1e-40`` is inf, ``log(1e-40)`` is -inf) and denormal
            arithmetic does not slow a kernel down; the caller's floating-point state is
            restored when a kernel returns (:mod:`polytf.targets.llvm_codegen`). x86-64
            only (AArch64 code keeps IEEE denormals).
    """

    optimization_level: int = 3
    fast_math: bool = False
    ieee_denormals: bool = False


@dataclass(frozen=True)
class MeasurementConfig:
    """How a kernel's latency is measured.

    Attributes:
        warmup_runs: calls before timing starts.
        repeats: timed calls; the median is the latency.
        min_repeat_s: keep repeating until this many seconds have been timed.
        rtol: relative tolerance against the numpy reference.
        atol_scale: absolute tolerance as a multiple of the reference's max magnitude.
        flush_caches: evict the kernel's arrays from every cache level before each timed
            call (:mod:`polytf.targets.cache_flush`), so that a candidate is timed as a
            kernel runs inside a model, whose other layers pushed its weights and inputs out
            of the caches, not with its operands hot in L1/L2 from the previous repeat
            (TVM's ``enable_cpu_cache_flush``). The flush itself is not timed.
    """

    warmup_runs: int = 2
    repeats: int = 7
    min_repeat_s: float = 0.02
    flush_caches: bool = True
    rtol: float = 1e-4
    atol_scale: float = 1e-5


#: Environment variables that override :class:`FrontendConfig`'s caps.
MAX_CONSTANT_BYTES_ENVIRONMENT_VARIABLE = "POLYTF_MAX_CONSTANT_BYTES"


@dataclass(frozen=True)
class FrontendConfig:
    """Caps that keep a malformed or hostile GraphDef from exhausting memory.

    They change which models are accepted, not the code of a kernel, so they stay out of
    :func:`code_knobs`.

    Attributes:
        max_constant_bytes: largest constant tensor (decoded bytes) read from a GraphDef;
            ``$POLYTF_MAX_CONSTANT_BYTES`` overrides it. TensorFlow itself caps a GraphDef
            at 2 GB; the largest weight tensor of the Keras applications (VGG16's first
            fully connected layer) is 411 MB. 512 MiB keeps a compile under 1 GiB of memory
            even for a constant given by one value.
        max_tensor_elements: largest tensor (elements) any node may produce (8 GiB of
            float32): larger shapes are malformed dimensions, not models.
    """

    max_constant_bytes: int = 1 << 29
    max_tensor_elements: int = 1 << 31

    @staticmethod
    def from_environment() -> FrontendConfig:
        """The defaults, with ``$POLYTF_MAX_CONSTANT_BYTES`` applied when set."""
        value = os.environ.get(MAX_CONSTANT_BYTES_ENVIRONMENT_VARIABLE)
        if value and value.isdigit():
            return FrontendConfig(max_constant_bytes=int(value))
        return FrontendConfig()


@dataclass(frozen=True)
class SizeSymbolConfig:
    """How a model whose inputs have size symbols (a ``None`` batch) keeps its builds
    (:class:`polytf.compiler.dynamic_model.DynamicModel`). Not a code knob: each size's
    kernels have their own cache keys.

    Attributes:
        sizes_kept: built sizes kept in memory at once, each with its kernels and packed
            weights; the least recently called one goes first (it is linked again from the
            compiled-code cache when called again). ``$POLYTF_SIZES_KEPT`` overrides it.
    """

    sizes_kept: int = 4

    @staticmethod
    def from_environment() -> SizeSymbolConfig:
        """The defaults, with ``$POLYTF_SIZES_KEPT`` applied when it is a whole number >= 1."""
        value = os.environ.get(SIZES_KEPT_ENVIRONMENT_VARIABLE, "").strip()
        return SizeSymbolConfig(sizes_kept=int(value)) if value.isdigit() and int(value) >= 1 else SizeSymbolConfig()


@dataclass(frozen=True)
class GraphPassConfig:
    """Settings of the graph passes (``polytf.passes.pipeline.optimize``).

    They change which kernels a model is partitioned into, not the code of a kernel: a
    kernel's Scop fingerprint already tells two partitions apart, so these stay out of
    :func:`code_knobs`.

    Attributes:
        constant_folding_max_elements: largest result (elements) constant folding stores as
            a new ``Const``; larger results stay computed at run time (Grappler caps folded
            constants at 10 MB for the same reason).
        cse_max_constant_elements: largest ``Const`` whose value is compared (hashed) to
            merge identical constants.
        max_rounds: the pipeline repeats its passes until nothing changes, at most this often.
        max_fusion_group_nodes: most nodes fused into one kernel; a longer element-wise chain
            is split into several kernels, so that the polyhedral work per kernel (legality,
            AST generation: superlinear in its statements) stays bounded and compile time
            grows linearly with the graph (a 2,000-Relu chain: results/compile_time.md).
            Measured on 768-node chains: compile CPU time per node is lowest at 32 to 64
            nodes per kernel; 16 adds per-kernel LLVM and JIT cost (+20%), 128 and 192 add
            superlinear isl work (+30%, +65%). Groups of real models (a MatMul or Conv2D with
            its bias, activation and batch-norm arithmetic) are far smaller.
    """

    constant_folding_max_elements: int = 1 << 20
    cse_max_constant_elements: int = 1 << 16
    max_rounds: int = 4
    max_fusion_group_nodes: int = 64


#: Environment variable that injects faults into tuning candidates, for testing fault
#: isolation: ``"crash:3,hang:5,abort:7"`` makes the worker that measures trial 3 of each
#: kernel's study die of SIGSEGV, trial 5 hang, and trial 7 print an ``LLVM ERROR`` line
#: and abort (see :mod:`polytf.autotune.worker`).
TUNING_FAULTS_ENVIRONMENT_VARIABLE = "POLYTF_TUNING_FAULTS"
#: Environment variable that, set to ``1``, runs target ``cuda`` without a GPU: kernels are
#: still compiled to PTX (for the offline device of :class:`polytf.targets.cuda.CudaTarget`,
#: whose fingerprint no real GPU shares), but every launch runs the kernel's GPU schedule
#: compiled for the CPU (:mod:`polytf.runtime.cuda.emulation`), in models, tuning workers
#: and ``polytf bench --target cuda`` alike. For tests and for checking GPU recipes on a
#: machine without one; its timings are the CPU's.
CUDA_EMULATION_ENVIRONMENT_VARIABLE = "POLYTF_CUDA_EMULATION"
#: Seconds ``polytf cache verify`` gives each record's worker process (compile and check).
VERIFY_TIME_LIMIT_S = 120.0


@dataclass(frozen=True)
class TuningConfig:
    """Defaults of ``polytf tune``.

    Attributes:
        trials: trials per kernel study (in total, over every tuner working on it).
        seed: seed of the sampler and of the random test inputs.
        timeout_per_kernel_s: no new trial of a kernel starts after this many seconds.
        candidate_time_limit_s: wall-clock limit of one candidate (compile, verify and
            time, in the worker process); a candidate over it is killed and fails.
        worker_start_timeout_s: how long a new worker process may take to start.
        measurement: how candidates are verified and timed.
    """

    trials: int = 20
    seed: int = 0
    timeout_per_kernel_s: float = 120.0
    candidate_time_limit_s: float = 60.0
    worker_start_timeout_s: float = 120.0
    measurement: MeasurementConfig = field(default_factory=MeasurementConfig)


def code_knobs(codegen: CodegenConfig) -> dict:
    """The settings that enter a :class:`polytf.storage.cache.CacheKey`. A setting newer than
    the keys already stored (``ieee_denormals``) enters only away from its default, so that the
    tuning records made before it keep their keys (their recipes do not depend on it; the
    compiled objects, whose code does, are told apart by ``ObjectKey.facts``)."""
    knobs = asdict(codegen)
    if not knobs["ieee_denormals"]:
        del knobs["ieee_denormals"]
    return {"codegen": knobs}
