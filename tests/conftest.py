"""Session-wide fixtures: zoo models frozen once per test session.

``frozen_model(name, batch=1)`` returns the path of a binary frozen GraphDef written by
:func:`polytf.model_zoo.write_model` (placeholder ``"input"``, output node ``"Identity"``),
building each (name, batch) at most once per session; tests using it are skipped when
TensorFlow is not installed.

``session_cache_dir`` (automatic) points ``POLYTF_CACHE_DIR`` at a folder of the session.

``interruptible_session`` (automatic) gives the session Python's own Ctrl-C handler when it
started with SIGINT ignored (a job started in the background of a non-interactive shell
inherits SIG_IGN, and so would every process it starts): the Ctrl-C tests send SIGINT.

``pytest --cpu avx2`` (or ``avx512``) runs the session for that kind of CPU instead of this one
(``POLYTF_CPU``, :mod:`polytf.targets.cpu_kinds`): every default CpuTarget, in this process and in
the processes it starts, schedules, validates and emits for that kind's vector lanes and registers.
Where this CPU cannot run that kind's code (AVX-512 on an AVX2 machine), a test that would run a
kernel is skipped at the point it would link it (``kernels_of_a_forced_cpu_are_not_run``), after
everything before it (scheduling, validation, LLVM IR, object code) was checked.

``postgresql_server`` starts a PostgreSQL server for the session and ``postgresql_url`` gives
each test a new database on it (skipped without the binaries or the driver, except under
``POLYTF_REQUIRE_SYSTEM_TOOLS=1``: :mod:`system_tools`).
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

CPU_OPTION = "--cpu"


def pytest_addoption(parser: pytest.Parser) -> None:
    from polytf.targets.cpu_kinds import CPU_KINDS, HOST

    parser.addoption(
        CPU_OPTION,
        choices=[HOST, *CPU_KINDS],
        default=None,
        help="generate kernels for this kind of CPU instead of this one (POLYTF_CPU): avx2 = 8 float32 lanes and 16 "
        "registers, avx512 = 16 lanes and 32 registers; kernels this CPU cannot run are emitted and checked, "
        "and the tests that would run them are skipped",
    )


def pytest_configure(config: pytest.Config) -> None:
    from polytf.config import CPU_ENVIRONMENT_VARIABLE

    kind = config.getoption(CPU_OPTION)
    if kind is not None:  # before any test module makes its CpuTarget; inherited by worker processes
        os.environ[CPU_ENVIRONMENT_VARIABLE] = kind


def _forced_cpu():
    """(the CPU kind the session generates code for, the features this CPU lacks to run it),
    or None when the session generates code for this CPU."""
    from polytf.targets.cpu import CpuTarget
    from polytf.targets.cpu_kinds import cpu_kind_from_environment

    kind = cpu_kind_from_environment()
    return None if kind is None else (kind, CpuTarget().missing_features)


def pytest_report_header(config: pytest.Config) -> str | None:
    forced = _forced_cpu()
    if forced is None:
        return None
    kind, missing = forced
    runs = f"this CPU lacks {', '.join(missing)}: kernels are emitted, not run" if missing else "kernels run on this CPU"
    return f"polytf CPU kind: {kind.name} (LLVM {kind.cpu_name}, {kind.vector_lanes} lanes, {kind.vector_registers} registers; {runs})"


@pytest.fixture(scope="session", autouse=True)
def kernels_of_a_forced_cpu_are_not_run():
    """Under ``--cpu KIND`` where this CPU cannot run KIND's code, a test is skipped where it
    would link such a kernel to run it (after scheduling, validation, LLVM IR, optimisation and
    object code were made and checked): the target's run-here check skips instead of raising
    ForeignCpuError. A skip is no ``Exception``, so neither a ``pytest.raises``, a handler in
    polytf nor hypothesis's shrinking takes it for a failure."""
    forced = _forced_cpu()
    if forced is None or not forced[1]:
        yield
        return
    from polytf.targets.cpu import CpuTarget

    kind, missing = forced
    require_runs_here = CpuTarget._require_runs_here

    def skip_instead(target: CpuTarget, what: str) -> None:
        if (target.cpu_name, target.features) == (kind.cpu_name, kind.features):
            pytest.skip(f"{what}: code for CPU kind {kind.name} is emitted and checked, not run (this CPU lacks {', '.join(missing)})")
        require_runs_here(target, what)

    CpuTarget._require_runs_here = skip_instead
    yield
    CpuTarget._require_runs_here = require_runs_here


@pytest.fixture(scope="session", autouse=True)
def interruptible_session():
    """SIGINT raises KeyboardInterrupt in this process, and has its default action in the
    processes it starts (an exec keeps an ignored signal ignored, resets a handled one), as
    in a terminal, even when the session was started with SIGINT ignored."""
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session", autouse=True)
def session_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """Every test that does not name a cache directory uses one of this session's, never the
    user's: loads keep compiled kernels there, and a warm user cache would let a test skip
    the compilation it means to check."""
    previous = os.environ.get("POLYTF_CACHE_DIR")
    os.environ["POLYTF_CACHE_DIR"] = str(tmp_path_factory.mktemp("polytf_cache"))
    yield Path(os.environ["POLYTF_CACHE_DIR"])
    if previous is None:
        os.environ.pop("POLYTF_CACHE_DIR", None)
    else:
        os.environ["POLYTF_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder shared by the whole session for frozen zoo models."""
    return tmp_path_factory.mktemp("zoo_models")


@pytest.fixture(scope="session")
def frozen_model(model_dir: Path) -> Callable[..., Path]:
    """Factory ``frozen_model(name, batch=1) -> Path`` writing zoo models once per session."""
    written: dict[tuple[str, int | None], Path] = {}

    def make(name: str, batch: int | None = 1) -> Path:
        pytest.importorskip("tensorflow")
        key = (name, batch)
        if key not in written:
            from polytf.model_zoo import write_model

            path = model_dir / f"{name}_b{batch}.pb"
            written[key] = write_model(name, path, batch=batch)
        return written[key]

    return make


@pytest.fixture(scope="session")
def postgresql_server():
    """A PostgreSQL server for the whole session, started from the installed binaries on a
    free port of 127.0.0.1 (:mod:`postgresql_server`) and stopped at its end.

    Without the server binaries (Debian's ``postgresql`` package) or the driver (``psycopg``),
    the tests using it are skipped, or fail under ``POLYTF_REQUIRE_SYSTEM_TOOLS=1`` (CI)."""
    from postgresql_server import PostgresqlUnavailable, start_server
    from system_tools import missing, require_module

    require_module("psycopg", "the PostgreSQL driver of the tuning storage: pip install 'polytf[postgresql]'")
    try:
        server = start_server()
    except PostgresqlUnavailable as error:
        missing("a PostgreSQL server", f"{error}; install Debian's postgresql package")
    yield server
    server.stop()


_database_numbers = itertools.count()


@pytest.fixture
def postgresql_url(postgresql_server) -> str:
    """The URL of a new, empty database on the session's PostgreSQL server (one per test)."""
    return postgresql_server.create_database(f"test_{os.getpid()}_{next(_database_numbers)}")
