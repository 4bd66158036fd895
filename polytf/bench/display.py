"""What a ``polytf bench`` run shows while it runs: two progress bars (rows done, and the
current phase: the trials of a kernel, the timing rounds), fed by the tuner too; a line per
row and phase where the output is not a terminal."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from polytf.autotune.model_tuner import TuningProgress

__all__ = ["BenchDisplay", "tuning_progress"]


class BenchDisplay:
    """Two progress bars on a terminal: rows done, and the current phase (trials of a kernel,
    rounds). Elsewhere (a log file, a pipe: the bars would show only when the run ends) a
    line per row and per phase, with the time since the run began."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.lines = not console.is_terminal
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console, disable=self.lines
        )
        self.rows = self.progress.add_task("bench", total=total)
        self.phase = self.progress.add_task("", total=None)
        self._started = time.monotonic()

    def _line(self, text: str) -> None:
        if self.lines:
            self.console.print(f"[{timedelta(seconds=round(time.monotonic() - self._started))}] {text}", highlight=False, markup=False, soft_wrap=True)

    def __enter__(self) -> BenchDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def row(self, description: str) -> None:
        """Show the row being measured."""
        self.progress.update(self.rows, description=description)
        self._line(description)

    def row_done(self) -> None:
        self._finish_phase()
        self.progress.advance(self.rows)

    def step(self, description: str, total: int | None = None) -> None:
        """Show a new phase: ``total`` units of it (a step without units counts as one, done
        when the next step begins or the row ends: every bar reaches its end)."""
        self._finish_phase()
        self.progress.update(self.phase, description=f"  {description}", total=total or 1, completed=0)
        self._line(f"  {description}")

    def _finish_phase(self) -> None:
        phase = next(task for task in self.progress.tasks if task.id == self.phase)
        if phase.total:
            self.progress.update(self.phase, completed=phase.total)

    def advance(self) -> None:
        self.progress.advance(self.phase)


def tuning_progress(display: BenchDisplay, label: str) -> TuningProgress:
    """The tuner's progress shown on ``display`` (the kernel tuned, a tick per trial)."""

    class Progress(TuningProgress):
        def kernel_started(self, kernel, trials):
            display.step(f"{label}: tuning {kernel.scop.name} ({'+'.join(op for _, op in kernel.scop.ops)})", trials)

        def trial_done(self, kernel):
            return lambda *args: display.advance()

        def message(self, text):
            display.step(f"{label}: {text}")

    return Progress()
