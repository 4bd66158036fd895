"""Every knob that changes generated code or its measurement, in one place.

Anything here that changes the code a kernel compiles to is part of the cache key
(:func:`code_knobs`), so no setting can make the cache return a stale kernel.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

#: Environment variable that overrides the cache directory.
CACHE_DIR_ENVIRONMENT_VARIABLE = "POLYTF_CACHE_DIR"
#: Environment variable that overrides the number of threads kernels run on.
THREADS_ENVIRONMENT_VARIABLE = "POLYTF_THREADS"


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
        fast_math: allow reassociation and contraction of float32 arithmetic (needed to
            vectorise reductions; results stay within float32 tolerance of the
            reference, as the tests check).
    """

    optimization_level: int = 3
    fast_math: bool = True


@dataclass(frozen=True)
class MeasurementConfig:
    """How a kernel's latency is measured.

    Attributes:
        warmup_runs: calls before timing starts.
        repeats: timed calls; the median is the latency.
        min_repeat_s: keep repeating until this many seconds have been timed.
        rtol: relative tolerance against the numpy reference.
        atol_scale: absolute tolerance as a multiple of the reference's max magnitude.
    """

    warmup_runs: int = 2
    repeats: int = 7
    min_repeat_s: float = 0.02
    rtol: float = 1e-4
    atol_scale: float = 1e-5


@dataclass(frozen=True)
class GraphPassConfig:
    """Settings of the graph passes (``polytf.graph.passes.pipeline.optimize``).

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
    """

    constant_folding_max_elements: int = 1 << 20
    cse_max_constant_elements: int = 1 << 16
    max_rounds: int = 4


@dataclass(frozen=True)
class TuningConfig:
    """Defaults of ``polytf tune``."""

    trials: int = 20
    seed: int = 0
    timeout_per_kernel_s: float = 120.0
    measurement: MeasurementConfig = field(default_factory=MeasurementConfig)


def code_knobs(codegen: CodegenConfig) -> dict:
    """The settings that enter a :class:`polytf.runtime.cache.CacheKey`."""
    return {"codegen": asdict(codegen)}
