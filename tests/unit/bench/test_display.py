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



def _shown(terminal: bool) -> str:
    """What one row of two phases shows on a terminal or in a log."""
    output = StringIO()
    with BenchDisplay(Console(file=output, width=120, force_terminal=terminal), 2) as display:
        display.row("[1/2] resnet50 b1, 2 thread(s)")
        display.step("resnet50 b1: tuning k0_conv (Conv2D)", 4)
        display.advance()
        display.step("resnet50 b1: timing", 3)
        display.row_done()
    return output.getvalue()


def test_a_log_gets_a_line_per_row_and_phase():
    """Without a terminal the bars would show only at the end of a run of many minutes: each
    row and phase is a line of its own, with the time since the run began."""
    assert _shown(terminal=False).splitlines() == [
        "[0:00:00] [1/2] resnet50 b1, 2 thread(s)",
        "[0:00:00]   resnet50 b1: tuning k0_conv (Conv2D)",
        "[0:00:00]   resnet50 b1: timing",
    ]


def test_a_terminal_gets_the_bars_and_no_lines():
    shown = _shown(terminal=True)
    assert "[0:00:00]" not in shown and "resnet50 b1" in shown
