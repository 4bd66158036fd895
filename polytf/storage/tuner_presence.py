"""Whether a tuner is running on a cache directory, asked of the operating system.

Each running ``polytf tune`` (:func:`polytf.autotune.model_tuner.tune_model`) holds a shared
``flock`` on the cache's ``locks/tuners.lock`` for as long as it runs; ``polytf cache clear``
asks for an exclusive one without waiting (:func:`no_tuner_running`). The kernel releases a
process's locks when it exits, killed or not, so the answer is about live processes only: a
study left with a "running" trial by a tuner that crashed does not keep ``cache clear`` from
deleting it, and a tuner that is between two trials is never mistaken for a finished one.

While ``cache clear`` holds the exclusive lock, a tuner that starts waits for it (the
milliseconds of deleting records and studies) instead of creating studies being deleted.
Where ``fcntl`` does not exist (Windows) nothing is held and the answer is "unknown" (None):
the caller falls back to the age of the studies' trials.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["no_tuner_running", "tuner_running"]


@contextlib.contextmanager
def tuner_running(lock_file: Path) -> Iterator[None]:
    """Hold the shared lock that says a tuner is running while the block runs (waits while a
    ``cache clear`` holds the exclusive one)."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def no_tuner_running(lock_file: Path) -> Iterator[bool | None]:
    """True (held exclusively while the block runs, so that no tuner starts meanwhile) when no
    live process is tuning on the cache, False when one is, None when the system cannot say."""
    if fcntl is None:  # pragma: no cover - Windows
        yield None
        return
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
