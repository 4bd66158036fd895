"""Tunes every kernel of a model and records the winners in the cache.

For each kernel (identical kernels are tuned once): reuse its complete record unless
``retune``; otherwise tune it and write a TuningRecord. Then the final choice is timed
inside the model (:mod:`polytf.autotune.in_model_check`): the model with the default
recipes against the model built from the records as ``polytf.load`` builds it, whole calls
alternating in blocks; a recipe tuned by this run that does not beat the default one inside
the model is rejected (its record rewritten with the default recipe, so that ``polytf.load``
never runs it), and so are all of them if the model they make is not faster as a whole. The
medians of those calls are the report's "default -> tuned" model latencies.

Two ways to spend the tuning:

- ``trials`` per kernel: each kernel in turn gets
  :func:`polytf.autotune.tuner.tune_kernel` with that many trials;
- a time budget (``time_budget_s``): the kernels' studies are continued a slice of a few
  trials at a time, each slice given to the kernel whose next trials should lower the
  model's latency the most (:mod:`polytf.autotune.task_scheduler`, after Ansor), after a
  first round that measures every kernel's default recipe; kernels that differ only in
  shape warm-start from each other's best recipes (:mod:`polytf.autotune.warm_start`).
  The budget is the wall time of the whole call, counted from its start (reading and
  lowering the model included): the kernels are tuned until :data:`FINAL_CHECK_SHARE` of it
  is left, and the final timing of the whole model fits its rounds into that rest. No slice
  starts that is not expected to end in time, and a candidate still running at the end is
  stopped (give or take :data:`~polytf.autotune.tuner.MINIMUM_CANDIDATE_S`). A kernel's
  record is written after each of its slices, marked complete, so the next run reuses it
  whatever its budget; kernels whose baseline the
  budget did not reach get no record (and are tuned by the next run). ``retune`` ignores
  the records and starts every kernel's study afresh, within the budget.

Ctrl-C saves what the interrupted kernel found so far (marked incomplete) and every
kernel finished (or, under a budget, every slice finished) before it.

Any number of tuners may share one cache directory, on the same model or not: a
kernel's study is shared (:mod:`polytf.autotune.shared_study`), and the tuners take
turns to measure (the cache's ``measurement`` lock), so that their timings never overlap
on the machine's cores. Tuners on several machines share a database instead
(``storage="postgresql://..."``, :mod:`polytf.storage.tuning_storage`): records, studies
and study locks live in it, and each machine's cache directory keeps only its
``measurement`` lock.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from polytf.autotune.in_model_check import ROUND_S, InModelDecision, alternating_timings, check_in_model
from polytf.autotune.isolation import tuning_faults
from polytf.autotune.shared_study import UnlimitedWait
from polytf.autotune.task_scheduler import Task, TaskScheduler
from polytf.autotune.tuner import KernelTuning, KernelTuningResult, TrialCallback, tune_kernel
from polytf.autotune.warm_start import WarmStarts, kernel_family
from polytf.compiler.backends import Backend, backend_of_options
from polytf.compiler.build_options import BuildOptions
from polytf.compiler.kernel_compilation import schedule_record
from polytf.compiler.model_source import ModelSource
from polytf.compiler.preparation import PreparedModel, prepare_model
from polytf.compiler.recorded_recipes import cache_key, open_storage, reading_records, stored_recipes
from polytf.config import CodegenConfig, TuningConfig
from polytf.errors import ArgumentError, PolytfError, TuningError
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.poly.flops import domain_points
from polytf.runtime.machine_load import check_machine_load
from polytf.runtime.model import Model
from polytf.runtime.sample_inputs import sample_inputs
from polytf.schedules.structure import anchor_statement
from polytf.storage.cache import KernelCache, TuningRecord
from polytf.storage.tuning_storage import TuningStorage
from polytf.targets.target import Target


@dataclass(frozen=True)
class KernelReport:
    """One row of the tuning table."""

    kernel: str
    ops: tuple[str, ...]
    default_latency_s: float
    tuned_latency_s: float
    trials: int
    failed_trials: int
    status: str  # "tuned", "cached", "interrupted", "shared"; under a budget also "skipped"
    recipe: str
    #: ``"trial N: cause"`` of each failed trial
    failures: tuple[str, ...] = ()
    #: trials this run measured (``trials`` counts the whole study)
    trials_here: int = 0
    #: wall time this run spent tuning the kernel (baseline, trials, records), seconds
    tuning_s: float = 0.0
    #: the final choice inside the model (this run's tuned recipes only): ``"kept"``, ``"rejected"``
    #: (the record now holds the default recipe), or ``""`` (not judged there)
    in_model: str = ""
    #: seconds of the kernel's record's kernels inside a call of the default / tuned model
    #: (medians, summed over identical kernels; NaN where not measured)
    in_model_default_s: float = math.nan
    in_model_tuned_s: float = math.nan

    @property
    def speedup(self) -> float:
        return self.default_latency_s / self.tuned_latency_s if self.tuned_latency_s > 0 else float("nan")


@dataclass
class TuneReport:
    """What ``polytf tune`` did.

    Attributes:
        model: path of the model.
        kernels: one row per kernel, in execution order.
        model_default_latency_s / model_tuned_latency_s: median seconds of a call of the model
            with the default recipes / with the recipes kept (the tuned model ``polytf.load``
            builds), timed against each other in alternating blocks
            (:mod:`polytf.autotune.in_model_check`).
        model_all_tuned_latency_s: the same of the model with every recipe this run tuned,
            before those that lost inside the model were rejected.
        rejected_in_model: kernels (the first of each group of identical ones) whose recipe
            tuned by this run lost inside the model: their records hold the default recipe.
        rejected_as_a_whole: the recipes that won kernel by kernel made a model no faster than
            the default one, so all of them were rejected.
        model_timing_calls: calls of each model timed for those figures.
        model_timing_s: wall time of that check (the models built and timed), seconds.
        threads: threads kernels ran on.
        elapsed_s: wall time of the whole run.
        cache_dir: where records were written (the cache directory, or the storage's URL
            with its password hidden).
        interrupted: Ctrl-C stopped the tuning.
        time_budget_s: the time budget the kernels were tuned within (None: a number of
            trials per kernel).
        host_nodes: nodes that run on the host (not tuned), each with the reason.
        target: the target tuned for (``"cpu"`` or ``"cuda"``).
        busy_machine: why the machine was too busy for reliable timings when the tuning
            started or before the final timing inside the model ("" when it was not; said once
            as a :class:`~polytf.errors.BusyMachineWarning` at the time).
    """

    model: str
    kernels: list[KernelReport] = field(default_factory=list)
    model_default_latency_s: float = float("nan")
    model_tuned_latency_s: float = float("nan")
    threads: int = 1
    elapsed_s: float = 0.0
    cache_dir: str = ""
    interrupted: bool = False
    time_budget_s: float | None = None
    host_nodes: tuple = ()
    target: str = "cpu"
    model_all_tuned_latency_s: float = float("nan")
    rejected_in_model: tuple[str, ...] = ()
    rejected_as_a_whole: bool = False
    model_timing_calls: int = 0
    model_timing_s: float = 0.0
    busy_machine: str = ""

    @property
    def new_trials(self) -> int:
        """Trials this run measured (concurrent tuners' trials of the same studies excluded)."""
        return sum(k.trials_here for k in self.kernels if k.status != "cached")

    @property
    def tuning_s(self) -> float:
        """Seconds the kernels were tuned (their studies: defaults measured, candidates
        compiled, verified and timed), the model's builds and timings excluded."""
        return sum(k.tuning_s for k in self.kernels if k.status in ("tuned", "interrupted"))

    @property
    def trials_per_minute(self) -> float:
        """Tuning throughput: :attr:`new_trials` per minute of :attr:`tuning_s` (NaN when
        nothing was tuned)."""
        return self.new_trials / self.tuning_s * 60 if self.tuning_s > 0 else float("nan")


class TuningProgress:
    """Receives progress events (the CLI shows them with rich; the default is silent).

    Under a time budget a kernel is tuned in slices: ``budget_started`` comes once, then
    ``slice_started`` / ``slice_finished`` for each slice (by default they forward to
    ``kernel_started`` / ``kernel_finished``, with the slice's trials and the kernel's row
    so far); ``remaining_s`` is the budget left, seconds.
    """

    def model_prepared(self, kernel_count: int, unique_count: int) -> None: ...

    def kernel_started(self, kernel: LoweredKernel, trials: int) -> None: ...

    def trial_done(self, kernel: LoweredKernel) -> TrialCallback | None:
        return None

    def kernel_finished(self, report: KernelReport) -> None: ...

    def message(self, text: str) -> None: ...

    def budget_started(self, budget_s: float, task_count: int) -> None: ...

    def slice_started(self, kernel: LoweredKernel, trials: int, remaining_s: float) -> None:
        self.kernel_started(kernel, trials)

    def slice_finished(self, report: KernelReport, remaining_s: float) -> None:
        self.kernel_finished(report)


def tune_model(
    source: ModelSource | str | os.PathLike,
    options: BuildOptions | None = None,
    *,
    trials: int | None = None,
    retune: bool = False,
    seed: int = 0,
    config: TuningConfig | None = None,
    progress: TuningProgress | None = None,
    measure_model: bool = True,
    time_budget_s: float | None = None,
) -> TuneReport:
    """Tune every kernel of the model ``source`` built as ``options`` say (default
    ``BuildOptions()``); see :func:`polytf.tune`.

    ``measure_model``: time the final choice inside the model after the tuning and reject the
    recipes tuned now that lose there (module docstring); without it the records keep every
    recipe that won alone and the report has no model latencies.

    ``trials`` (default :class:`TuningConfig`'s) is ignored under ``time_budget_s``
    (seconds of wall time, counted from this call; see the module). Target ``"cuda"``: recipes
    from the GPU's search space, candidates compiled and timed on the GPU in the worker,
    records under the GPU's fingerprint; the thread count is then ignored
    (:data:`~polytf.compiler.backends.CUDA_THREADS`). Records and studies live in the
    storage the options name (:func:`~polytf.compiler.recorded_recipes.open_storage`: a
    ``postgresql://`` database is shared with tuners on other machines).

    Raises:
        ArgumentError: ``trials`` below 1, or a budget that is not a positive number of
            seconds (also ValueErrors; before anything is read or written).
        TuningError: a kernel's default recipe fails.
        DependencyMissingError: target ``"cuda"`` without CuPy or a GPU (before anything is
            read); a storage URL whose driver is not installed.
        CacheError: a storage URL that is invalid or whose server cannot be reached, or a
            storage that fails during the tuning (naming it).
    """
    started = time.perf_counter()
    budget_clock = time.monotonic()
    if time_budget_s is not None and not (isinstance(time_budget_s, (int, float)) and math.isfinite(time_budget_s) and time_budget_s > 0):
        raise ArgumentError(f"the time budget must be a positive number of seconds, not {time_budget_s!r}")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, numbers.Integral) or trials < 1):
        # checked before anything is read or written: no record claims a kernel tuned by 0 trials
        raise ArgumentError(f"trials must be a positive number of candidate schedules per kernel, not {trials!r}")
    config = config or TuningConfig()
    trials = config.trials if trials is None else int(trials)
    progress = progress or TuningProgress()
    source, options = ModelSource.of(source), options or BuildOptions()
    codegen = CodegenConfig()
    backend = backend_of_options(options, codegen)  # chosen once: the tuner never asks which device
    target, threads = backend.target, backend.threads
    cache = KernelCache(options.cache_dir)
    # records, studies, study locks: the cache directory or a database (opened first: a wrong URL fails at once)
    records = open_storage(options, cache)
    with contextlib.ExitStack() as running, contextlib.closing(records), records.translating_errors():
        prepared = prepare_model(source, fallback=options.fallback)
        # from here the run holds the cache's "a tuner is running" lock: `cache clear` keeps its
        # studies meanwhile (a model that cannot be read leaves no cache directory behind)
        running.enter_context(cache.tuning())
        report = TuneReport(
            str(source.path), threads=threads, cache_dir=records.location, time_budget_s=time_budget_s, host_nodes=prepared.host_nodes, target=options.target
        )
        run = _ModelRun(
            source, records, target, codegen, threads, seed, config, retune, progress, tuning_faults(),
            # tuners sharing this machine's cache directory take turns to measure: timings of concurrent runs never overlap
            UnlimitedWait(cache.lock("measurement")),
        )

        keys = {kernel.scop.name: cache_key(kernel, target, threads, codegen) for kernel in prepared.kernels}
        unique: dict[str, LoweredKernel] = {}
        counts: dict[str, int] = {}
        for kernel in prepared.kernels:
            digest = keys[kernel.scop.name].digest()
            unique.setdefault(digest, kernel)
            counts[digest] = counts.get(digest, 0) + 1
        progress.model_prepared(len(prepared.kernels), len(unique))

        recipes = {}
        rows: dict[str, KernelReport] = {}
        pending: dict[str, LoweredKernel] = {}
        for digest, kernel in unique.items():
            key = keys[kernel.scop.name]
            record = None if retune else records.load(key)
            if record is not None and schedule_record(kernel, record, target, records.record_location(key)) is None:
                record = None  # an illegal recipe: tuned again
            if record is not None and record.complete:
                rows[digest] = KernelReport(kernel.scop.name, _ops(kernel), record.default_latency_s, record.best_latency_s, record.trials, record.failed_trials, "cached", record.schedule_recipe.describe())
                progress.kernel_finished(rows[digest])
                recipes[digest] = record.schedule_recipe
                continue
            pending[digest] = kernel

        if pending and options.target == "cpu":  # candidates are about to be timed on this CPU's cores
            _check_machine_load(report, threads)
        if time_budget_s is None:
            for digest, kernel in pending.items():
                progress.kernel_started(kernel, trials)
                kernel_started = time.perf_counter()
                result = tune_kernel(kernel, target, trials=trials, timeout_s=config.timeout_per_kernel_s, restart=retune, on_trial=progress.trial_done(kernel), **run.tuner_arguments(digest))
                run.save(kernel, keys[kernel.scop.name], result)
                rows[digest] = run.row(kernel, result, time.perf_counter() - kernel_started)
                progress.kernel_finished(rows[digest])
                recipes[digest] = result.best_recipe
                if result.interrupted:
                    report.interrupted = True
                    break
        elif pending:
            # the budget is the wall time the caller waits: the final timing inside the model gets its share of it
            reserve_s = FINAL_CHECK_SHARE * float(time_budget_s) if measure_model else 0.0
            report.interrupted = _tune_within_budget(run, pending, counts, keys, budget_clock + float(time_budget_s) - reserve_s, rows, recipes)

        for kernel in prepared.kernels:
            digest = keys[kernel.scop.name].digest()
            if digest in rows:
                row = rows[digest]
                if kernel is not unique[digest]:  # an identical kernel: it shares the first one's record
                    row = replace(row, kernel=kernel.scop.name, ops=_ops(kernel), trials=0, failed_trials=0, status="shared", failures=(), trials_here=0, tuning_s=0.0)
                report.kernels.append(row)

    if measure_model and not report.interrupted:
        if options.target == "cpu" and not report.busy_machine:
            _check_machine_load(report, threads)
        check_started = time.perf_counter()
        tuned_here = {digest for digest, row in rows.items() if row.status == "tuned"}
        deadline = budget_clock + float(time_budget_s) if time_budget_s is not None else None
        decision = _final_choice_in_model(backend, prepared, options, codegen, keys, tuned_here, run, progress, deadline)
        _report_final_choice(report, decision, keys)
        report.model_timing_s = time.perf_counter() - check_started
    report.elapsed_s = time.perf_counter() - started
    return report


def _check_machine_load(report: TuneReport, threads: int) -> None:
    """Measure other processes' load on the cores; when it is too high for timing kernels on
    ``threads`` threads, say so once (a BusyMachineWarning) and note it in ``report``."""
    load = check_machine_load(threads, "tuning")
    if load is not None and load.is_busy(threads):
        report.busy_machine = load.message(threads, "tuning")


def _ops(kernel: LoweredKernel) -> tuple[str, ...]:
    return tuple(op for _, op in kernel.scop.ops)


def _final_choice_in_model(
    backend: Backend,
    prepared: PreparedModel,
    options: BuildOptions,
    codegen: CodegenConfig,
    keys: Mapping[str, object],
    tuned_here: set[str],
    run: _ModelRun,
    progress: TuningProgress,
    deadline: float | None = None,
) -> InModelDecision:
    """Time the final choice inside the model and reject the recipes tuned by this run (the
    records of ``tuned_here``, by key digest) that lose there (:func:`check_in_model`); a
    rejected record is rewritten with the kernel's default recipe. The tuned models are built
    from the records as ``polytf.load`` builds them (:func:`stored_recipes`), on the same
    backend (target, threads, code cache).

    Raises:
        CacheError: the storage cannot be read or written.
    """
    progress.message("timing the final choice inside the model (default recipes vs tuned, alternating blocks of calls)")
    stored = stored_recipes(prepared, options, backend.target, backend.threads, codegen)
    default_model = backend.build_model(prepared, {})
    every_tuned = backend.build_model(prepared, cached=stored)
    groups: dict[str, list[str]] = {}
    for kernel in prepared.kernels:
        name, digest = kernel.scop.name, keys[kernel.scop.name].digest()
        if digest in tuned_here and every_tuned.recipes.get(name) != default_model.recipes.get(name):
            groups.setdefault(digest, []).append(name)
    grouped = {name for names in groups.values() for name in names}
    others_tuned = any(recipe != default_model.recipes.get(name) for name, recipe in every_tuned.recipes.items() if name not in grouped)
    built: dict[frozenset[str], Model] = {frozenset(groups): every_tuned}
    if not others_tuned:
        built.setdefault(frozenset(), default_model)

    def build(kept: frozenset[str]) -> Model:
        if kept not in built:  # the rejected groups' kernels on their default recipe, the others from their records
            fallback = {name: None for group, names in groups.items() if group not in kept for name in names}
            built[kept] = backend.build_model(prepared, fallback, cached=stored)
        return built[kept]

    inputs = sample_inputs(default_model.input_types, run.seed)

    def timer(default: Model, tuned: Model):
        with run.measurement_lock:
            return alternating_timings(default, tuned, inputs, round_s=_round_s(deadline))

    decision = check_in_model(groups, build, timer, default_model)
    if decision.rejected:
        with reading_records(options, "write the choice inside the model to") as records:
            for digest in sorted(decision.rejected):
                name = groups[digest][0]
                key = keys[name]
                record = records.load(key)
                if record is None or record.schedule_recipe != every_tuned.recipes[name]:
                    continue  # another tuner rewrote it meanwhile: its choice, not the one measured here
                records.save(replace(record, recipe=default_model.recipes[name].to_dict(), best_latency_s=record.default_latency_s), key)
    return decision


