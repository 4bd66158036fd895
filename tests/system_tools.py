"""Tests that need a tool from outside Python (a PostgreSQL server, an emulator, a C
compiler): skip cleanly where it is missing, fail where it must be there.

Outside CI a developer may lack a system package, and the tests that need it are skipped
with a reason naming what is missing and what it is for. CI sets
``POLYTF_REQUIRE_SYSTEM_TOOLS=1``: there a missing tool fails the test instead, so that a
broken install step can never hide behind a green run of skipped tests.

Usage::

    from system_tools import require_tool, require_module

    initdb = require_tool("initdb", "starts the PostgreSQL server of the storage tests",
                          search=["/usr/lib/postgresql/*/bin"])
    require_tool("qemu-aarch64", "runs the AArch64 executables of the cross-compilation tests")
    psycopg = require_module("psycopg", "the PostgreSQL driver (pip install 'polytf[postgresql]')")
"""

from __future__ import annotations

import glob
import importlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

#: Set to ``1`` (CI does) to make a missing tool fail the tests that need it instead of skipping them.
REQUIRE_ENVIRONMENT_VARIABLE = "POLYTF_REQUIRE_SYSTEM_TOOLS"


def tools_required() -> bool:
    """Whether missing tools fail tests (``POLYTF_REQUIRE_SYSTEM_TOOLS=1``) rather than skip them."""
    return os.environ.get(REQUIRE_ENVIRONMENT_VARIABLE, "") == "1"


def missing(what: str, why: str) -> NoReturn:
    """Skip the calling test (or fixture) because ``what`` is missing, or fail it under
    ``POLYTF_REQUIRE_SYSTEM_TOOLS=1``; the message says what is missing and what it is for."""
    message = f"{what} is missing ({why})"
    if tools_required():
        pytest.fail(f"{message}; {REQUIRE_ENVIRONMENT_VARIABLE}=1 requires it", pytrace=False)
    pytest.skip(message)


def find_tool(name: str, search: Iterable[str] = ()) -> Path | None:
    """The executable ``name`` on ``PATH``, else in the first directory of ``search``
    (glob patterns, highest version first: ``/usr/lib/postgresql/*/bin``) that has it."""
    found = shutil.which(name)
    if found:
        return Path(found)
    for pattern in search:
        for directory in sorted(glob.glob(pattern), reverse=True):
            candidate = Path(directory) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    return None


def require_tool(name: str, why: str, search: Iterable[str] = ()) -> Path:
    """The path of the executable ``name`` (see :func:`find_tool`); if it is missing, the
    test is skipped, or failed under ``POLYTF_REQUIRE_SYSTEM_TOOLS=1`` (:func:`missing`).

    Args:
        name: the executable, e.g. ``"initdb"``, ``"qemu-aarch64"``, ``"cc"``.
        why: what the tests use it for, shown in the skip or failure message.
        search: directories (glob patterns) to look in when it is not on ``PATH``.
    """
    path = find_tool(name, search)
    if path is None:
        missing(f"the program {name!r}", why)
    return path


def require_module(name: str, why: str) -> ModuleType:
    """The Python module ``name``, imported; if it cannot be imported, the test is skipped,
    or failed under ``POLYTF_REQUIRE_SYSTEM_TOOLS=1``."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        missing(f"the Python module {name!r} ({error})", why)


__all__ = ["REQUIRE_ENVIRONMENT_VARIABLE", "find_tool", "missing", "require_module", "require_tool", "tools_required"]
