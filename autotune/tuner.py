"""Tunes one kernel with an Optuna study: propose a recipe, compile it, verify it,
time it, keep the fastest correct one.

The study (Akiba et al., "Optuna", KDD 2019) uses the TPE sampler, seeded, over the
categorical dimensions of :class:`polytf.schedules.search_space.SearchSpace`. The first
trials are the default recipe and a few hand-written starting points; a failed
candidate (illegal schedule, compile error, wrong result) is a FAILED trial whose
reason is stored in the trial's ``failure`` user attribute, counted and reported.
Trials live in the cache's SQLite storage, so an interrupted run resumes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna

from polytf.autotune.measure import KernelBench, Measurement
from polytf.config import MeasurementConfig
from polytf.errors import PolytfError, TuningError
from polytf.ops.lowering import LoweredKernel
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.search_space import SearchSpace
from polytf.targets.target import Target

optuna.logging.set_verbosity(logging.WARNING)


class CandidateRejected(Exception):
    """Raised inside an Optuna objective to fail a trial with a reason."""


@dataclass
class KernelTuningResult:
    """What tuning one kernel found.

    Attributes:
        best_recipe: fastest verified recipe.
        best_latency_s: its median latency.
        default_latency_s: median latency of the default recipe.
        trials: trials in the study (including earlier, resumed ones).
        failures: reason of each failed trial.
        interrupted: the run was stopped (Ctrl-C) before all trials ran.
    """

    best_recipe: ScheduleRecipe
    best_latency_s: float
    default_latency_s: float
    trials: int
    failures: list[str] = field(default_factory=list)
    interrupted: bool = False


TrialCallback = Callable[[int, ScheduleRecipe, Measurement | None, str | None, float], None]


def tune_kernel(
    kernel: LoweredKernel,
    target: Target,
    *,
    trials: int,
    threads: int,
    storage: str | optuna.storages.BaseStorage | None = None,
    study_name: str | None = None,
    seed: int = 0,
    measurement: MeasurementConfig | None = None,
    timeout_s: float | None = None,
    restart: bool = False,
    on_trial: TrialCallback | None = None,
    evaluator: Callable[[ScheduleRecipe], Measurement | str] | None = None,
) -> KernelTuningResult:
    """Search ``trials`` recipes for ``kernel`` and return the best verified one.

    Args:
        storage: Optuna storage (URL or object); None keeps the study in memory.
        study_name: name in the storage (the cache-key digest); resumed if it exists.
        restart: delete an existing study of that name first (``--retune``).
        on_trial: called after each trial with (number, recipe, measurement or None,
            failure reason or None, best latency so far).
        evaluator: replaces compile + verify + time (tests use a fake measurer): returns a
            Measurement, or a failure reason.

    Raises:
        TuningError: not even the default recipe compiles and verifies.
    """
    config = measurement or MeasurementConfig()
    space = SearchSpace.for_scop(kernel.scop, threads, getattr(target, "native_vector_width", 8))
    best = [math.inf]
    if evaluator is None:
        bench = KernelBench(kernel, seed)

        def evaluator(recipe: ScheduleRecipe) -> Measurement | str:
            try:
                compiled = target.compile(kernel.scop, recipe)
            except PolytfError as error:
                return f"{type(error).__name__}: {error}"
            # a candidate 3x slower than the best so far is timed with one call only
            result = bench.measure(compiled, threads, config, cutoff_s=3 * best[0])
            return result if result.ok else f"verification failed: {result.error}"

    seen: dict[ScheduleRecipe, Measurement | str] = {}

    def evaluate(recipe: ScheduleRecipe) -> Measurement | str:
        if recipe not in seen:
            seen[recipe] = evaluator(recipe)
        return seen[recipe]

    default = space.default_recipe()
    baseline = evaluate(default)
    if isinstance(baseline, str):
        raise TuningError(f"kernel {kernel.scop.name}: the default recipe fails: {baseline}")

    if restart and storage is not None and study_name is not None:
        try:
            optuna.delete_study(study_name=study_name, storage=storage)
        except KeyError:
            pass
    study = optuna.create_study(
        study_name=study_name,
        storage=storage,
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(8, max(1, trials // 3))),
        load_if_exists=study_name is not None and storage is not None,
    )
    finished = [t for t in study.trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)]
    remaining = max(0, trials - len(finished))
    if not finished:
        for recipe in [default, *space.heuristic_recipes()][: max(1, remaining)]:
            study.enqueue_trial(space.params(recipe), skip_if_exists=True)

    best[0] = baseline.median_s

    def objective(trial: optuna.Trial) -> float:
        params = {name: trial.suggest_categorical(name, list(choices)) for name, choices in space.dimensions}
        recipe = space.recipe(params)
        trial.set_user_attr("recipe", recipe.to_dict())
        outcome = evaluate(recipe)
        if isinstance(outcome, str):
            trial.set_user_attr("failure", outcome)
            if on_trial:
                on_trial(trial.number, recipe, None, outcome, best[0])
            raise CandidateRejected(outcome)
        best[0] = min(best[0], outcome.median_s)
        if on_trial:
            on_trial(trial.number, recipe, outcome, None, best[0])
        return outcome.median_s

    interrupted = False
    try:
        study.optimize(objective, n_trials=remaining, timeout=timeout_s, catch=(CandidateRejected,), gc_after_trial=False)
    except KeyboardInterrupt:
        interrupted = True

    completed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    failures = [t.user_attrs.get("failure", "failed") for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    best_recipe, best_latency = default, baseline.median_s
    if completed:
        winner = min(completed, key=lambda t: t.value)
        if winner.value < best_latency:
            best_recipe = ScheduleRecipe.from_dict(winner.user_attrs["recipe"])
            best_latency = float(winner.value)
    return KernelTuningResult(best_recipe, best_latency, baseline.median_s, len(completed) + len(failures), failures, interrupted)