def _report_final_choice(report: TuneReport, decision: InModelDecision, keys: Mapping[str, object]) -> None:
    """The in-model figures and verdicts into ``report`` (its rows marked kept or rejected)."""
    report.model_default_latency_s = decision.default_latency_s
    report.model_tuned_latency_s = decision.tuned_latency_s
    report.model_all_tuned_latency_s = decision.all_tuned_latency_s
    report.rejected_as_a_whole = decision.rejected_as_a_whole
    report.model_timing_calls = decision.calls
    judged = decision.kept | decision.rejected
    seen: set[str] = set()
    rejected_names = []
    for index, row in enumerate(report.kernels):
        digest = keys[row.kernel].digest()
        if digest not in judged:
            continue
        verdict = "rejected" if digest in decision.rejected else "kept"
        default_s, tuned_s = decision.group_latency_s.get(digest, (math.nan, math.nan)) if digest not in seen else (math.nan, math.nan)
        changes = {"in_model": verdict, "in_model_default_s": default_s, "in_model_tuned_s": tuned_s}
        if verdict == "rejected":
            changes.update(tuned_latency_s=row.default_latency_s, recipe=f"default (the tuned {row.recipe} lost inside the model)")
            if digest not in seen:
                rejected_names.append(row.kernel)
        report.kernels[index] = replace(row, **changes)
        seen.add(digest)
    report.rejected_in_model = tuple(rejected_names)


