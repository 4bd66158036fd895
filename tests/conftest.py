"""Session-wide fixtures: zoo models frozen once per test session.

``frozen_model(name, batch=1)`` returns the path of a binary frozen GraphDef written by
:func:`polytf.model_zoo.write_model` (placeholder ``"input"``, output node ``"Identity"``),
building each (name, batch) at most once per session; tests using it are skipped when
TensorFlow is not installed.

``session_cache_dir`` (automatic) points ``POLYTF_CACHE_DIR`` at a folder of the session.

``interruptible_session`` (automatic) gives the session Python's own Ctrl-C handler when it
started with SIGINT ignored (a job started in the background of a non-interactive shell
inherits SIG_IGN, and so would every process it starts): the Ctrl-C tests send SIGINT.

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
