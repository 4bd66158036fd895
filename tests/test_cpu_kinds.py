"""The tests that schedule, validate and emit kernels pass for every kind of CPU polytf meets,
whichever one this machine is: ``pytest --cpu avx2`` (8 float32 lanes, 16 registers) and
``pytest --cpu avx512`` (16 lanes, 32 registers) over ``tests/unit/schedules`` and
``tests/unit/targets``, each in a pytest of its own (``POLYTF_CPU``: :mod:`polytf.targets.cpu_kinds`).

Code for a kind this CPU cannot run (AVX-512 on an AVX2 machine) is emitted, optimised and
written as object code, never run: those tests skip where they would run it (``tests/conftest.py``)."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from polytf.targets.cpu_kinds import CPU_KINDS

ROOT = Path(__file__).resolve().parent.parent
#: the tests that schedule, validate and emit code (and run it where this CPU can)
EMITTING_TESTS = ("tests/unit/schedules", "tests/unit/targets")


def _pytest() -> list[str]:
    """pytest of this environment (its script, not ``python -m pytest``: the installed polytf, never the cwd's)."""
    script = Path(sys.executable).with_name("pytest")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pytest"]


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the CPU kinds are x86-64 CPUs")
@pytest.mark.parametrize("kind", sorted(CPU_KINDS))
def test_the_emitting_tests_pass_for_every_cpu_kind(kind, tmp_path):
    command = [*_pytest(), "--cpu", kind, *EMITTING_TESTS, "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'run'}"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    header = re.search(r"polytf CPU kind: (\w+) \(LLVM ([\w-]+), (\d+) lanes, (\d+) registers; (.*)\)", output)
    assert header, output[:2000]
    spec = CPU_KINDS[kind]
    assert header.groups()[:4] == (kind, spec.cpu_name, str(spec.vector_lanes), str(spec.vector_registers))
    passed = int(re.search(r"(\d+) passed", output).group(1))
    skipped = re.search(r"(\d+) skipped", output)
    assert passed >= 300, output[-3000:]  # most of them schedule and emit without running anything
    if "kernels run on this CPU" in header.group(5):
        assert not skipped or int(skipped.group(1)) < 10, output[-3000:]
