"""The round trip every schedule-transform test uses: recipe -> validation -> schedule
tree -> isl AST -> LLVM -> run on threads, against the numpy reference, with (on tiny
domains) a brute-force legality verdict on the same AST (:mod:`brute_force`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np
from brute_force import violations

from polytf.config import MeasurementConfig
from polytf.errors import ScheduleError
from polytf.poly.interpreter import interpret
from polytf.poly.scop import ArrayInfo, Scop
from polytf.runtime.cpu.kernel_bench import KernelBench
from polytf.schedules.builder import build_ast, schedule_scop
from polytf.schedules.target_limits import TargetLimits
from polytf.schedules.validation import validate_recipe
from polytf.targets.compile_driver import emit_kernel
from polytf.targets.cpu import CpuTarget

#: The host, whatever its vector width.
TARGET = CpuTarget()
#: x86-64 with AVX2 and no AVX-512 (8 lanes, 16 registers): its code runs on AVX-512 hosts too.
AVX2_FEATURES = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,+sse4.1,+ssse3,+sse3,+sse2,+sse,-avx512f,-avx512vl,-avx512bw,-avx512dq,-avx512cd"
AVX2_LIMITS = TargetLimits(vector_lanes=8, vector_registers=16)
AVX512_LIMITS = TargetLimits(vector_lanes=16, vector_registers=32)
CHECK = MeasurementConfig(rtol=1e-4, atol_scale=1e-5)

INVALID, ILLEGAL, LEGAL = "invalid", "illegal", "legal"


def host_has_avx2() -> bool:
    return "+avx2" in llvm.get_host_cpu_features().flatten().split(",")


def avx2_target() -> CpuTarget:
    """A CpuTarget for Haswell-class AVX2 machines (runs on this host when it has AVX2)."""
    return CpuTarget(cpu_name="haswell", features=AVX2_FEATURES)


@dataclass(frozen=True)
class ScopKernel:
    """A hand-built Scop as a kernel: its reference is the Scop run in program order by the
    reference interpreter (:func:`polytf.poly.interpreter.interpret`)."""

    scop: Scop

    @property
    def input_arrays(self) -> tuple[ArrayInfo, ...]:
        return tuple(a for a in self.scop.arrays if a.role == "input")

    @property
    def output_arrays(self) -> tuple[ArrayInfo, ...]:
        return tuple(a for a in self.scop.arrays if a.role == "output")

    def reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        state = interpret(self.scop, inputs)
        return {a.name: state[a.name] for a in self.output_arrays}


@dataclass(frozen=True)
class RoundTrip:
    """What happened to one recipe.

    Attributes:
        verdict: INVALID (the validator refused it), ILLEGAL (legality refused it) or LEGAL.
        message: the ScheduleError's message, for INVALID and ILLEGAL.
        field: the recipe field the validator named (INVALID only).
        brute_force: dependences the brute-force check finds broken by the AST (valid
            recipes, when asked for).
        error: the verification error of a LEGAL recipe's compiled kernel, or None.
        ran: whether the kernel ran (False for a CPU this one cannot run: ``pytest --cpu``;
            its object code was still generated).
    """

    verdict: str
    message: str = ""
    field: str = ""
    brute_force: tuple[str, ...] = ()
    error: str | None = None
    ran: bool = True


def roundtrip(kernel, recipe, threads: int = 2, brute_force: bool = False, target: CpuTarget | None = None) -> RoundTrip:
    """Validate, schedule, (optionally) brute-force check, compile and verify ``recipe``.

    A validated recipe must then build (no data-layout refusal: the validator is the one
    check) and, when legal, compute the reference's result on ``threads`` threads. For a
    target this CPU cannot run (``pytest --cpu avx512`` on an AVX2 machine) a legal recipe's
    object code is generated and not run (``ran`` False).
    """
    target = target or TARGET
    try:
        validate_recipe(kernel.scop, recipe, target.limits)
    except ScheduleError as error:
        field = re.search(r"recipe field (\w+)", str(error))
        return RoundTrip(INVALID, str(error), field.group(1) if field else "")
    scheduled = schedule_scop(kernel.scop, recipe, check=False, limits=target.limits)
    broken: tuple[str, ...] = ()
    if brute_force:
        broken = tuple(violations(scheduled.scop, build_ast(scheduled.schedule)))
    if not target.runs_here:
        try:
            emitted = emit_kernel(kernel.scop, recipe, target)
        except ScheduleError as error:
            return RoundTrip(ILLEGAL, str(error), brute_force=broken)
        target.compile_object(emitted.code, kernel.scop.name)
        return RoundTrip(LEGAL, brute_force=broken, ran=False)
    try:
        compiled = target.compile(kernel.scop, recipe)
    except ScheduleError as error:
        return RoundTrip(ILLEGAL, str(error), brute_force=broken)
    bench = KernelBench(kernel, seed=3)
    error, _ = bench.verify(compiled, threads, CHECK)
    return RoundTrip(LEGAL, brute_force=broken, error=error)


def outputs_of(kernel, recipe, threads: int = 2, target: CpuTarget | None = None) -> dict[str, np.ndarray]:
    """The kernel's outputs under ``recipe`` on the bench's seeded inputs."""
    bench = KernelBench(kernel, seed=3)
    table = bench.table((target or TARGET).compile(kernel.scop, recipe))
    table.run(threads)
    return {a.name: bench.arrays[bench.index[a.name]].copy() for a in kernel.output_arrays}
