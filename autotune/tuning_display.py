"""The tuning's progress display (``polytf tune``, and ``polytf.tune`` on a terminal): a rich
progress bar per kernel.

Each kernel's bar counts its trials and shows its best latency so far and how many of its
trials failed. When stderr is not a terminal (a pipe, a log file) there are no bars, whose
last frame would only be printed at the end, after every later message: a line per kernel
(per slice under a budget) says the same, in order, as it happens. Under a time budget (``--time-budget``) a kernel is tuned in slices: its bar
grows by each slice's trials, and a first row shows the budget left. The events come from
:func:`polytf.autotune.model_tuner.tune_model` (:class:`~polytf.autotune.model_tuner.TuningProgress`).
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from polytf.autotune.model_tuner import TuningProgress
from polytf.durations import format_duration, format_seconds

__all__ = ["RichTuningProgress"]


class RichTuningProgress(TuningProgress):
    """Shows tuning progress: one bar per kernel, its best latency so far and how many of its
    trials failed, on ``console`` (default: a console on stderr; ``polytf tune`` passes the one
    its warnings and errors go to, so that they print above the bars)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("best {task.fields[best]}"),
            TextColumn("{task.fields[failed]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            disable=not console.is_terminal,
        )
        self.lines = not console.is_terminal  # a line per kernel instead of the bars
        self.task = None
        self.failed = 0

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def model_prepared(self, kernel_count: int, unique_count: int) -> None:
        self.console.print(f"[bold]{kernel_count}[/] kernels ({unique_count} distinct) to tune")

    def kernel_started(self, kernel, trials: int) -> None:
        ops = "+".join(op for _, op in kernel.scop.ops)
        self.task = self.progress.add_task(f"{kernel.scop.name} ({ops})", total=trials, best="-", failed="")
        self.failed = 0

    def trial_done(self, kernel):
        def update(number, recipe, measurement, failure, best_s):
            self.failed += failure is not None
            if self.task is not None:
                self.progress.update(self.task, advance=1, best=format_seconds(best_s), failed=f"{self.failed} failed" if self.failed else "")
            if self.deadline is not None:
                self._show_budget(self.deadline - time.monotonic())

        return update

    # under a time budget: one bar per kernel across its slices, and a row with the budget left
    deadline: float | None = None

    def budget_started(self, budget_s: float, task_count: int) -> None:
        self.deadline = time.monotonic() + budget_s
        self.budget_task = self.progress.add_task("", total=budget_s, best="", failed="")
        self.kernel_tasks, self.kernel_failed = {}, {}
        self._show_budget(budget_s)

    def _show_budget(self, remaining_s: float) -> None:
        total = self._task(self.budget_task).total
        self.progress.update(self.budget_task, completed=min(total, total - remaining_s), description=f"time budget: {format_duration(remaining_s)} left")

    def slice_started(self, kernel, trials: int, remaining_s: float) -> None:
        name = kernel.scop.name
        if name not in self.kernel_tasks:
            ops = "+".join(op for _, op in kernel.scop.ops)
            self.kernel_tasks[name] = self.progress.add_task(f"{name} ({ops})", total=0, best="-", failed="")
            self.kernel_failed[name] = 0
        self.task, self.failed = self.kernel_tasks[name], self.kernel_failed[name]
        self.progress.update(self.task, total=self._task(self.task).total + trials)
        self._show_budget(remaining_s)

    def slice_finished(self, report, remaining_s: float) -> None:
        self.kernel_failed[report.kernel] = self.failed
        if self.lines:
            self._line(report, f"time budget: {format_duration(remaining_s)} left")
        self.progress.update(self.task, completed=self._task(self.task).total, best=format_seconds(report.tuned_latency_s))
        self.task = None
        self._show_budget(remaining_s)

    def _task(self, task_id):
        return next(task for task in self.progress.tasks if task.id == task_id)

    def kernel_finished(self, report) -> None:
        if report.status == "cached":
            self.console.print(f"  {report.kernel}: cached record reused ({format_seconds(report.tuned_latency_s)})")
        elif self.lines:
            self._line(report)
        elif self.task is not None:
            self.progress.update(self.task, completed=self.progress.tasks[-1].total, best=format_seconds(report.tuned_latency_s))
        self.task = None

    def _line(self, report, after: str = "") -> None:
        """The line of a kernel (or a slice of it) tuned, when there are no bars."""
        failed = f", {report.failed_trials} failed" if report.failed_trials else ""
        self.console.print(
            f"  {report.kernel}: {report.trials} trial{'s' if report.trials != 1 else ''}{failed}, best {format_seconds(report.tuned_latency_s)}"
            + (f"; {after}" if after else ""),
            markup=False, highlight=False, soft_wrap=True,
        )

    def message(self, text: str) -> None:
        self.console.print(text)
