"""A throwaway PostgreSQL server for tests and benchmarks, started from the installed binaries.

Debian's ``postgresql`` package installs ``initdb``, ``pg_ctl`` and ``postgres`` under
``/usr/lib/postgresql/<version>/bin`` (not on ``PATH``). :func:`start_server` creates a
cluster in a fresh temporary directory (trust authentication, no fsync: test data only),
starts it listening on a free TCP port of 127.0.0.1 only, and returns a
:class:`PostgresqlServer` whose :meth:`~PostgresqlServer.stop` shuts it down and deletes the
directory. ``initdb`` refuses to run as root: under root, the cluster belongs to the
``postgres`` system user (Debian's package creates it) and the binaries run as that user
through ``runuser``.

Used by the ``postgresql_server`` fixture (``tests/conftest.py``) and by
``results/shared_tuning.py``; needs no pytest.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: Where Debian's packages put the server binaries (one directory per major version).
BINARY_DIRECTORIES = ("/usr/lib/postgresql/*/bin",)
#: The programs a server needs.
PROGRAMS = ("initdb", "pg_ctl", "postgres")
#: The superuser of a test cluster (also the system user that owns it when running as root).
SUPERUSER = "postgres"
START_TIMEOUT_S = 60


class PostgresqlUnavailable(RuntimeError):
    """The binaries (or, under root, the ``postgres`` user or ``runuser``) are missing."""


def find_binaries() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres`` (``pg_config --bindir``,
    else the newest ``/usr/lib/postgresql/*/bin``, else ``PATH``), or None."""
    import glob

    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            candidates.append(subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True).stdout.strip())
    for pattern in BINARY_DIRECTORIES:
        candidates += sorted(glob.glob(pattern), key=_version_key, reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).resolve().parent))
    for directory in candidates:
        if directory and all((Path(directory) / program).is_file() for program in PROGRAMS):
            return Path(directory)
    return None


def _version_key(directory: str) -> tuple:
    version = Path(directory).parent.name
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on (at the moment of asking)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class PostgresqlServer:
    """A running test server.

    Attributes:
        directory: its temporary directory (cluster in ``data/``, socket, log ``server.log``).
        port: its TCP port on 127.0.0.1.
        binaries: the directory of ``pg_ctl``.
        run_as: the system user the server runs as (None: this process's user).
    """

    directory: Path
    port: int
    binaries: Path
    run_as: str | None = None

    def url(self, database: str = "postgres") -> str:
        """``postgresql://postgres@127.0.0.1:PORT/DATABASE`` (trust authentication: no password)."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create the empty database ``name`` (letters, digits, ``_``) and return its URL."""
        import sqlalchemy

        if not name.replace("_", "").isalnum():
            raise ValueError(f"unsafe database name {name!r}")
        engine = sqlalchemy.create_engine(self.url().replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        finally:
            engine.dispose()
        return self.url(name)

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are ended) and delete its directory."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _run(self.run_as, [self.binaries / "pg_ctl", "-D", self.directory / "data", "-m", "fast", "-w", "-t", "60", "stop"], timeout=90)
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PostgresqlServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_server(attempts: int = 3) -> PostgresqlServer:
    """Create and start a server on a free port of 127.0.0.1 (retried on another port if
    the one chosen was taken meanwhile).

    Raises:
        PostgresqlUnavailable: the binaries (or the ``postgres`` user, under root) are missing.
        RuntimeError: ``initdb`` or ``pg_ctl start`` failed (with the end of their output).
    """
    binaries = find_binaries()
    if binaries is None:
        raise PostgresqlUnavailable(f"no PostgreSQL server binaries ({', '.join(PROGRAMS)}) in {', '.join(BINARY_DIRECTORIES)} or on PATH")
    run_as = None
    if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to the postgres user
        try:
            pwd.getpwnam(SUPERUSER)
        except KeyError:
            raise PostgresqlUnavailable(f"running as root and there is no {SUPERUSER!r} system user to run the server as") from None
        if shutil.which("runuser") is None:
            raise PostgresqlUnavailable("running as root and 'runuser' (util-linux) is missing")
        run_as = SUPERUSER
    directory = Path(tempfile.mkdtemp(prefix="polytf-postgresql-"))
    try:
        if run_as is not None:
            user = pwd.getpwnam(run_as)
            os.chown(directory, user.pw_uid, user.pw_gid)
        data = directory / "data"
        _run(run_as, [binaries / "initdb", "-D", data, "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"], timeout=120)
        error = ""
        for _ in range(attempts):
            port = free_port()
            options = f"-p {port} -c listen_addresses=127.0.0.1 -k {directory} -F -c max_connections=200"
            try:
                _run(run_as, [binaries / "pg_ctl", "-D", data, "-l", directory / "server.log", "-o", options, "-w", "-t", str(START_TIMEOUT_S), "start"], timeout=START_TIMEOUT_S + 30)
                return PostgresqlServer(directory, port, binaries, run_as)
            except RuntimeError as failure:
                error = str(failure)
        raise RuntimeError(error)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def _run(run_as: str | None, command: list, timeout: float) -> str:
    """Run ``command`` (as the user ``run_as``, through ``runuser``); its output, or RuntimeError with its end."""
    command = [str(part) for part in command]
    if run_as is not None:
        command = ["runuser", "-u", run_as, "--", *command]
    environment = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, cwd="/")
    if result.returncode != 0:
        log = ""
        with contextlib.suppress(OSError):
            for part in command:
                if part.endswith("server.log"):
                    log = Path(part).read_text()[-2000:]
        output = (result.stdout + result.stderr)[-2000:]
        raise RuntimeError(f"{' '.join(command)} failed with status {result.returncode} after {time.monotonic() - started:.1f} s:\n{output}{log}")
    return result.stdout


__all__ = ["PostgresqlServer", "PostgresqlUnavailable", "find_binaries", "free_port", "start_server"]
