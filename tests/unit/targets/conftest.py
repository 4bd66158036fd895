"""The target tests share the schedule tests' round trip (recipe -> validation -> schedule
-> AST -> LLVM -> run against the numpy reference): :mod:`roundtrip` in
``tests/unit/schedules``."""

from __future__ import annotations

import sys
from pathlib import Path

_SCHEDULE_TESTS = str(Path(__file__).resolve().parent.parent / "schedules")
if _SCHEDULE_TESTS not in sys.path:
    sys.path.append(_SCHEDULE_TESTS)
