"""ContextPool: one execution context per call in flight, reused afterwards.

Shared by the CPU runtime (:class:`~polytf.runtime.cpu.execution_context.CpuExecutionContext`)
and the CUDA runtime (:class:`~polytf.runtime.cuda.execution_context.CudaExecutionContext`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol


class PooledContext(Protocol):
    """What the pool needs of a context: forgetting the caller's arrays when it goes back."""

    def unbind(self) -> None: ...


class ContextPool:
    """Execution contexts for concurrent calls: one per call in flight, reused afterwards.

    Args:
        factory: makes a new context (called when every pooled context is in use).
    """

    def __init__(self, factory) -> None:
        self._factory = factory
        self._idle: list[PooledContext] = []
        self._lock = threading.Lock()
        self._size = 0

    @property
    def size(self) -> int:
        """Contexts in the pool, idle or in use."""
        return self._size

    def release(self, context: PooledContext) -> None:
        """Add an idle context (a new one, or one returned by :meth:`acquire`)."""
        context.unbind()
        with self._lock:
            if not any(idle is context for idle in self._idle):
                self._idle.append(context)

    def take(self) -> PooledContext:
        """A context no other call uses until it is given back with :meth:`release`."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        context = self._factory()
        with self._lock:
            self._size += 1
        return context

    @contextlib.contextmanager
    def acquire(self) -> Iterator[PooledContext]:
        """:meth:`take` a context, :meth:`release` it on exit."""
        context = self.take()
        try:
            yield context
        finally:
            self.release(context)


__all__ = ["ContextPool", "PooledContext"]