@dataclass
class _ModelRun:
    """What the kernels' tunings of one :func:`tune_model` call share."""

    source: ModelSource
    records: TuningStorage  # records, studies and study locks: the cache directory or a database
    target: Target
    codegen: CodegenConfig
    threads: int
    seed: int
    config: TuningConfig
    retune: bool
    progress: TuningProgress
    faults: dict[int, str]
    measurement_lock: UnlimitedWait
    storage: object = None  # opened for the first kernel that needs tuning

    def tuner_arguments(self, digest: str) -> dict:
        """Keyword arguments of :func:`tune_kernel` and :class:`KernelTuning` for the kernel
        whose cache-key digest (and study name) is ``digest``."""
        self.storage = self.storage or self.records.study_storage()
        return {
            "threads": self.threads,
            "storage": self.storage,
            "study_name": digest,
            "seed": self.seed,
            "measurement": self.config.measurement,
            "lock": self.records.study_lock(digest),
            "measurement_lock": self.measurement_lock,
            "candidate_time_limit_s": self.config.candidate_time_limit_s,
            "codegen": self.codegen,
            "faults": self.faults,
        }

    def save(self, kernel: LoweredKernel, key, result: KernelTuningResult) -> None:
        """Write (or overwrite) the kernel's record: complete unless the run was interrupted."""
        record = TuningRecord(
            key=key.as_dict(),
            kernel=kernel.scop.name,
            ops=_ops(kernel),
            recipe=result.best_recipe.to_dict(),
            default_latency_s=result.default_latency_s,
            best_latency_s=result.best_latency_s,
            trials=result.trials,
            failed_trials=len(result.failures),
            complete=not result.interrupted,
            model=str(Path(self.source.path).resolve()),
            input_shapes=dict(self.source.input_shapes),
            outputs=self.source.outputs or (),
        )
        self.records.save(record, key)

    def row(self, kernel: LoweredKernel, result: KernelTuningResult, tuning_s: float) -> KernelReport:
        status = "interrupted" if result.interrupted else "tuned"
        return KernelReport(
            kernel.scop.name, _ops(kernel), result.default_latency_s, result.best_latency_s, result.trials, len(result.failures), status,
            result.best_recipe.describe(), tuple(result.failures), result.trials_here, tuning_s,
        )


