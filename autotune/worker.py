"""The tuning worker: a separate process that compiles, verifies and times candidates.

Generated code that nobody has verified yet never runs in the tuner's process: a
candidate that crashes (a bad address, an LLVM abort) or hangs takes only this process
down, and the parent (:mod:`polytf.autotune.isolation`) records the failure and starts
a new worker.

Protocol (``multiprocessing`` connection, pickled tuples), parent → worker:

- ``("kernel", scop, inputs, expected, threads, measurement, codegen, constants, target)``:
  the kernel to work on, its seeded inputs and the reference outputs (computed by the
  parent, which holds the numpy reference), the arrays that hold weights, and the target
  (``"cpu"``, or ``"cuda"``: the current GPU through CuPy); answered ``("ready",)``, or
  ``("failure", cause)`` when the target cannot be used here (no CuPy or no GPU).
- ``("candidate", recipe_dict, cutoff_s, verify_only, fault)``: compile the recipe, verify
  it, and unless ``verify_only`` time it (:meth:`KernelBench.measure` on the CPU,
  :meth:`~polytf.runtime.cuda.kernel_bench.DeviceKernelBench.measure` on the GPU: CUDA
  events around each launch); answered ``("measurement", Measurement)`` or
  ``("failure", cause)`` for a recipe that raises (illegal, does not compile, or an
  internal error). On the GPU, an error that is not polytf's own (a CUDA error: an illegal
  address, a launch failure) leaves the CUDA context unusable: the answer is then
  ``("failure", cause, True)`` and the worker exits, so that the next candidate gets a
  fresh process and context.
- ``("exit",)``.

Timing happens here, around the kernel calls only (:class:`KernelBench`), so neither the
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
    from polytf.errors import PolytfError
    from polytf.schedules.recipe import ScheduleRecipe

    bench = target = None
    constants: frozenset[str] = frozenset()
    threads = 1
    measurement = None
    on_gpu = False
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
                target, bench = _target_and_bench(target_name, scop, inputs, expected, codegen)
            except PolytfError as error:  # e.g. no CuPy or no GPU in this process
                connection.send(("failure", f"{type(error).__name__}: {error}"))
                return
            on_gpu = target.name == "cuda"
            connection.send(("ready",))
            continue
        _, recipe_dict, cutoff_s, verify_only, fault = message
        if fault:
            inject(fault)
        try:
            compiled = target.compile(bench.scop, ScheduleRecipe.from_dict(recipe_dict), constants)
            if on_gpu:
                result = bench.measure(compiled, measurement, cutoff_s, timed=not verify_only)
            else:
                result = bench.measure(compiled, threads, measurement, cutoff_s, timed=not verify_only)
        except PolytfError as error:  # an illegal recipe, a compile error, a buffer too small
            connection.send(("failure", f"{type(error).__name__}: {error}"))
        except Exception as error:  # a bug in polytf, or a CUDA error: this candidate fails with it, the study goes on
            if on_gpu:  # the CUDA context may be broken: a fresh worker takes the next candidate
                connection.send(("failure", internal_error(error), True))
                return
            connection.send(("failure", internal_error(error)))
        else:
            connection.send(("measurement", result))


def _target_and_bench(target_name: str, scop, inputs, expected, codegen):
    """The worker's target and bench for ``target_name``: the CPU with a
    :class:`~polytf.runtime.cpu.kernel_bench.KernelBench`, or the GPU with a
    :class:`~polytf.runtime.cuda.kernel_bench.DeviceKernelBench` on CuPy (on the CPU emulation
    of the device with ``POLYTF_CUDA_EMULATION=1``).

    Raises:
        DependencyMissingError: ``"cuda"`` without CuPy or a GPU.
        PolytfError: an unknown target name.
    """
    from polytf.compiler.target_selection import device_backend, select_target

    target = select_target(target_name, codegen)
    if target.name == "cuda":
        from polytf.runtime.cuda.kernel_bench import DeviceKernelBench

        return target, DeviceKernelBench(scop, inputs, expected, device_backend())
    from polytf.runtime.cpu.kernel_bench import KernelBench

    return target, KernelBench(scop=scop, inputs=inputs, expected=expected)


__all__ = ["serve", "inject", "internal_error", "main", "FAULTS"]


def main(argv: list[str] | None = None) -> int:
    """``python -m polytf.autotune.worker FD``: serve the parent on the socket ``FD``."""
    from multiprocessing.connection import Connection

    arguments = sys.argv[1:] if argv is None else argv
    serve(Connection(int(arguments[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
