"""Runs mutated GraphDefs (:mod:`graphdef_mutations`) through polytf's front half, one
forked child per case, and classifies each outcome.

A case runs ``prepare_model(path)`` (read, shape inference, graph passes, partition,
lowering: what ``polytf show`` does). Outcomes:

- ``ok``: it returned; ``error``: it raised a ``PolytfError`` (what ``polytf`` prints as
  ``error: ...``); ``traceback``: any other exception (a bug);
- ``crash``: the child died of a signal; ``hang``: it ran over the time limit (killed).

The parent imports polytf once and forks a child per case (``os.fork``; ``os.wait4``
gives the child's peak resident memory), so a case costs milliseconds, not an
interpreter start. Command line::

    python tests/fuzz/fuzz_runner.py --cases 300 --seed 0 [--time-limit 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from graphdef_mutations import case  # noqa: E402

#: address-space cap of a case: a runaway allocation fails there instead of swapping
MEMORY_LIMIT_BYTES = 4 << 30


@dataclass
class Outcome:
    seed: int
    description: str
    outcome: str  # ok, error, traceback, crash, hang
    detail: str
    seconds: float
    peak_rss_mb: float


def _child(path: str, write_end: int) -> None:
    """Runs in the forked child; reports ``outcome\\tdetail`` on the pipe and exits."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    from polytf.compiler.preparation import prepare_model
    from polytf.errors import PolytfError

    try:
        prepare_model(path)
        message = "ok\t"
    except PolytfError as error:
        message = f"error\t{str(error)[:300]}"
    except BaseException as error:  # noqa: BLE001 - this is what the fuzzer looks for
        frames = traceback.extract_tb(error.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
        message = f"traceback\t{type(error).__name__}: {str(error)[:200]} at {where}"
    os.write(write_end, message.encode("utf-8", "replace"))
    os._exit(0)


def run_case(seed: int, folder: str, time_limit_s: float) -> Outcome:
    data, description = case(seed)
    path = os.path.join(folder, f"case{seed}.pb")
    with open(path, "wb") as handle:
        handle.write(data)
    read_end, write_end = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            _child(path, write_end)
        finally:
            os._exit(70)
    os.close(write_end)
    status = rusage = None
    while time.monotonic() - started < time_limit_s:
        finished, status, rusage = os.wait4(pid, os.WNOHANG)
        if finished:
            break
        time.sleep(0.002)
    else:
        os.kill(pid, signal.SIGKILL)
        _, status, rusage = os.wait4(pid, 0)
        os.close(read_end)
        return Outcome(seed, description, "hang", f"over {time_limit_s:g} s", time.monotonic() - started, rusage.ru_maxrss / 1024)
    seconds = time.monotonic() - started
    message = os.read(read_end, 4096).decode("utf-8", "replace")
    os.close(read_end)
    peak = rusage.ru_maxrss / 1024
    if os.WIFSIGNALED(status):
        return Outcome(seed, description, "crash", f"signal {os.WTERMSIG(status)}", seconds, peak)
    outcome, _, detail = message.partition("\t")
    return Outcome(seed, description, outcome or "crash", detail or f"exit status {os.WEXITSTATUS(status)}", seconds, peak)


def run(cases: int, seed: int, time_limit_s: float) -> list[Outcome]:
    import polytf.compiler.preparation  # noqa: F401 - imported once, before forking

    with tempfile.TemporaryDirectory() as folder:
        return [run_case(seed + index, folder, time_limit_s) for index in range(cases)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--json", action="store_true", help="print one JSON object per case")
    args = parser.parse_args(argv)
    outcomes = run(args.cases, args.seed, args.time_limit)
    for outcome in outcomes:
        if args.json:
            print(json.dumps(asdict(outcome)))
        elif outcome.outcome not in ("ok", "error"):
            print(f"{outcome.outcome}: case {outcome.seed} ({outcome.description}): {outcome.detail}")
    bad = [o for o in outcomes if o.outcome not in ("ok", "error")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
