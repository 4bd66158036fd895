"""CPU kinds: a name for the x86-64 CPUs polytf's code is checked on, as LLVM names them.

Kernels are generated for the CPU they run on (LLVM's ``get_host_cpu_name()`` and
``get_host_cpu_features()``), and the search space, the validator and the analytic default
recipe read that CPU's vector lanes and registers (:class:`polytf.targets.cpu.CpuTarget`).
The machines polytf runs on differ from one another (Zen 1 to Zen 3 with AVX2, Zen 4 and
Zen 5 with AVX-512), so the code paths of the other kind must stay reachable on any of them:
``POLYTF_CPU=avx2`` (:data:`polytf.config.CPU_ENVIRONMENT_VARIABLE`) makes the default
:class:`~polytf.targets.cpu.CpuTarget` an AVX2 CPU with 8 float32 lanes and 16 vector
registers, ``POLYTF_CPU=avx512`` an AVX-512 CPU with 16 lanes and 32 registers, whatever the
host is. Code for a kind whose features the host lacks is still scheduled, emitted and
optimised, but never run (:attr:`CpuTarget.runs_here` is False, and linking it raises
:class:`~polytf.errors.ForeignCpuError`). ``pytest --cpu avx2`` runs the tests so.

The kinds are LLVM's generic x86-64 micro-architecture levels (the x86-64 psABI's
``x86-64-v3``: AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE; ``x86-64-v4``: v3 plus AVX-512 F, BW,
CD, DQ and VL), so the code of a kind runs on every CPU of that level and no tuning model of
one vendor's core is implied.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from polytf.config import CPU_ENVIRONMENT_VARIABLE
from polytf.errors import ArgumentError

__all__ = ["CpuKind", "CPU_KINDS", "HOST", "cpu_kind_from_environment", "missing_features"]

#: what the host is told to be when nothing is forced
HOST = "host"

_SSE = "+sse,+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16,+cmov,+64bit"
_AVX2 = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe,+xsave"
_AVX512 = "+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl"
_NO_AVX512 = ",".join(f"-{feature[1:]}" for feature in _AVX512.split(","))


@dataclass(frozen=True)
class CpuKind:
    """One kind of x86-64 CPU: what the CpuTarget is given instead of the host's name and
    features.

    Attributes:
        name: the name ``POLYTF_CPU`` and ``pytest --cpu`` take (``"avx2"``).
        cpu_name: LLVM CPU name (``"x86-64-v3"``).
        features: LLVM feature string; the ``+`` features are what the host must have to run
            the code, the ``-`` ones keep LLVM from using what the name does not imply.
        vector_lanes, vector_registers: float32 lanes and vector registers of the kind (what
            :class:`~polytf.targets.cpu.CpuTarget` reads from ``features``, stated here for
            the tests and the documentation).
    """

    name: str
    cpu_name: str
    features: str
    vector_lanes: int
    vector_registers: int


#: The kinds, by name.
CPU_KINDS: dict[str, CpuKind] = {
    "avx2": CpuKind("avx2", "x86-64-v3", f"{_SSE},{_AVX2},{_NO_AVX512}", 8, 16),
    "avx512": CpuKind("avx512", "x86-64-v4", f"{_SSE},{_AVX2},{_AVX512}", 16, 32),
}


def cpu_kind_from_environment() -> CpuKind | None:
    """The kind ``POLYTF_CPU`` names, or None when it is unset, empty or ``host``.

    Raises:
        ArgumentError: a name that is not a kind (the message lists them).
    """
    name = os.environ.get(CPU_ENVIRONMENT_VARIABLE, "").strip().lower()
    if name in ("", HOST):
        return None
    if name not in CPU_KINDS:
        choices = ", ".join([HOST, *CPU_KINDS])
        raise ArgumentError(f"{CPU_ENVIRONMENT_VARIABLE}={name!r} is not a CPU kind polytf knows: use one of {choices}")
    return CPU_KINDS[name]


def missing_features(features: str, host_features: str) -> list[str]:
    """The ``+`` features of ``features`` (an LLVM feature string) that ``host_features``
    (``get_host_cpu_features().flatten()``) does not enable, in order: code that uses them
    cannot run on the host."""
    enabled = {feature[1:] for feature in host_features.split(",") if feature.startswith("+")}
    wanted = [feature[1:] for feature in features.split(",") if feature.startswith("+")]
    return [feature for feature in wanted if feature not in enabled]