#: Under a time budget, the share of it kept for the final timing inside the model (the tuning
#: of the kernels ends that much earlier), so that the whole call takes about the budget.
FINAL_CHECK_SHARE = 0.15
#: The shortest round of the final timing under a budget, seconds (fewer blocks and calls
#: below it would not tell a 3% gain from noise: the check then keeps no tuned recipe).
MINIMUM_ROUND_S = 1.0
#: Rounds of the final timing, usually (every tuned recipe, those that won kernel by kernel,
#: and the confirmation of the set kept, each against the default model; a fourth, of the
#: model with no recipe of this run, only where none is kept and earlier runs tuned other
#: kernels).
FINAL_CHECK_ROUNDS = 3


def _round_s(deadline: float | None) -> float:
    """The length of one round of the final timing: :data:`ROUND_S`, or under a budget an equal
    share of what is left of it for each round still to come (at least :data:`MINIMUM_ROUND_S`)."""
    if deadline is None:
        return ROUND_S
    return max(MINIMUM_ROUND_S, min(ROUND_S, (deadline - time.monotonic()) / FINAL_CHECK_ROUNDS))


#: Tasks that keep a worker process between their slices (the most recently tuned).
LIVE_WORKERS = 4


def _tune_within_budget(
    run: _ModelRun,
    pending: Mapping[str, LoweredKernel],
    counts: Mapping[str, int],
    keys: Mapping[str, object],
    deadline: float,
    rows: dict[str, KernelReport],
    recipes: dict,
) -> bool:
    """Tune the ``pending`` kernels (digest -> kernel) in slices that the
    :class:`~polytf.autotune.task_scheduler.TaskScheduler` hands out until ``deadline``
    (``time.monotonic()``); each slice's record is written at once. A kernel whose baseline
    the budget did not reach gets no record and a ``skipped`` row. Returns whether Ctrl-C
    stopped it."""
    digests = list(pending)
    spaces = [run.target.search_space(pending[d].scop, run.threads) for d in digests]
    families = [kernel_family(pending[d], space) for d, space in zip(digests, spaces)]
    tasks = [
        Task(pending[d].scop.name, counts[d], family, _work(pending[d]), space.size())
        for d, space, family in zip(digests, spaces, families)
    ]
    scheduler = TaskScheduler(tasks, seed=run.seed)
    warm_starts = WarmStarts(run.target.limits)
    progress = run.progress
    progress.budget_started(deadline - time.monotonic(), len(tasks))
    tunings: dict[int, KernelTuning] = {}
    heuristics: dict[int, list[dict]] = {}
    recently_tuned: list[int] = []
    interrupted = False
    with contextlib.ExitStack() as stack:
        while not interrupted:
            remaining_s = deadline - time.monotonic()
            chosen = scheduler.next_slice(remaining_s)
            if chosen is None:
                break
            index = chosen.task
            digest = digests[index]
            kernel = pending[digest]
            if index not in tunings:
                tunings[index] = stack.enter_context(KernelTuning(kernel, run.target, restart=run.retune, **run.tuner_arguments(digest)))
            tuning = tunings[index]
            progress.slice_started(kernel, chosen.trials, remaining_s)
            slice_started = time.monotonic()
            trials_before = rows[digest].trials_here if digest in rows else 0
            if chosen.baseline:
                try:
                    tuning.start(deadline)
                except TuningError:
                    if not tuning.stopped_by_budget:
                        raise
                    scheduler.retire(index)  # the budget ended during its baseline: skipped
                    progress.message(f"{kernel.scop.name}: the time budget ended while its default recipe was measured; it keeps that recipe")
                    continue
                heuristics[index] = tuning.heuristic_params()
                target_trials = max(1, tuning.finished_trials())
            else:
                _enqueue_starting_points(tuning, index, families[index], kernel, chosen.trials, warm_starts, heuristics[index])
                target_trials = tuning.finished_trials() + chosen.trials
            result = tuning.run(target_trials, on_trial=progress.trial_done(kernel), wait_for_others=False, deadline=deadline)
            seconds = time.monotonic() - slice_started
            scheduler.observe(
                index,
                trials=result.trials,
                trials_run=result.trials_here - trials_before,
                seconds=seconds,
                best_latency_s=result.best_latency_s,
                default_latency_s=result.default_latency_s if chosen.baseline else None,
            )
            warm_starts.record(index, families[index], tuning.space, result.best_recipe)
            run.save(kernel, keys[kernel.scop.name], result)  # after each slice: Ctrl-C loses nothing
            rows[digest] = run.row(kernel, result, scheduler.progress[index].seconds)
            recipes[digest] = result.best_recipe
            progress.slice_finished(rows[digest], deadline - time.monotonic())
            interrupted = result.interrupted
            recently_tuned = [task for task in recently_tuned if task != index] + [index]
            for task in recently_tuned[:-LIVE_WORKERS]:
                tunings[task].suspend()
            recently_tuned = recently_tuned[-LIVE_WORKERS:]
    for digest, kernel in pending.items():
        if digest not in rows:
            rows[digest] = KernelReport(kernel.scop.name, _ops(kernel), math.nan, math.nan, 0, 0, "skipped", "default (the budget ended before its turn)")
    return interrupted


def _enqueue_starting_points(tuning: KernelTuning, task: int, family: tuple, kernel: LoweredKernel, trials: int, warm_starts: WarmStarts, heuristics: list[dict]) -> None:
    """Before a slice of ``trials`` trials: enqueue what they should try first, up to
    ``trials`` waiting trials in the study — the best recipes of similar kernels (warm
    starts), then the space's heuristic recipes not enqueued yet (taken from ``heuristics``)."""
    room = trials - tuning.waiting_trials()
    if room <= 0:
        return
    offers = warm_starts.offers(task, family, tuning.space, kernel, room)
    taken = heuristics[: room - len(offers)]
    del heuristics[: len(taken)]
    for params in offers + taken:
        tuning.enqueue(params)


def _work(kernel: LoweredKernel) -> float:
    """Points of the kernel's anchor statement's iteration domain (Ansor's work ``C_i``; 0
    when isl cannot count them)."""
    try:
        return float(domain_points(anchor_statement(kernel.scop)))
    except PolytfError:
        return 0.0
