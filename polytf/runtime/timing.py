"""Wall-clock latency of repeated calls, shared by the runtime, the TensorFlow runner and
``polytf bench``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def call_latencies(call: Callable[[], Any], repeats: int, warmup: int = 0) -> list[float]:
    """Seconds taken by each of ``repeats`` calls of ``call()``, after ``warmup`` untimed calls
    (``time.perf_counter``)."""
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples
