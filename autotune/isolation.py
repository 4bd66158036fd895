"""CandidateEvaluator: compile, verify and time tuning candidates in a worker process.

The parent (the tuner, ``polytf cache verify``) keeps what is trusted: the kernel's Scop,
its numpy reference and the seeded inputs, computed once. A persistent worker process
(:mod:`polytf.autotune.worker`, a fresh interpreter: it inherits no LLVM, OpenMP or BLAS
threads, and never re-runs the caller's script) receives them once per kernel and then one recipe per
candidate; it runs the candidate's generated code and answers with a
:class:`~polytf.runtime.cpu.kernel_bench.Measurement`. Each candidate has a wall-clock limit.
When the worker dies (a signal, an LLVM abort) or runs over the limit (it is killed),
the candidate fails with the cause, e.g. ``signal 11 (SIGSEGV)``, ``LLVM abort: LLVM
ERROR: ...`` or ``timed out after 10 s``, and the next candidate gets a new worker.

Timing stays as precise as in-process timing: the worker times the kernel calls
themselves after warm-up; the parent waits in ``select`` (no spinning) while it does,
and start-up and messages happen outside the timed region.

Starting a worker (a Python interpreter importing polytf) takes about half a second, as
long as compiling and timing a few candidates; under a time budget the tuner moves between
kernels in slices and would start one for each. So a worker that ends healthy is not
stopped but kept idle (:class:`_IdleWorkers`, at most :data:`IDLE_WORKERS`, blocked in a read:
no CPU), and the next evaluator of any kernel takes it and sends it its kernel; a worker
that crashed, hung or was interrupted is never kept. Idle workers started under another
environment (``POLYTF_*`` settings a test changes) are not reused, and all of them exit
with this process.
"""

from __future__ import annotations

import atexit
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection

from polytf.compiler.kernel_compilation import constant_arrays
from polytf.config import CodegenConfig, MeasurementConfig, TuningConfig
from polytf.errors import TuningError
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.runtime.cpu.kernel_bench import Measurement, reference_data
from polytf.schedules.recipe import ScheduleRecipe


def describe_exit(exitcode: int | None, stderr_text: str) -> str:
    """Why a worker died: ``LLVM abort: <its LLVM ERROR line>``, ``signal 11 (SIGSEGV)``
    (``signal 6 (SIGABRT): <the last line it wrote to stderr>``, e.g. ``free(): invalid
    pointer``) or ``worker exited with status N`` (with the last line it wrote to stderr, e.g.
    the exception that ended it)."""
    lines = [line.strip() for line in stderr_text.splitlines() if line.strip()]
    llvm_lines = [line for line in lines if "LLVM ERROR" in line]
    if llvm_lines:
        return f"LLVM abort: {llvm_lines[-1]}"
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        # abort() follows the message of whatever called it (glibc's heap checks, C++'s
        # terminate): the line that says why
        said = f": {lines[-1][:300]}" if lines and -exitcode == signal.SIGABRT else ""
        return f"signal {-exitcode} ({name}){said}"
    last = f": {lines[-1][:300]}" if lines else ""
    return f"worker exited with status {exitcode}{last}"


def tuning_faults(text: str | None = None) -> dict[int, str]:
    """Trial number -> fault to inject, from ``$POLYTF_TUNING_FAULTS`` (or ``text``), e.g.
    ``"crash:3,hang:5,abort:7"``: for testing that a crashing, hanging or aborting
    candidate costs one failed trial and nothing else.

    Raises:
        TuningError: a malformed entry or an unknown fault.
    """
    from polytf.autotune.worker import FAULTS
    from polytf.config import TUNING_FAULTS_ENVIRONMENT_VARIABLE

    text = os.environ.get(TUNING_FAULTS_ENVIRONMENT_VARIABLE, "") if text is None else text
    faults = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        fault, _, number = entry.partition(":")
        if fault not in FAULTS or not number.isdigit():
            raise TuningError(f"{TUNING_FAULTS_ENVIRONMENT_VARIABLE}: {entry!r} is not FAULT:TRIAL with FAULT one of {', '.join(FAULTS)}")
        faults[int(number)] = fault
    return faults


#: healthy workers kept idle for the next evaluator (one per tuner running at a time is enough)
IDLE_WORKERS = 2


@dataclass
class _Worker:
    """A running worker process: the process, the parent's end of its socket, its stderr
    (an unlinked temporary file) and the environment it was started under."""

    process: subprocess.Popen
    connection: Connection
    stderr_fd: int
    environment: frozenset

    def stop(self) -> None:
        """Ask it to exit (kill it if it does not), and close its socket and stderr."""
        try:
            if self.process.poll() is None:
                self.connection.send(("exit",))
                self.process.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.connection.close()
        os.close(self.stderr_fd)


