"""Compiling many kernels at once: this process and one worker process per extra CPU.

isl and llvmlite hold the GIL through most of a compilation, so threads would not run two
at once; worker processes do. :func:`compile_objects` puts the jobs in one queue (the
costliest first, as far as the kernel and its recipe tell); this
process compiles from it, and one thread per worker sends the worker a job at a time and
receives its object code, so that a large kernel on one core never waits behind a queue
of small ones on the other. A worker is ``python -m polytf.compiler.compile_workers``
(a fresh interpreter: the user's ``__main__`` is never imported again, unlike
``multiprocessing``'s spawn), speaking length-prefixed pickles over its stdin and stdout::

    parent → worker: the target (triple, CPU name, features, codegen config), then jobs
    worker → parent: per job, its KernelObject, or None when it failed

A job that fails in a worker, or a worker that dies, leaves that job to the caller
(:meth:`polytf.compiler.code_cache.KernelCodeCache.__call__` compiles it again in this
process and reports its error as a build always does). Ctrl-C stops the workers.
"""

from __future__ import annotations

import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from polytf.compiler.kernel_objects import CompileJob, kernel_object
from polytf.config import CodegenConfig
from polytf.errors import PolytfError
from polytf.storage.object_cache import KernelObject
from polytf.targets.cpu import CpuTarget

__all__ = ["compile_objects", "worker_count"]

#: fewer jobs than this are compiled in this process alone (a worker takes ~0.5 s to start)
MIN_JOBS_PER_WORKER = 3
_LENGTH = struct.Struct("<Q")


def worker_count(jobs: int) -> int:
    """Worker processes for ``jobs`` jobs: one per CPU this process may use beyond its own,
    at most one per :data:`MIN_JOBS_PER_WORKER` jobs beyond this process's share."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(0, min(cpus - 1, jobs // MIN_JOBS_PER_WORKER - 1))


def compile_objects(target: CpuTarget, jobs: Sequence[CompileJob]) -> Iterator[tuple[CompileJob, KernelObject | None]]:
    """Compile ``jobs`` for ``target`` in this process and :func:`worker_count` workers; yields
    ``(job, object or None)`` in this thread as each job finishes (None: the job failed, see
    the module docstring), so that the caller keeps each result at once (a Ctrl-C loses only
    the jobs in flight). Closing the generator early, or an exception, stops the workers.
    """
    results: list[KernelObject | None] = [None] * len(jobs)
    pending: queue.Queue[int] = queue.Queue()
    for index in sorted(range(len(jobs)), key=lambda index: _expected_cost(jobs[index]), reverse=True):
        pending.put(index)
    finished: queue.Queue[int] = queue.Queue()
    workers = [_Worker(target) for _ in range(worker_count(len(jobs)))]
    threads = [threading.Thread(target=worker.serve, args=(jobs, pending, results, finished), daemon=True) for worker in workers]
    done = 0
    try:
        for thread in threads:
            thread.start()
        while done < len(jobs):
            try:
                index = pending.get_nowait()
            except queue.Empty:  # the rest is in the workers: wait for one of them
                index = finished.get()
            else:
                job = jobs[index]
                try:
                    results[index] = kernel_object(target.compile(job.scop, job.recipe, job.constant_arrays))
                except PolytfError:
                    results[index] = None  # compiled again by the caller, which reports the error
            done += 1
            yield jobs[index], results[index]
            for index in _finished_meanwhile(finished):
                done += 1
                yield jobs[index], results[index]
        for thread in threads:
            thread.join()
    finally:
        for worker in workers:
            worker.stop()


def _expected_cost(job: CompileJob) -> tuple[bool, int]:
    """What orders the jobs, the costliest first (longest processing time first: the last
    job to finish is then a short one, not a kernel that leaves the other cores idle while it
    compiles alone): an algorithm that rewrites the kernel first (a Winograd kernel of
    ResNet50 compiles in 1.8 s, most kernels in 0.1-0.3 s), then more statements first."""
    return job.recipe.algorithm != "direct", len(job.scop.statements)


def _finished_meanwhile(finished: queue.Queue) -> list[int]:
    """The jobs the workers finished meanwhile (taken from ``finished`` without waiting)."""
    indices = []
    while True:
        try:
            indices.append(finished.get_nowait())
        except queue.Empty:
            return indices


class _Worker:
    """One worker process and the thread-side of its protocol."""

    def __init__(self, target: CpuTarget) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "polytf.compiler.compile_workers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._spec = (target.triple, target.cpu_name, target.features, target.config)

    def serve(self, jobs: Sequence, pending: queue.Queue, results: list, finished: queue.Queue) -> None:
        """Send jobs from ``pending`` until it is empty or the worker fails; a failed job is
        left None in ``results``."""
        try:
            _send(self.process.stdin, self._spec)
        except (OSError, ValueError):  # a worker that did not start, or was stopped
            return
        while True:
            try:
                index = pending.get_nowait()
            except queue.Empty:
                return
            try:
                _send(self.process.stdin, jobs[index])
                results[index] = _receive(self.process.stdout)
            except (OSError, ValueError, EOFError, pickle.UnpicklingError):
                results[index] = None  # a dead or stopped worker: the jobs left in ``pending`` go to this process
                finished.put(index)
                return
            finished.put(index)

    def stop(self) -> None:
        try:
            if self.process.stdin:
                self.process.stdin.close()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


def _send(stream: BinaryIO, value: object) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _receive(stream: BinaryIO) -> object:
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        raise EOFError("the compile worker closed its pipe")
    (length,) = _LENGTH.unpack(header)
    data = stream.read(length)
    if len(data) < length:
        raise EOFError("the compile worker closed its pipe")
    return pickle.loads(data)


def _serve_parent() -> None:
    """The worker's loop: the target, then one job at a time until stdin closes."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but replies on the reply pipe
    try:
        triple, cpu_name, features, config = _receive(requests)
    except EOFError:
        return
    target = CpuTarget(config if isinstance(config, CodegenConfig) else None, cpu_name=cpu_name, features=features, triple=triple)
    while True:
        try:
            job = _receive(requests)
        except EOFError:
            return
        try:
            reply = kernel_object(target.compile(job.scop, job.recipe, job.constant_arrays))
        except Exception:  # noqa: BLE001 - the parent compiles the job again itself and reports the error
            reply = None
        _send(replies, reply)


if __name__ == "__main__":  # pragma: no cover - runs in the worker processes
    try:
        _serve_parent()
    except (KeyboardInterrupt, BrokenPipeError):
        pass
