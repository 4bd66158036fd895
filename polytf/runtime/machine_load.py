"""Is the machine busy? Other processes' use of the cores, measured before polytf times anything.

Timings taken while other processes run are wrong in a way no number of repeats fixes: a
parallel kernel waits for its slowest thread, and a thread that finds no free core waits for
the scheduler (on Linux an OpenMP worker that went to sleep wakes a scheduler tick later,
about 4 ms), so a 50 µs kernel measures 4 ms in one trial and 50 µs in the next, and a tuner
picks recipes from noise. :func:`busy_cores` asks the kernel (``/proc/stat``) how much CPU
time all processes but this one used over a short interval while this process sleeps;
:func:`check_machine_load` turns that into one :class:`BusyMachineWarning` that says what
to do. Elsewhere than Linux nothing is measured (None) and nothing is said.

The same idea as ``pyperf system tune`` and Google Benchmark's "CPU scaling is enabled"
warning: say so when the machine cannot give a trustworthy figure, rather than print one.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from polytf.errors import BusyMachineWarning

__all__ = ["BUSY_CORES", "MachineLoad", "busy_cores", "check_machine_load"]

#: Other processes using at least this many cores on average make the machine busy.
BUSY_CORES = 0.5
#: How long the load is measured, seconds.
INTERVAL_S = 0.25

_PROC_STAT = Path("/proc/stat")
_SELF_STAT = Path("/proc/self/stat")


@dataclass(frozen=True)
class MachineLoad:
    """Other processes' use of this process's cores over a short interval.

    Attributes:
        busy_cores: cores' worth of CPU time used by other processes (0 .. cores).
        cores: cores this process may run on.
        interval_s: how long it was measured, seconds.
    """

    busy_cores: float
    cores: int
    interval_s: float

    def is_busy(self, threads: int) -> bool:
        """Whether the other processes leave fewer free cores than ``threads`` need (and use at
        least :data:`BUSY_CORES`)."""
        return self.busy_cores >= BUSY_CORES and self.cores - self.busy_cores < threads - 0.25

    def message(self, threads: int, what: str) -> str:
        free = max(0.0, self.cores - self.busy_cores)
        return (
            f"the machine is busy: other processes kept {self.busy_cores:.1f} of its {self.cores} cores busy "
            f"(measured over {self.interval_s:.2f} s), leaving {free:.1f} for {what} on {threads} thread{'s' if threads != 1 else ''}; "
            "timings of parallel kernels are unreliable meanwhile (a thread waiting for a core can add milliseconds to a "
            "microsecond kernel). Stop the other processes, or use fewer threads (--threads)"
        )


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot, from the first line of /proc/stat."""
    try:
        fields = _PROC_STAT.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - idle, total


def _own_ticks() -> int | None:
    """Clock ticks this process (all its threads) spent running, from /proc/self/stat."""
    try:
        text = _SELF_STAT.read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return int(fields[11]) + int(fields[12])  # utime, stime


def busy_cores(interval_s: float = INTERVAL_S) -> MachineLoad | None:
    """Other processes' CPU use over ``interval_s`` seconds while this process sleeps (its own
    threads' time, e.g. OpenMP workers still spinning, is subtracted); None where ``/proc`` is
    not there to ask."""
    first, own_first = _cpu_ticks(), _own_ticks()
    if first is None or own_first is None:
        return None
    time.sleep(interval_s)
    second, own_second = _cpu_ticks(), _own_ticks()
    if second is None or own_second is None or second[1] <= first[1]:
        return None
    cpus = os.cpu_count() or 1
    busy_ticks = max(0, (second[0] - first[0]) - (own_second - own_first))
    # all CPUs' ticks over the interval = cpus x the interval's length in ticks
    busy = cpus * busy_ticks / (second[1] - first[1])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    return MachineLoad(min(busy, float(cpus)), cores, interval_s)


def check_machine_load(threads: int, what: str, load: MachineLoad | None = None) -> MachineLoad | None:
    """Measure the load (unless ``load`` is given) and emit one :class:`BusyMachineWarning`
    when the machine is too busy for ``what`` (e.g. "tuning") on ``threads`` threads; returns
    the load measured (None where it cannot be)."""
    load = load if load is not None else busy_cores()
    if load is not None and load.is_busy(threads):
        warnings.warn(BusyMachineWarning(load.message(threads, what)), stacklevel=2)
    return load
