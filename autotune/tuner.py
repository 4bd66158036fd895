"""Tunes one kernel with an Optuna study: propose a recipe, compile it, verify it,
time it, keep the fastest correct one.

The study (Akiba et al., "Optuna", KDD 2019) uses the TPE sampler, seeded, over the
categorical dimensions of :class:`polytf.schedules.search_space.SearchSpace`. The first
trials are the default recipe and a few hand-written starting points; a failed
candidate (illegal schedule, compile error, wrong result, crash, hang) is a FAILED trial
whose cause is stored in the trial's ``failure`` user attribute, counted and reported.
Trials live in the tuning storage (the cache's SQLite database, or a PostgreSQL database
shared by several machines), so an interrupted run resumes, and several
tuners may work on one study at once (:mod:`polytf.autotune.shared_study`: each trial is
claimed under an inter-process lock, so a study never runs more trials than asked; a
parameter set another tuner of the study has measured already is not timed again).
Every candidate is compiled, verified and timed in a worker process
(:mod:`polytf.autotune.isolation`): a crash or a hang costs one failed trial.
:class:`KernelTuning` keeps a kernel's baseline, worker and study between runs, so that
a time budget can continue the study slice by slice (:mod:`polytf.autotune.task_scheduler`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from polytf.autotune.isolation import CandidateEvaluator
from polytf.autotune.shared_study import (
    INTERRUPTED,
    claim_trial,
    fail_interrupted_trial,
    owner_name,
    tell_trial,
    wait_for_running_trials,
)
from polytf.config import CodegenConfig, MeasurementConfig, TuningConfig
from polytf.errors import TuningError
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.runtime.cpu.kernel_bench import Measurement
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.search_space import SearchSpace
from polytf.targets.target import Target

optuna.logging.set_verbosity(logging.WARNING)

#: Shortest limit of a candidate cut by a time budget's end, seconds.
MINIMUM_CANDIDATE_S = 1.0
#: Cause stored on a trial whose candidate was stopped because a time budget ended.
STOPPED_BY_BUDGET = "stopped at the end of the time budget"


@dataclass
class KernelTuningResult:
    """What tuning one kernel found.

    Attributes:
        best_recipe: fastest verified recipe.
        best_latency_s: its median latency.
        default_latency_s: median latency of the default recipe.
        trials: finished trials in the study (earlier, resumed ones and those of concurrent
            tuners included).
        failures: ``"trial N: cause"`` of each failed trial.
        interrupted: the run was stopped (Ctrl-C) before all trials ran.
        trials_here: trials this process ran (the others ran in concurrent tuners or
            earlier runs of the same study).
    """

    best_recipe: ScheduleRecipe
    best_latency_s: float
    default_latency_s: float
    trials: int
    failures: list[str] = field(default_factory=list)
    interrupted: bool = False
    trials_here: int = 0


TrialCallback = Callable[[int, ScheduleRecipe, Measurement | None, str | None, float], None]
#: ``evaluator(recipe)`` (or ``evaluator(recipe, fault)`` with injected faults) -> Measurement or failure cause
Evaluator = Callable[..., Measurement | str]


def tune_kernel(
    kernel: LoweredKernel,
    target: Target,
    *,
    trials: int,
    timeout_s: float | None = None,
    on_trial: TrialCallback | None = None,
    **settings: Any,
) -> KernelTuningResult:
    """Search ``trials`` recipes for ``kernel`` and return the best verified one: one
    :meth:`KernelTuning.run` of a :class:`KernelTuning` of the kernel.

    Candidates run in a worker process (:class:`~polytf.autotune.isolation.CandidateEvaluator`)
    for ``target`` (its search space gives the recipes; the worker chooses the backend of the
    same name, :func:`~polytf.compiler.backends.select_backend`: the CPU, or the GPU through
    CuPy, where candidates are timed with CUDA events): a crash, an LLVM abort or a hang
    (over ``candidate_time_limit_s``) fails that trial with its cause, and the study goes on.

    Several processes may tune the same study at once (``polytf tune`` on one cache):
    claiming a trial happens under ``lock``, counting every trial that is running or
    finished, so the study never gets more than ``trials`` in total; a running trial whose
    tuner process is gone is failed as abandoned (it still counts). The result is read
    back from the study after the others' running trials have finished, so every tuner of
    the study reports the same best recipe.

    Args:
        timeout_s: no trial is claimed after this many seconds.
        on_trial: called after each trial with (number, recipe, measurement or None,
            failure reason or None, best latency so far).
        settings: the keyword arguments of :class:`KernelTuning` (``threads`` required).

    Raises:
        TuningError: not even the default recipe compiles and verifies (the cause is named),
            or no worker process can be started.
        CacheError: a lock of the cache cannot be acquired in time.
    """
    with KernelTuning(kernel, target, planned_trials=trials, **settings) as tuning:
        return tuning.run(trials, timeout_s=timeout_s, on_trial=on_trial)


class KernelTuning(AbstractContextManager):
    """A kernel's tuning that goes on in slices: the baseline is measured and the study
    opened once, then each :meth:`run` continues the study up to a number of trials (the
    unit the model tuner's task scheduler hands out, :mod:`polytf.autotune.task_scheduler`).
    :func:`tune_kernel` is one run of one of these.

    Args:
        kernel: the kernel to tune.
        target: the target its candidates are compiled for (its search space gives them).
        threads: threads the candidates run on (the target's thread count).
        storage: Optuna storage (URL or object); None keeps the study in memory.
        study_name: name in the storage (the cache-key digest); resumed if it exists.
        seed: seed of the sampler and of the random inputs.
        measurement: verification tolerances and timing repetitions.
        restart: delete an existing study of that name first (``--retune``).
        evaluator: replaces the worker (tests use a fake measurer): returns a Measurement,
            or a failure reason.
        lock: inter-process lock around study creation and trial claims (the storage's
            ``study_lock``: a file lock of the cache, or a PostgreSQL advisory lock); None: a
            lock of this process only.
        measurement_lock: held while a candidate is compiled, verified and timed, so that
            tuners sharing the machine never time candidates at the same time; None: none.
        candidate_time_limit_s: wall-clock limit of one candidate in the worker.
        codegen: LLVM settings of the worker's target.
        faults: trial number -> fault to inject (``"crash"``, ``"hang"``, ``"abort"``; tests).
        planned_trials: the trials the study is meant to get, which sizes the sampler's
            random start-up and how many of the default and heuristic recipes a new study
            gets enqueued; None (tuning under a time budget, total unknown): the start-up
            of :class:`~polytf.config.TuningConfig`'s default trials, and only the default
            recipe enqueued (the caller enqueues the heuristic recipes, :meth:`heuristic_params`,
            and warm starts, :meth:`enqueue`, slice by slice).

    Use as a context manager: the worker process is stopped on exit.
    """

    def __init__(
        self,
        kernel: LoweredKernel,
        target: Target,
        *,
        threads: int,
        storage: str | optuna.storages.BaseStorage | None = None,
        study_name: str | None = None,
        seed: int = 0,
        measurement: MeasurementConfig | None = None,
        restart: bool = False,
        evaluator: Evaluator | None = None,
        lock: AbstractContextManager | None = None,
        measurement_lock: AbstractContextManager | None = None,
        candidate_time_limit_s: float = TuningConfig.candidate_time_limit_s,
        codegen: CodegenConfig | None = None,
        faults: Mapping[int, str] | None = None,
        planned_trials: int | None = None,
    ) -> None:
        self.kernel = kernel
        self.space = target.search_space(kernel.scop, threads)
        self.storage, self.study_name, self.seed, self.restart = storage, study_name, seed, restart
        self.candidate_time_limit_s = candidate_time_limit_s
        self.study: optuna.Study | None = None
        #: time.monotonic() at which a budget ends (set during a run with a deadline)
        self._deadline: float | None = None
        #: a candidate (or the baseline) was stopped because a time budget ended
        self.stopped_by_budget = False
        self._study_run = _StudyRun(
            kernel,
            self.space,
            planned_trials if planned_trials is not None else TuningConfig.trials,
            lock if lock is not None else threading.RLock(),
            measurement_lock if measurement_lock is not None else contextlib.nullcontext(),
            dict(faults or {}),
            seeds=max(1, planned_trials) if planned_trials is not None else 1,
        )
        self._isolated: CandidateEvaluator | None = None
        if evaluator is None:
            self._isolated = CandidateEvaluator(
                kernel,
                threads,
                measurement=measurement or MeasurementConfig(),
                seed=seed,
                time_limit_s=candidate_time_limit_s,
                codegen=codegen,
                target_name=target.name,  # the worker chooses the backend of this name (the CPU, or the GPU through CuPy)
            )
            isolated, study_run = self._isolated, self._study_run

            def evaluator(recipe: ScheduleRecipe, fault: str | None = None) -> Measurement | str:
                limit_s = self._candidate_limit_s()
                isolated.time_limit_s = limit_s
                # a candidate 3x slower than the best so far is timed with one call only
                outcome = isolated.evaluate(recipe, cutoff_s=3 * study_run.best_s, fault=fault)
                if isinstance(outcome, str) and limit_s < self.candidate_time_limit_s and outcome.startswith("timed out"):
                    self.stopped_by_budget = True
                    return f"{STOPPED_BY_BUDGET} (after {limit_s:.1f} s)"
                return outcome

        self._study_run.evaluator = evaluator

    def start(self, deadline: float | None = None) -> None:
        """Measure the baseline and open the study, once (:meth:`run` does it first).

        Args:
            deadline: ``time.monotonic()`` at which a time budget ends: the baseline is
                stopped then (at least :data:`MINIMUM_CANDIDATE_S` after it began), which
                raises TuningError with :attr:`stopped_by_budget` set.

        Raises:
            TuningError: the default recipe fails (or is stopped by ``deadline``), or no
                worker process can be started.
            CacheError: the study's lock cannot be acquired in time.
        """
        if self.study is None:
            self._deadline = deadline
            try:
                self._study_run.measure_baseline()
            finally:
                self._deadline = None
            self.study = self._study_run.open_study(self.storage, self.study_name, self.seed, self.restart)

    def run(
        self,
        trials: int,
        *,
        timeout_s: float | None = None,
        on_trial: TrialCallback | None = None,
        wait_for_others: bool = True,
        deadline: float | None = None,
    ) -> KernelTuningResult:
        """Continue the study until it holds ``trials`` trials (or ``timeout_s`` has passed)
        and return the best recipe of the whole study.

        Args:
            trials: trials the study holds afterwards, in total (earlier runs' included).
            timeout_s: no trial is claimed after this many seconds.
            on_trial: as for :func:`tune_kernel`.
            wait_for_others: wait for the running trials of concurrent tuners before
                reading the result (:func:`tune_kernel` does; slices of a budget do not).
            deadline: ``time.monotonic()`` at which a time budget ends: no trial is
                claimed after it, and a candidate still running then is stopped (at least
                :data:`MINIMUM_CANDIDATE_S` after it began) and fails with cause
                :data:`STOPPED_BY_BUDGET`. The baseline (first run) is not limited: call
                :meth:`start` with the deadline first for that.

        Raises:
            TuningError: the default recipe fails (first run), or no worker process can be started.
        """
        self.start()
        self._study_run.trials = trials
        if deadline is not None:
            left_s = max(0.0, deadline - time.monotonic())
            timeout_s = left_s if timeout_s is None else min(timeout_s, left_s)
        self._deadline = deadline
        try:
            interrupted = self._study_run.run_trials(self.study, timeout_s, on_trial)
        finally:
            self._deadline = None
        if wait_for_others and not interrupted and self.storage is not None:  # concurrent tuners' last trials
            try:
                wait_for_running_trials(self.study, self._study_run.lock, self.candidate_time_limit_s + TuningConfig.worker_start_timeout_s)
            except KeyboardInterrupt:
                interrupted = True
        return self._study_run.result(self.study, interrupted)

    def _candidate_limit_s(self) -> float:
        """Wall-clock limit of the next candidate: the configured one, cut to the budget's end."""
        if self._deadline is None:
            return self.candidate_time_limit_s
        return min(self.candidate_time_limit_s, max(MINIMUM_CANDIDATE_S, self._deadline - time.monotonic()))

    def finished_trials(self) -> int:
        """Trials of the study that are finished (complete or failed), 0 before :meth:`start`."""
        if self.study is None:
            return 0
        return len(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)))

    def waiting_trials(self) -> int:
        """Enqueued trials no tuner has claimed yet."""
        return 0 if self.study is None else len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def heuristic_params(self) -> list[dict]:
        """Parameters of the space's hand-written starting points
        (:meth:`~polytf.schedules.search_space.SearchSpace.heuristic_recipes`)."""
        return [self.space.params(recipe) for recipe in self.space.heuristic_recipes()]

    def enqueue(self, params: Mapping[str, object]) -> None:
        """Enqueue a trial with ``params`` (every dimension, values among its choices) unless
        the study already holds one with them; it is claimed before sampled trials
        (oldest enqueued first). Call after :meth:`start`."""
        with self._study_run.lock:
            self.study.enqueue_trial(dict(params), skip_if_exists=True)

    def suspend(self) -> None:
        """Stop the worker process until the next candidate (which starts a new one): a
        model's tasks do not all keep a worker while others are tuned."""
        if self._isolated is not None:
            self._isolated.close()

    def close(self) -> None:
        """Stop the worker process."""
        self.suspend()

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class _StudyRun:
    """One tuner process's part of a kernel's study."""

    kernel: LoweredKernel
    space: SearchSpace
    trials: int
    lock: AbstractContextManager
    measurement_lock: AbstractContextManager
    faults: dict[int, str]
    #: how many of the default and heuristic recipes a new study gets enqueued
    seeds: int = 1
    evaluator: Evaluator | None = None
    baseline: Measurement | None = None
    best_s: float = math.inf
    seen: dict[ScheduleRecipe, Measurement | str] = field(default_factory=dict)

    def evaluate(self, recipe: ScheduleRecipe, number: int | None = None) -> Measurement | str:
        """The candidate's Measurement or failure cause (measured once per recipe, unless a
        fault is injected into trial ``number``)."""
        fault = self.faults.get(number) if number is not None else None
        if not fault and recipe in self.seen:
            return self.seen[recipe]
        with self.measurement_lock:
            outcome = self.evaluator(recipe, fault) if fault else self.evaluator(recipe)
        if not fault:
            self.seen[recipe] = outcome
        if isinstance(outcome, Measurement):
            self.best_s = min(self.best_s, outcome.median_s)
        return outcome

    def measure_baseline(self) -> None:
        """Measure the default recipe (not a trial: every tuner of a study needs its own).

        Raises:
            TuningError: it fails (the tuner cannot go on without a verified baseline).
        """
        baseline = self.evaluate(self.space.default_recipe())
        if isinstance(baseline, str):
            raise TuningError(f"kernel {self.kernel.scop.name}: the default recipe fails: {baseline}")
        self.baseline = baseline

    def open_study(self, storage, study_name: str | None, seed: int, restart: bool) -> optuna.Study:
        """Create or load the study under the lock; a new study gets the default and the
        heuristic recipes enqueued, and its kernel's name and ops as user attributes, once."""
        persistent = storage is not None and study_name is not None
        with self.lock:
            if restart and persistent:
                with contextlib.suppress(KeyError):
                    optuna.delete_study(study_name=study_name, storage=storage)
            study = optuna.create_study(
                study_name=study_name,
                storage=storage,
                direction="minimize",
                sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(8, max(1, self.trials // 3))),
                load_if_exists=persistent,
            )
            if not study.get_trials(deepcopy=False):
                # the study is named by a digest: say which kernel it tunes (optuna-dashboard shows these)
                study.set_user_attr("kernel", self.kernel.scop.name)
                study.set_user_attr("ops", "+".join(op for _, op in self.kernel.scop.ops))
                for recipe in [self.space.default_recipe(), *self.space.heuristic_recipes()][: self.seeds]:
                    study.enqueue_trial(self.space.params(recipe), skip_if_exists=True)
        return study

    def measured_in_study(self, study: optuna.Study, claimed: optuna.Trial, params: dict, recipe: ScheduleRecipe) -> Measurement | None:
        """The latency a complete trial of the study already measured with ``params`` (a
        concurrent tuner's, on this machine or another sharing the study: same cache key, so
        same CPU and threads), as a Measurement, so that no parameter set is timed twice; the
        reused trial's number is stored as the ``measured_in`` user attribute. None when this
        process measured the recipe itself (:meth:`evaluate` has it), no trial has these
        parameters, or a fault is injected into the claimed trial."""
        if recipe in self.seen or claimed.number in self.faults:
            return None
        for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if trial.params == params and trial.value is not None:
                claimed.set_user_attr("measured_in", trial.number)
                measurement = Measurement((float(trial.value),))
                self.seen[recipe] = measurement
                self.best_s = min(self.best_s, measurement.median_s)
                return measurement
        return None

    def run_trials(self, study: optuna.Study, timeout_s: float | None, on_trial: TrialCallback | None) -> bool:
        """Claim, evaluate and tell trials until the study has ``trials`` or ``timeout_s``
        has passed. Returns whether Ctrl-C stopped it (the running trial is then failed)."""
        started = time.monotonic()
        claimed = None
        try:
            while timeout_s is None or time.monotonic() - started < timeout_s:
                claimed = claim_trial(study, self.lock, self.trials)
                if claimed is None:
                    break
                params = {name: claimed.suggest_categorical(name, list(choices)) for name, choices in self.space.dimensions}
                recipe = self.space.recipe(params)
                claimed.set_user_attr("recipe", recipe.to_dict())
                outcome = self.measured_in_study(study, claimed, params, recipe)
                if outcome is None:
                    outcome = self.evaluate(recipe, claimed.number)  # Ctrl-C lands here, waiting for the worker
                failure = outcome if isinstance(outcome, str) else None
                tell_trial(study, claimed, None if failure else outcome.median_s, failure)
                number, claimed = claimed.number, None
                if on_trial:
                    on_trial(number, recipe, None if failure else outcome, failure, self.best_s)
        except KeyboardInterrupt:
            if claimed is not None:
                fail_interrupted_trial(study, claimed)
            return True
        return False

    def result(self, study: optuna.Study, interrupted: bool) -> KernelTuningResult:
        """The best recipe of the whole study (every tuner's trials) against this process's
        baseline."""
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        completed = [t for t in finished if t.state == TrialState.COMPLETE]
        failures = [f"trial {t.number}: {t.user_attrs.get('failure', 'failed')}" for t in finished if t.state == TrialState.FAIL]
        best_recipe, best_latency = self.space.default_recipe(), self.baseline.median_s
        if completed:
            winner = min(completed, key=lambda t: t.value)
            if winner.value < best_latency:
                stored = winner.user_attrs.get("recipe")
                best_recipe = ScheduleRecipe.from_dict(stored) if stored is not None else self.space.recipe(winner.params)
                best_latency = float(winner.value)
        mine = owner_name()
        here = sum(1 for t in finished if t.user_attrs.get("owner") == mine)
        return KernelTuningResult(best_recipe, best_latency, self.baseline.median_s, len(finished), failures, interrupted, here)


__all__ = ["INTERRUPTED", "MINIMUM_CANDIDATE_S", "STOPPED_BY_BUDGET", "KernelTuning", "KernelTuningResult", "TrialCallback", "tune_kernel"]
