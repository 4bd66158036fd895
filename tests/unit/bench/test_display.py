"""The bench's progress bars reach their end: a phase without units counts as one step."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from polytf.bench.display import BenchDisplay


def test_every_bar_ends_full():
    console = Console(file=StringIO(), width=120)
    with BenchDisplay(console, 2) as display:
        for row in range(2):
            display.row(f"row {row}")
            display.step("timing", 3)
            for _ in range(3):
                display.advance()
            display.step("profiling each kernel")  # no units
            phase = next(task for task in display.progress.tasks if task.id == display.phase)
            assert (phase.completed, phase.total) == (0, 1)
            display.row_done()
            assert phase.completed == phase.total == 1
    assert all(task.completed == task.total for task in display.progress.tasks)