class _IdleWorkers:
    """Healthy workers between evaluators (module docstring)."""

    def __init__(self) -> None:
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        atexit.register(self.stop_all)

    def take(self) -> _Worker | None:
        """An idle worker started under this environment, or None."""
        environment = _environment()
        with self._lock:
            for index, worker in enumerate(self._workers):
                if worker.environment == environment and worker.process.poll() is None:
                    return self._workers.pop(index)
        return None

    def keep(self, worker: _Worker) -> None:
        """Keep ``worker`` idle (a healthy one, between candidates), or stop it when enough are."""
        with self._lock:
            dead = [w for w in self._workers if w.process.poll() is not None]
            self._workers = [w for w in self._workers if w not in dead]
            kept = len(self._workers) < IDLE_WORKERS and worker.process.poll() is None
            if kept:
                self._workers.append(worker)
        for unused in dead + ([] if kept else [worker]):
            unused.stop()

    def stop_all(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop()


def _environment() -> frozenset:
    return frozenset(os.environ.items())


_IDLE = _IdleWorkers()


class CandidateEvaluator:
    """Evaluates recipes of one kernel in a persistent worker process.

    Args:
        kernel: the lowered kernel (its reference runs here, in the parent).
        threads: threads each candidate runs on.
        measurement: verification tolerances and timing repetitions.
        seed: seed of the random inputs.
        time_limit_s: wall-clock limit of one candidate (compile, verify, time).
        codegen: LLVM settings of the worker's target.
        start_timeout_s: how long a new worker may take to start (not part of a
            candidate's limit).
        target_name: the name of the target the worker compiles and measures for; the
            worker chooses that backend (:func:`~polytf.compiler.backends.select_backend`):
            ``"cpu"`` (wall clock around each call) or ``"cuda"`` (the current GPU; CUDA
            events around each launch).

    Use as a context manager (the worker is stopped on exit).
    """

    def __init__(
        self,
        kernel: LoweredKernel,
        threads: int,
        *,
        measurement: MeasurementConfig | None = None,
        seed: int = 0,
        time_limit_s: float = TuningConfig.candidate_time_limit_s,
        codegen: CodegenConfig | None = None,
        start_timeout_s: float = TuningConfig.worker_start_timeout_s,
        target_name: str = "cpu",
    ) -> None:
        self.kernel = kernel
        self.target_name = target_name
        self.threads = int(threads)
        self.measurement = measurement or MeasurementConfig()
        self.time_limit_s = float(time_limit_s)
        self.start_timeout_s = float(start_timeout_s)
        self.codegen = codegen or CodegenConfig()
        self.inputs, self.expected = reference_data(kernel, seed)
        self._process = None
        self._connection = None
        self._stderr_fd: int | None = None  # the worker's stderr: an unlinked temporary file
        self._environment: frozenset = frozenset()
        self._busy = False
        #: workers started (or taken idle) so far: the first, and one after each crash or timeout
        self.workers_started = 0
        #: why the idle worker this evaluator took could not take its kernel (None: it could,
        #: or none was idle): a new worker replaced it
        self.idle_worker_failure: str | None = None

    # -- the worker -------------------------------------------------------------------------
    def _start(self) -> None:
        """A worker for this kernel: an idle one (:class:`_IdleWorkers`), else a new one. An
        idle worker that dies or fails when given the kernel is replaced by a new worker: only a
        new worker's failure is the kernel's error (an idle worker that had served earlier
        kernels' trials once aborted there, and took a DenseNet121 tuning down with it).

        Raises:
            TuningError: a new worker did not start, or cannot use the target here.
        """
        idle = _IDLE.take()
        if idle is not None:
            self._process, self._connection, self._stderr_fd, self._environment = idle.process, idle.connection, idle.stderr_fd, idle.environment
            self.workers_started += 1
            self.idle_worker_failure = self._give_kernel()
            if self.idle_worker_failure is None:
                return
            self._stop()
        self._launch()
        self.workers_started += 1
        reply = self._give_kernel()
        if reply is not None:
            self._stop()
            raise TuningError(f"kernel {self.kernel.scop.name}: the tuning worker process did not start: {reply}")

    def _give_kernel(self) -> str | None:
        """Send the kernel to the worker: None once it is ready, else why not (it died, ran
        over the start time-out, or cannot use the target)."""
        try:
            constants = constant_arrays(self.kernel)  # their packing runs ahead of time, as in a model
            self._connection.send(
                ("kernel", self.kernel.scop, self.inputs, self.expected, self.threads, self.measurement, self.codegen, constants, self.target_name)
            )
        except OSError:  # it died at once (BrokenPipeError, ConnectionResetError)
            reply = describe_exit(self._wait(), self._stderr_tail())
        else:
            reply = self._receive(self.start_timeout_s)
        if isinstance(reply, tuple) and reply[0] == "failure":  # the worker cannot use the target here
            reply = reply[1]
        return reply if isinstance(reply, str) else None

    def _launch(self) -> None:
        """Start a new worker process."""
        self._environment = _environment()
        handle, path = tempfile.mkstemp(prefix="polytf-worker-", suffix=".stderr")
        os.unlink(path)  # nothing is left behind, however this process ends
        self._stderr_fd = handle
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "polytf.autotune.worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=handle,
                start_new_session=True,
            )
        except OSError as error:
            ours.close()
            os.close(handle)
            self._stderr_fd = None
            raise TuningError(f"kernel {self.kernel.scop.name}: cannot start a tuning worker process: {error}") from None
        finally:
            theirs.close()
        self._process, self._connection = process, Connection(ours.detach())

    def _receive(self, limit_s: float):
        """The worker's next message, or a failure cause (it died or ran over ``limit_s``)."""
        try:
            if self._connection.poll(limit_s):
                return self._connection.recv()
        except (EOFError, OSError):
            pass
        else:
            if self._process.poll() is None:
                self._stop()
                return f"timed out after {limit_s:g} s"
        return describe_exit(self._wait(), self._stderr_tail())

    def _wait(self) -> int | None:
        try:
            return self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            return self._process.wait()

    def _stderr_tail(self) -> str:
        try:
            size = os.fstat(self._stderr_fd).st_size
            return os.pread(self._stderr_fd, 4000, max(0, size - 4000)).decode("utf-8", "replace")
        except (OSError, TypeError):
            return ""

    def _stop(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
        if self._connection is not None:
            self._connection.close()
        if self._stderr_fd is not None:
            os.close(self._stderr_fd)
        self._process = self._connection = self._stderr_fd = None
        self._busy = False

    def _alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- candidates -------------------------------------------------------------------------
    def _run(self, recipe: ScheduleRecipe, cutoff_s: float, verify_only: bool, fault: str | None):
        if not self._alive():
            self._stop()
            self._start()
        self._busy = True  # until the reply: an interrupted candidate leaves the worker busy
        try:
            self._connection.send(("candidate", recipe.to_dict(), cutoff_s, verify_only, fault))
        except (BrokenPipeError, OSError):
            reply = describe_exit(self._wait(), self._stderr_tail())
        else:
            reply = self._receive(self.time_limit_s)
        self._busy = False
        if isinstance(reply, str):  # the worker died or was killed: the next candidate gets a new one
            self._stop()
        elif reply[0] == "failure" and len(reply) > 2 and reply[2]:  # it exits (a broken CUDA context): likewise
            self._wait()
            self._stop()
        return reply

    def evaluate(self, recipe: ScheduleRecipe, cutoff_s: float = math.inf, fault: str | None = None) -> Measurement | str:
        """Compile, verify and time ``recipe`` in the worker.

        Args:
            cutoff_s: a candidate whose warm-up call takes longer is timed with that call only.
            fault: inject a fault (``"crash"``, ``"hang"``, ``"abort"``) instead (tests).

        Returns:
            The Measurement of a verified candidate, else the cause of its failure.

        Raises:
            TuningError: a new worker could not be started.
        """
        reply = self._run(recipe, cutoff_s, False, fault)
        if isinstance(reply, str):
            return reply
        if reply[0] == "failure":
            return reply[1]
        measurement = reply[1]
        return measurement if measurement.error is None else f"verification failed: {measurement.error}"

    def verify(self, recipe: ScheduleRecipe) -> tuple[str | None, float]:
        """Compile ``recipe`` and check it against the reference (no timing).

        Returns:
            ``(failure cause or None, max absolute error)``.

        Raises:
            TuningError: a new worker could not be started.
        """
        reply = self._run(recipe, math.inf, True, None)
        if isinstance(reply, str):
            return reply, math.inf
        if reply[0] == "failure":
            return reply[1], math.inf
        measurement = reply[1]
        return (None if measurement.error is None else f"verification failed: {measurement.error}"), measurement.max_error

    def close(self) -> None:
        """Let the worker go: a healthy one is kept idle for the next evaluator (module
        docstring); one still running a candidate (the caller was interrupted while waiting)
        is killed."""
        if self._alive() and not self._busy:
            _IDLE.keep(_Worker(self._process, self._connection, self._stderr_fd, self._environment))
            self._process = self._connection = self._stderr_fd = None
            return
        self._stop()

    def __enter__(self) -> CandidateEvaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["CandidateEvaluator", "describe_exit", "tuning_faults"]
