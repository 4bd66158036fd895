"""The C heap's free pages go back to the operating system after a load's front half."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np
import pytest

from polytf.compiler.native_heap import return_free_heap_memory

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def _resident_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_it_says_whether_the_c_library_can():
    assert return_free_heap_memory() is GLIBC


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_freed_heap_blocks_leave_the_resident_set():
    # Freeing one 4 MB block raises glibc's mmap threshold above 4 MB: the 2 MB blocks after it
    # come from the heap, whose free pages stay resident until trimmed.
    first = np.ones(1 << 20, np.float32)  # 4 MB, mapped
    del first  # unmapped: the threshold rises
    blocks = [np.ones(1 << 19, np.float32) for _ in range(40)]  # 80 MB of 2 MB blocks
    keep = blocks[-1]
    del blocks
    before = _resident_mb()
    assert return_free_heap_memory()
    after = _resident_mb()
    assert keep.sum() == 1 << 19
    assert after < before - 40, (before, after)
