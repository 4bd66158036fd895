"""``polytf cache verify``: recompile every tuning record and check it against numpy.

For each record, grouped by the model it was tuned from (its ``model``, ``input_shapes``
and ``outputs`` fields): prepare the model again, find the kernel whose cache-key digest
is the record's, and compile and run the record's recipe on random inputs in a worker
process (:class:`polytf.autotune.isolation.CandidateEvaluator`; code generated from a
record is untrusted and never runs in this process), comparing the result with the
kernel's numpy reference.

A record is

- ``ok``: its recipe compiles and agrees with the reference;
- ``failed``: invalid (see :meth:`KernelCache.entries`), or its recipe is illegal, fails
  to compile, crashes, times out or gives a wrong result;
- ``skipped``: it cannot be checked here: it names no model (written by an earlier
  polytf), its model file is missing or no longer compiles, its kernel is no longer in
  the model, or it is foreign (tuned for another CPU, polytf version or knobs).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from polytf.autotune.isolation import CandidateEvaluator
from polytf.compiler.model_source import ModelSource
from polytf.compiler.preparation import PreparedModel, prepare_model
from polytf.compiler.recorded_recipes import cache_key
from polytf.config import VERIFY_TIME_LIMIT_S, CodegenConfig, MeasurementConfig, code_knobs
from polytf.errors import PolytfError
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.storage.cache import KernelCache, TuningRecord
from polytf.storage.cache_key import current_versions, key_differences
from polytf.targets.cpu import CpuTarget

OK, FAILED, SKIPPED = "ok", "failed", "skipped"


@dataclass(frozen=True)
class RecordCheck:
    """The verdict on one record file.

    Attributes:
        path: the record file.
        kernel: the kernel name stored in the record ("" for an invalid record).
        model: the model file it was tuned from ("" if unknown).
        status: ``"ok"``, ``"failed"`` or ``"skipped"``.
        detail: the cause of a failure, the reason for a skip, or the maximum absolute
            error of a verified recipe.
    """

    path: Path
    kernel: str
    model: str
    status: str
    detail: str


def verify_records(
    cache: KernelCache,
    models: Sequence[str | os.PathLike] | None = None,
    *,
    time_limit_s: float = VERIFY_TIME_LIMIT_S,
    measurement: MeasurementConfig | None = None,
    on_check: Callable[[RecordCheck], None] | None = None,
) -> list[RecordCheck]:
    """Verify the records of ``cache`` (all, or those tuned from one of ``models``).

    Args:
        cache: the cache whose records to check.
        models: model files; only their records are checked (invalid records, which name
            no model, are then not reported). None or empty: every record.
        time_limit_s: per record, for its worker process.
        measurement: tolerances against the numpy reference (default MeasurementConfig()).
        on_check: called with each verdict as soon as it is known (Ctrl-C keeps those).

    Returns:
        One RecordCheck per record considered.

    Raises:
        KeyboardInterrupt: passed on after the running worker has been stopped.
    """
    wanted = {_absolute(model) for model in models} if models else None
    codegen = CodegenConfig()
    target = CpuTarget(codegen)
    machine = {"target": target.fingerprint(), "knobs": code_knobs(codegen), "versions": current_versions()}
    verifier = _Verifier(target, codegen, measurement or MeasurementConfig(), time_limit_s)
    checks: list[RecordCheck] = []

    def report(check: RecordCheck) -> None:
        checks.append(check)
        if on_check:
            on_check(check)

    groups: dict[ModelSource, list[tuple[Path, TuningRecord]]] = {}  # the model as each record was tuned from it
    for entry in cache.entries():
        record = entry.record
        if record is None:
            if wanted is None:
                report(RecordCheck(entry.path, "", "", FAILED, f"invalid record: {entry.problem}"))
            continue
        if wanted is not None and (not record.model or _absolute(record.model) not in wanted):
            continue
        if not record.model:
            report(_verdict(entry.path, record, SKIPPED, "no model recorded (tuned by an earlier polytf; tune again to record it)"))
            continue
        foreign = key_differences({name: record.key.get(name) for name in machine}, machine)
        if foreign:
            report(_verdict(entry.path, record, SKIPPED, f"foreign: tuned for another machine or polytf ({'; '.join(foreign[:3])})"))
            continue
        source = ModelSource(record.model, input_shapes=record.input_shapes, outputs=record.outputs or None)
        groups.setdefault(source, []).append((entry.path, record))

    for source, members in groups.items():
        prepared, problem = _prepare(source)
        kernels: dict[int, dict[str, LoweredKernel]] = {}  # threads -> key digest -> kernel, computed once per model
        for path, record in members:
            if prepared is None:
                report(_verdict(path, record, SKIPPED, problem))
                continue
            threads = record.key["threads"]
            if threads not in kernels:
                kernels[threads] = verifier.kernels_by_digest(prepared, threads)
            report(verifier.check(path, record, kernels[threads].get(record.digest)))
    return checks


@dataclass(frozen=True)
class _Verifier:
    """Checks one record's recipe on its kernel in a worker process."""

    target: CpuTarget
    codegen: CodegenConfig
    measurement: MeasurementConfig
    time_limit_s: float

    def kernels_by_digest(self, prepared: PreparedModel, threads: int) -> dict[str, LoweredKernel]:
        """Cache-key digest -> the first kernel of ``prepared`` with that key."""
        result: dict[str, LoweredKernel] = {}
        for kernel in prepared.kernels:
            result.setdefault(cache_key(kernel, self.target, threads, self.codegen).digest(), kernel)
        return result

    def check(self, path: Path, record: TuningRecord, kernel: LoweredKernel | None) -> RecordCheck:
        """Verify ``record`` on ``kernel``, the model's kernel with the record's key (None: none has it)."""
        if kernel is None:
            return _verdict(path, record, SKIPPED, f"kernel no longer in the model (no kernel of {record.model} has this record's key)")
        factory = default_evaluator_factory()
        try:
            with factory(kernel, record.key["threads"], measurement=self.measurement, seed=0, time_limit_s=self.time_limit_s) as evaluator:
                cause, max_abs_error = evaluator.verify(record.schedule_recipe)
        except PolytfError as error:
            return _verdict(path, record, FAILED, f"{type(error).__name__}: {error}")
        if cause is not None:
            return _verdict(path, record, FAILED, cause)
        return _verdict(path, record, OK, f"max abs error {max_abs_error:.3g}")


def default_evaluator_factory() -> Callable[..., object]:
    """The worker-process evaluator of the tuner (tests replace this function with a fake)."""
    return CandidateEvaluator


def _prepare(source: ModelSource) -> tuple[PreparedModel | None, str]:
    """The prepared model, or None and why it cannot be prepared."""
    if not Path(source.path).exists():  # a GraphDef file or a SavedModel directory
        return None, f"model file {source.path} missing"
    try:
        return prepare_model(source), ""
    except PolytfError as error:
        return None, f"model {source.path} no longer compiles: {error}"


def _verdict(path: Path, record: TuningRecord, status: str, detail: str) -> RecordCheck:
    return RecordCheck(path, record.kernel, record.model, status, detail)


def _absolute(path: str | os.PathLike) -> str:
    return str(Path(path).expanduser().resolve())
