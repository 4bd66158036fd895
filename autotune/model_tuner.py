"""Tunes every kernel of a model and records the winners in the cache.

For each kernel (identical kernels are tuned once): reuse its record unless
``retune``; otherwise run :func:`polytf.autotune.tuner.tune_kernel` and write a
TuningRecord. Then the whole model is timed with the default recipes and with the
tuned ones. Ctrl-C saves what the interrupted kernel found so far (marked
incomplete) and every kernel finished before it.

Any number of tuners may share one cache directory, on the same model or not: a
kernel's study is shared (:mod:`polytf.autotune.shared_study`), and the tuners take
turns to measure (the cache's ``measurement`` lock), so that their timings never overlap
on the machine's cores.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from polytf.autotune.isolation import tuning_faults
from polytf.autotune.shared_study import UnlimitedWait
from polytf.autotune.tuner import TrialCallback, tune_kernel
from polytf.config import CodegenConfig, TuningConfig, default_thread_count
from polytf.ops.lowering import LoweredKernel
from polytf.runtime.cache import KernelCache, TuningRecord
from polytf.runtime.model_builder import build_model, cache_key, prepare_model, schedule_record
from polytf.targets.cpu import CpuTarget


@dataclass(frozen=True)
class KernelReport:
    """One row of the tuning table."""

    kernel: str
    ops: tuple[str, ...]
    default_latency_s: float
    tuned_latency_s: float
    trials: int
    failed_trials: int
    status: str  # "tuned", "cached", "interrupted"
    recipe: str
    #: ``"trial N: cause"`` of each failed trial
    failures: tuple[str, ...] = ()
    #: trials this run measured (``trials`` counts the whole study)
    trials_here: int = 0

    @property
    def speedup(self) -> float:
        return self.default_latency_s / self.tuned_latency_s if self.tuned_latency_s > 0 else float("nan")


@dataclass
class TuneReport:
    """What ``polytf tune`` did.

    Attributes:
        model: path of the model.
        kernels: one row per kernel, in execution order.
        model_default_latency_s / model_tuned_latency_s: median whole-model latency (seconds).
        threads: threads kernels ran on.
        elapsed_s: wall time of the whole run.
        cache_dir: where records were written.
    """

    model: str
    kernels: list[KernelReport] = field(default_factory=list)
    model_default_latency_s: float = float("nan")
    model_tuned_latency_s: float = float("nan")
    threads: int = 1
    elapsed_s: float = 0.0
    cache_dir: str = ""
    interrupted: bool = False

    @property
    def new_trials(self) -> int:
        """Trials this run measured (concurrent tuners' trials of the same studies excluded)."""
        return sum(k.trials_here for k in self.kernels if k.status != "cached")


class TuningProgress:
    """Receives progress events (the CLI shows them with rich; the default is silent)."""

    def model_prepared(self, kernel_count: int, unique_count: int) -> None: ...

    def kernel_started(self, kernel: LoweredKernel, trials: int) -> None: ...

    def trial_done(self, kernel: LoweredKernel) -> TrialCallback | None:
        return None

    def kernel_finished(self, report: KernelReport) -> None: ...

    def message(self, text: str) -> None: ...


def _random_inputs(model, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(t.shape).astype(t.dtype) for name, t in model.input_types.items()}


def tune_model(
    path: str | os.PathLike,
    *,
    trials: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    retune: bool = False,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    outputs: Sequence[str] | None = None,
    threads: int | None = None,
    seed: int = 0,
    config: TuningConfig | None = None,
    progress: TuningProgress | None = None,
    measure_model: bool = True,
) -> TuneReport:
    """Tune every kernel of the model at ``path``; see :func:`polytf.tune`."""
    started = time.perf_counter()
    config = config or TuningConfig()
    trials = config.trials if trials is None else int(trials)
    threads = threads or default_thread_count()
    progress = progress or TuningProgress()
    codegen = CodegenConfig()
    target = CpuTarget(codegen)
    cache = KernelCache(cache_dir)
    prepared = prepare_model(path, input_shapes, outputs)
    report = TuneReport(str(path), threads=threads, cache_dir=str(cache.directory))

    keys = {kernel.scop.name: cache_key(kernel, target, threads, codegen) for kernel in prepared.kernels}
    unique: dict[str, LoweredKernel] = {}
    for kernel in prepared.kernels:
        unique.setdefault(keys[kernel.scop.name].digest(), kernel)
    progress.model_prepared(len(prepared.kernels), len(unique))
    faults = tuning_faults()
    storage = None  # opened for the first kernel that needs tuning
    # tuners sharing this cache take turns to measure: timings of concurrent runs never overlap
    measurement_lock = UnlimitedWait(cache.lock("measurement"))

    recipes = {}
    rows: dict[str, KernelReport] = {}
    for digest, kernel in unique.items():
        key = keys[kernel.scop.name]
        record = None if retune else cache.load(key)
        if record is not None and schedule_record(kernel, record, target, cache.path_for(key)) is None:
            record = None  # an illegal recipe: tuned again
        if record is not None and record.complete:
            rows[digest] = KernelReport(kernel.scop.name, tuple(op for _, op in kernel.scop.ops), record.default_latency_s, record.best_latency_s, record.trials, record.failed_trials, "cached", record.schedule_recipe.describe())
            progress.kernel_finished(rows[digest])
            recipes[digest] = record.schedule_recipe
            continue
        progress.kernel_started(kernel, trials)
        storage = storage or cache.study_storage()
        result = tune_kernel(
            kernel,
            target,
            trials=trials,
            threads=threads,
            storage=storage,
            study_name=digest,
            seed=seed,
            measurement=config.measurement,
            timeout_s=config.timeout_per_kernel_s,
            restart=retune,
            on_trial=progress.trial_done(kernel),
            lock=cache.lock(f"study-{digest}"),
            measurement_lock=measurement_lock,
            candidate_time_limit_s=config.candidate_time_limit_s,
            codegen=codegen,
            faults=faults,
        )
        ops = tuple(op for _, op in kernel.scop.ops)
        record = TuningRecord(
            key=key.as_dict(),
            kernel=kernel.scop.name,
            ops=ops,
            recipe=result.best_recipe.to_dict(),
            default_latency_s=result.default_latency_s,
            best_latency_s=result.best_latency_s,
            trials=result.trials,
            failed_trials=len(result.failures),
            complete=not result.interrupted,
            model=str(Path(path).resolve()),
            input_shapes=input_shapes or {},
            outputs=outputs or (),
        )
        cache.save(record, key)
        status = "interrupted" if result.interrupted else "tuned"
        rows[digest] = KernelReport(
            kernel.scop.name, ops, result.default_latency_s, result.best_latency_s, result.trials, len(result.failures), status, result.best_recipe.describe(), tuple(result.failures), result.trials_here
        )
        progress.kernel_finished(rows[digest])
        recipes[digest] = result.best_recipe
        if result.interrupted:
            report.interrupted = True
            break

    for kernel in prepared.kernels:
        digest = keys[kernel.scop.name].digest()
        if digest in rows:
            row = rows[digest]
            if kernel is not unique[digest]:  # an identical kernel: it shares the first one's record
                ops = tuple(op for _, op in kernel.scop.ops)
                row = replace(row, kernel=kernel.scop.name, ops=ops, trials=0, failed_trials=0, status="shared", failures=(), trials_here=0)
            report.kernels.append(row)

    if measure_model and not report.interrupted:
        progress.message("timing the whole model (default recipes vs tuned)")
        by_name = {k.scop.name: recipes[keys[k.scop.name].digest()] for k in prepared.kernels}
        default_model = build_model(prepared, {}, target, threads)
        tuned_model = build_model(prepared, by_name, target, threads)
        inputs = _random_inputs(tuned_model, seed)
        with measurement_lock:
            report.model_default_latency_s = float(np.median(default_model.latency_s(inputs)))
            report.model_tuned_latency_s = float(np.median(tuned_model.latency_s(inputs)))
    report.elapsed_s = time.perf_counter() - started
    return report
