"""The tuning worker: a separate process that compiles, verifies and times candidates.

Generated code that nobody has verified yet never runs in the tuner's process: a
candidate that crashes (a bad address, an LLVM abort) or hangs takes only this process
down, and the parent (:mod:`polytf.autotune.isolation`) records the failure and starts
a new worker.

Protocol (``multiprocessing`` connection, pickled tuples), parent → worker:

- ``("kernel", scop, inputs, expected, threads, measurement, codegen, constants, target)``:
  the kernel to work on, its seeded inputs and the reference outputs (computed by the
  parent, which holds the numpy reference), the arrays that hold weights, and the name of
  the target: the worker chooses its backend by it, once
  (:func:`~polytf.compiler.backends.select_backend`: ``"cpu"``, or ``"cuda"``: the current
  GPU through CuPy); answered ``("ready",)``, or ``("failure", cause)`` when the target
  cannot be used here (no CuPy or no GPU).
- ``("candidate", recipe_dict, cutoff_s, verify_only, fault)``: compile the recipe, verify
  it, and unless ``verify_only`` time it (the backend's
  :meth:`~polytf.compiler.backends.Backend.kernel_measurer`: the wall clock around each
  call on the CPU, CUDA events around each launch on the GPU); answered
  ``("measurement", Measurement)`` or ``("failure", cause)`` for a recipe that raises
  (illegal, does not compile, or an internal error). On a backend whose device an error
  that is not polytf's own leaves unusable
  (:attr:`~polytf.compiler.backends.Backend.restarts_after_foreign_error`: a CUDA error, an
  illegal address or a launch failure, breaks the CUDA context), the answer is then
  ``("failure", cause, True)`` and the worker exits, so that the next candidate gets a
  fresh process and context.
- ``("exit",)``.

Timing happens here, around the kernel calls only, so neither the
worker's start-up nor the messages are in the timed region. The worker runs as
``python -m polytf.autotune.worker FD`` in a session of its own (Ctrl-C in a terminal
reaches the tuner, which decides), ignores SIGINT, dies with its parent, and its stderr
(fd 2: LLVM's messages) goes to an unlinked temporary file the parent reads when the
worker dies, for an ``LLVM ERROR`` line or the exception that ended it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from pathlib import Path

from polytf.compiler.backends import select_backend
from polytf.errors import PolytfError
from polytf.schedules.recipe import ScheduleRecipe

#: Faults the worker can be told to inject (:data:`polytf.config.TUNING_FAULTS_ENVIRONMENT_VARIABLE`).
FAULTS = ("crash", "hang", "abort")


def inject(fault: str) -> None:
    """Misbehave as a broken candidate would: die of SIGSEGV, hang, or abort after an
    ``LLVM ERROR`` line on stderr."""
    if fault == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif fault == "hang":
        while True:
            time.sleep(3600)
    elif fault == "abort":
        os.write(2, b"LLVM ERROR: injected fault: the candidate aborted inside LLVM\n")
        os.abort()


def internal_error(error: Exception) -> str:
    """``internal error: TypeError: ... (at schedules/builder.py:120 in build)``: the cause of a
    candidate that met a bug in polytf, with the line that raised."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {'/'.join(Path(frames[-1].filename).parts[-2:])}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"internal error: {type(error).__name__}: {error}{where}"


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (best effort elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def serve(connection) -> None:
    """The worker's main loop, on a ``multiprocessing.connection.Connection`` to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    backend = measure = scop = None
    constants: frozenset[str] = frozenset()
    measurement = None
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        kind = message[0]
        if kind == "exit":
            return
        if kind == "kernel":
            _, scop, inputs, expected, threads, measurement, codegen, constants, target_name = message
            try:
                backend = select_backend(target_name, codegen, threads)
                measure = backend.kernel_measurer(scop, inputs, expected)
            except PolytfError as error:  # e.g. no CuPy or no GPU in this process
                connection.send(("failure", f"{type(error).__name__}: {error}"))
                return
            connection.send(("ready",))
            continue
        _, recipe_dict, cutoff_s, verify_only, fault = message
        if fault:
            inject(fault)
        try:
            compiled = backend.target.compile(scop, ScheduleRecipe.from_dict(recipe_dict), constants)
            result = measure(compiled, measurement, cutoff_s, not verify_only)
        except PolytfError as error:  # an illegal recipe, a compile error, a buffer too small
            connection.send(("failure", f"{type(error).__name__}: {error}"))
        except Exception as error:  # a bug in polytf, or a CUDA error: this candidate fails with it, the study goes on
            if backend.restarts_after_foreign_error:  # the device may be broken: a fresh worker takes the next candidate
                connection.send(("failure", internal_error(error), True))
                return
            connection.send(("failure", internal_error(error)))
        else:
            connection.send(("measurement", result))


__all__ = ["serve", "inject", "internal_error", "main", "FAULTS"]


def main(argv: list[str] | None = None) -> int:
    """``python -m polytf.autotune.worker FD``: serve the parent on the socket ``FD``."""
    from multiprocessing.connection import Connection

    arguments = sys.argv[1:] if argv is None else argv
    serve(Connection(int(arguments[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
