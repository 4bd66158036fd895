"""Guard zones around the tuning bench's arrays catch writes just outside them."""

from __future__ import annotations

import ctypes

import numpy as np

from polytf.runtime.cpu.guard_zones import GUARD_BYTES, GuardedArrays


def test_arrays_are_aligned_and_hold_their_values():
    guards = GuardedArrays()
    value = np.arange(15, dtype=np.float32).reshape(3, 5)
    copied = guards.copy("A0", value, "float32")
    zeros = guards.zeros("S0", (7,), "int64")
    assert copied.ctypes.data % 64 == 0 and zeros.ctypes.data % 64 == 0
    np.testing.assert_array_equal(copied, value)
    assert zeros.dtype == np.int64 and not zeros.any()
    assert not guards.allocate("S1", (5,), "float32", zeroed=True).any()  # as ArgumentTable.allocate_unbound asks
    copied[...] = -1  # writing inside is no violation
    assert guards.violation() is None


def test_writes_past_the_end_or_before_the_start_are_named_once():
    guards = GuardedArrays()
    first = guards.empty("A0", (4,), "float32")
    second = guards.empty("A1", (10,), "float32")
    ctypes.memset(second.ctypes.data + second.nbytes, 0, 64)  # one vector past the end
    assert guards.violation() == "wrote outside array A1: 64 bytes changed up to 64 bytes past its end"
    assert guards.violation() is None, "the zone is refilled: only later writes count"
    ctypes.memset(first.ctypes.data - 8, 0, 4)
    assert guards.violation() == "wrote outside array A0: 4 bytes changed up to 8 bytes before its start"
    ctypes.memset(first.ctypes.data + first.nbytes + GUARD_BYTES - 1, 0, 1)  # the zone's last byte
    assert guards.violation() == f"wrote outside array A0: 1 bytes changed up to {GUARD_BYTES} bytes past its end"
