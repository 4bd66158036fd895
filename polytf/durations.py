"""Durations written by people: ``600``, ``600s``, ``10m``, ``1h``, ``1h30m``, ``2.5m``.

Used by the ``--time-budget`` options of ``polytf tune`` and ``polytf bench``; the parsed
value is a float number of seconds, always positive (a budget of nothing is a mistake).
"""

from __future__ import annotations

import math
import re

from polytf.errors import PolytfError

#: Seconds per unit; a number without a unit is in seconds.
UNIT_SECONDS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hr": 3600.0}

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(hr|h|min|m|sec|s)?", re.IGNORECASE)


def parse_duration(text: str | float | int) -> float:
    """Seconds in a duration such as ``"600"``, ``"600s"``, ``"10m"``, ``"1h"``, ``"1.5h"``
    or ``"1h30m"`` (units ``s``/``sec``, ``m``/``min``, ``h``/``hr``, any case; a bare
    number is seconds; parts with units add up, largest unit first).

    Args:
        text: the duration, as typed on a command line (a number is taken as seconds).

    Returns:
        The duration in seconds (positive, finite).

    Raises:
        PolytfError: ``text`` is not such a duration, or is zero (the message shows the
            accepted forms).
    """
    source = str(text).strip()
    position, total, previous_unit = 0, 0.0, math.inf
    parts = 0
    while position < len(source):
        match = _PART.match(source, position)
        if match is None:
            break
        unit_seconds = UNIT_SECONDS[(match.group(2) or "").lower()]
        bare = not match.group(2)
        if unit_seconds >= previous_unit or (bare and parts):  # "10m1h", "1m30" or "10s5s"
            break
        total += float(match.group(1)) * unit_seconds
        previous_unit, parts = unit_seconds, parts + 1
        position = match.end()
        while position < len(source) and source[position].isspace():
            position += 1
    if not parts or position != len(source) or not math.isfinite(total):
        raise PolytfError(f"{text!r} is not a duration: write seconds or a number with a unit, e.g. 600, 600s, 10m, 1h, 1h30m")
    if not total > 0:
        raise PolytfError(f"the duration {text!r} must be more than 0 seconds")
    return total


def format_duration(seconds: float) -> str:
    """``1.5`` -> ``"1.5s"``, ``42.3`` -> ``"42s"``, ``432`` -> ``"7m12s"``, ``3720`` ->
    ``"1h02m"``; ``"0s"`` for anything not positive (a budget that is spent)."""
    if not seconds > 0:
        return "0s"
    whole = round(seconds)
    if seconds < 9.95:
        return f"{seconds:.1f}".removesuffix(".0") + "s"
    if whole < 60:
        return f"{whole}s"
    minutes, rest = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_seconds(value: float) -> str:
    """A latency: ``1.5e-5`` -> ``"15.0 µs"``, ``0.0123`` -> ``"12.30 ms"``, ``2`` -> ``"2.00 s"``;
    NaN or infinity -> ``"-"``."""
    if value != value or value == float("inf"):
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.1f} µs"
    if value < 1:
        return f"{value * 1e3:.2f} ms"
    return f"{value:.2f} s"


__all__ = ["UNIT_SECONDS", "format_duration", "format_seconds", "parse_duration"]
