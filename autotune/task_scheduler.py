"""Which kernel gets the next trials of a model's time budget: Ansor's task scheduler.

A model's tuning tasks are its unique kernels. The model's latency is the sum over tasks
of ``count_i × g_i`` (``count_i`` identical kernels share task ``i``'s record, ``g_i`` is
its best latency so far), so the trials of a budget should go where they lower that sum
the most. After Zheng et al., "Ansor: Generating High-Performance Tensor Programs for Deep
Learning", OSDI 2020, §6 (and TVM's ``auto_scheduler.TaskScheduler``), the scheduler
estimates for each task the gradient of the model's latency with respect to the trials
``t_i`` spent on it::

    gain_i = count_i × (α · backward_i + (1 − α) · forward_i)      [seconds of model latency per trial]
    backward_i = (g_i(t_i − Δ) − g_i(t_i)) / Δ                      recent improvement per trial
    forward_i  = max(g_i / t_i, g_i − β · work_i / max_k(work_k / g_k)) × P / (P + stale_i)

``backward_i`` is the observed rate over the last window of ``Δ`` trials. ``forward_i`` is
Ansor's optimistic term: the task could reach zero latency in as many trials again
(``g_i / t_i``, large for a task with few trials, so that every task is explored), or as
fast per point of work as its fastest similar task ``k`` (same ops and search-space
dimensions, different shapes), within a factor ``β``. polytf adds one damping factor,
``P / (P + stale_i)`` with ``stale_i`` the trials since the task's best last improved, in
place of Ansor's per-task early stopping: a converged task fades instead of being dropped.
In terms of the model's time share ``weight_i = count_i × g_i``, the gain is the weight times
the task's relative improvement rate. With probability ``ε`` a random task is picked
instead (ε-greedy, seeded).

Tasks are handed out in slices of a few trials. Every task first gets a baseline slice
(its default recipe measured, in task order); then each slice goes to the task of largest
gain. A slice starts only if its expected cost (its trials × the task's mean measured trial
duration) fits in the remaining budget; when none fits, tuning ends.

The scheduler is pure and deterministic: it is fed what each slice did
(:meth:`TaskScheduler.observe`) and never measures anything itself.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

#: Weight of the observed improvement against the optimistic one (Ansor's α).
ALPHA = 0.2
#: How far a task may stay from its fastest similar task's throughput (Ansor's β).
BETA = 2.0
#: Trials of the backward window Δ (Ansor: 3 rounds; here two slices).
WINDOW_TRIALS = 6
#: Trials since the last improvement that halve a task's optimistic term (P).
PATIENCE_TRIALS = 12
#: Probability of picking a random task (ε-greedy).
EPSILON = 0.05
#: Trials per slice after the baseline.
SLICE_TRIALS = 3


@dataclass(frozen=True)
class Task:
    """One unique kernel to tune.

    Attributes:
        name: the kernel's name (for reports).
        count: kernels of the model that share its record (identical kernels), ``>= 1``.
        family: tasks with equal families are similar (same ops and search-space
            dimensions, other shapes): they warm-start each other and enter each other's
            similarity term. None: similar to none.
        work: points of its anchor statement's iteration domain (Ansor's FLOP count ``C_i``;
            0: no similarity term).
        max_trials: no slice takes the task's study beyond this many trials (the size of
            its search space); None: no limit.
    """

    name: str
    count: int = 1
    family: Hashable | None = None
    work: float = 0.0
    max_trials: int | None = None


@dataclass
class TaskProgress:
    """What the slices of one task did so far (fed by :meth:`TaskScheduler.observe`).

    Attributes:
        trials: trials in the task's study (earlier runs' included).
        trials_here: trials this run's slices ran (the baseline slice counts one).
        seconds: wall time of this run's slices, seconds.
        sampled_trials / sampled_seconds: the same for its slices after the baseline (whose
            time also holds a worker's start and the study's opening).
        baseline_seconds: wall time of its baseline slice, seconds.
        slices: slices run.
        default_latency_s: median latency of the default recipe, seconds (NaN before the baseline).
        best_latency_s: best latency of the study so far, seconds.
        history: ``(trials, best_latency_s)`` after each slice, starting with ``(0, default)``.
        improved_at: ``trials`` when the best last improved.
        retired: no more slices (its space is exhausted, or it failed).
    """

    trials: int = 0
    trials_here: int = 0
    seconds: float = 0.0
    sampled_trials: int = 0
    sampled_seconds: float = 0.0
    baseline_seconds: float = 0.0
    slices: int = 0
    default_latency_s: float = math.nan
    best_latency_s: float = math.nan
    history: list[tuple[int, float]] = field(default_factory=list)
    improved_at: int = 0
    retired: bool = False


@dataclass(frozen=True)
class TrialSlice:
    """Trials handed to one task.

    Attributes:
        task: index of the task.
        trials: trials to run (1 for the baseline slice: the default recipe).
        expected_s: expected wall time, seconds.
        baseline: the task's first slice (its default recipe measured).
    """

    task: int
    trials: int
    expected_s: float
    baseline: bool


class TaskScheduler:
    """Allocates a time budget's trials to tasks by their estimated gain (see the module).

    Args:
        tasks: the tasks, in the model's execution order (baselines run in this order).
        slice_trials: trials per slice after the baseline.
        window_trials: Δ of the backward window, trials.
        alpha, beta, epsilon, patience_trials: see the module.
        seed: seed of the ε-greedy choice.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        *,
        slice_trials: int = SLICE_TRIALS,
        window_trials: int = WINDOW_TRIALS,
        alpha: float = ALPHA,
        beta: float = BETA,
        epsilon: float = EPSILON,
        patience_trials: int = PATIENCE_TRIALS,
        seed: int = 0,
    ) -> None:
        self.tasks = tuple(tasks)
        self.progress = [TaskProgress() for _ in self.tasks]
        self.slice_trials = max(1, int(slice_trials))
        self.window_trials = max(1, int(window_trials))
        self.alpha, self.beta, self.epsilon = float(alpha), float(beta), float(epsilon)
        self.patience_trials = max(1, int(patience_trials))
        self.random = random.Random(seed)

    # -- what the slices did ----------------------------------------------------------------
    def observe(self, task: int, *, trials: int, trials_run: int, seconds: float, best_latency_s: float, default_latency_s: float | None = None) -> None:
        """Record a finished slice of ``task``.

        Args:
            trials: trials in its study now (in total).
            trials_run: trials this slice ran (at least 1 is counted, for the cost estimate).
            seconds: the slice's wall time, seconds.
            best_latency_s: the study's best latency now, seconds.
            default_latency_s: the default recipe's latency: given with the task's baseline
                slice (its first), and only then.
        """
        progress = self.progress[task]
        if default_latency_s is not None:
            progress.default_latency_s = float(default_latency_s)
            if not progress.history:
                progress.history.append((0, float(default_latency_s)))
        previous = progress.best_latency_s
        best = float(best_latency_s)
        if math.isnan(previous) or best < previous:
            progress.improved_at = int(trials) if not math.isnan(previous) else 0
        progress.best_latency_s = best if math.isnan(previous) else min(previous, best)
        progress.trials = max(progress.trials, int(trials))
        progress.trials_here += max(1, int(trials_run))
        progress.seconds += max(0.0, float(seconds))
        if default_latency_s is not None:
            progress.baseline_seconds = max(0.0, float(seconds))
        elif trials_run > 0:
            progress.sampled_trials += int(trials_run)
            progress.sampled_seconds += max(0.0, float(seconds))
        progress.slices += 1
        progress.history.append((progress.trials, progress.best_latency_s))
        limit = self.tasks[task].max_trials
        if limit is not None and progress.trials >= limit:
            progress.retired = True

    def retire(self, task: int) -> None:
        """Give ``task`` no more slices (it failed, or its worker cannot start)."""
        self.progress[task].retired = True

    # -- estimates ----------------------------------------------------------------------------
    def weight(self, task: int) -> float:
        """The task's share of the model's latency, ``count × best latency`` (seconds)."""
        progress = self.progress[task]
        return self.tasks[task].count * progress.best_latency_s

    def backward_rate(self, task: int) -> float:
        """Drop of the task's best latency per trial over its last window (seconds/trial, >= 0)."""
        progress = self.progress[task]
        if not progress.history:
            return 0.0
        now = progress.trials
        earlier = [point for point in progress.history if point[0] <= now - self.window_trials] or progress.history[:1]
        trials, latency_s = earlier[-1]
        if now <= trials:
            return 0.0
        return max(0.0, (latency_s - progress.best_latency_s) / (now - trials))

    def forward_rate(self, task: int) -> float:
        """Ansor's optimistic improvement per trial, damped by the trials since the task
        last improved (seconds/trial)."""
        progress, spec = self.progress[task], self.tasks[task]
        best = progress.best_latency_s
        optimistic = best / max(1, progress.trials)
        if spec.family is not None and spec.work > 0:
            throughputs = [
                other.work / self.progress[k].best_latency_s
                for k, other in enumerate(self.tasks)
                if k != task and other.family == spec.family and other.work > 0 and self.progress[k].best_latency_s > 0
            ]
            if throughputs:
                optimistic = max(optimistic, best - self.beta * spec.work / max(throughputs))
        stale = max(0, progress.trials - progress.improved_at)
        return optimistic * self.patience_trials / (self.patience_trials + stale)

    def gain(self, task: int) -> float:
        """Expected drop of the model's latency per trial of ``task`` (seconds/trial): ``inf``
        for a task without its baseline, 0 for a retired one."""
        progress = self.progress[task]
        if progress.retired:
            return 0.0
        if math.isnan(progress.best_latency_s):
            return math.inf
        rate = self.alpha * self.backward_rate(task) + (1 - self.alpha) * self.forward_rate(task)
        return self.tasks[task].count * rate

    def trial_s(self, task: int) -> float:
        """Expected wall time of one trial of ``task``: its mean over its slices after the
        baseline, else the time of its baseline slice (an overestimate: it holds start-up
        costs), or before its baseline, the longest baseline slice of the other tasks (0
        before any: the first baseline's cost is unknown, and so may overrun a budget)."""
        progress = self.progress[task]
        if progress.sampled_trials:
            return progress.sampled_seconds / progress.sampled_trials
        if progress.trials_here:
            return progress.seconds / progress.trials_here
        return max((p.baseline_seconds for p in self.progress), default=0.0)

    # -- the decision ---------------------------------------------------------------------------
    def next_slice(self, remaining_s: float) -> TrialSlice | None:
        """The next slice, or None when tuning should stop (no live task's slice fits in
        ``remaining_s`` seconds, or every task is retired).

        Baselines come first, in task order; then the task of largest :meth:`gain`
        (ties: the earlier task), or with probability ε a random live task."""
        affordable = []
        for index, progress in enumerate(self.progress):
            if progress.retired:
                continue
            baseline = math.isnan(progress.best_latency_s)
            trials = 1 if baseline else self._slice_trials(index)
            expected_s = trials * self.trial_s(index)
            if trials > 0 and expected_s <= remaining_s:
                affordable.append(TrialSlice(index, trials, expected_s, baseline))
        if not affordable or remaining_s <= 0:
            return None
        baselines = [candidate for candidate in affordable if candidate.baseline]
        if baselines:
            return baselines[0]
        if len(affordable) > 1 and self.random.random() < self.epsilon:
            return affordable[self.random.randrange(len(affordable))]
        return max(affordable, key=lambda candidate: (self.gain(candidate.task), -candidate.task))

    def _slice_trials(self, task: int) -> int:
        limit = self.tasks[task].max_trials
        if limit is None:
            return self.slice_trials
        return max(0, min(self.slice_trials, limit - self.progress[task].trials))


__all__ = ["ALPHA", "BETA", "EPSILON", "PATIENCE_TRIALS", "SLICE_TRIALS", "WINDOW_TRIALS", "Task", "TaskProgress", "TaskScheduler", "TrialSlice"]
