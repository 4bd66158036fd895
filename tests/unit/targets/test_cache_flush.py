"""The cache flush used to time tuning candidates with cold caches: the generated clflush loop
keeps every value (dirty lines are written back), touches exactly the bytes it is given, and a
target without clflush falls back to sweeping a buffer larger than its caches."""

from __future__ import annotations

import numpy as np
import pytest

from polytf.schedules.analytic_recipe import CacheSizes
from polytf.targets.cache_flush import CACHE_LINE_BYTES, CacheFlusher, cache_flush_ir, cache_flusher
from polytf.targets.cpu import CpuTarget

HOST = CpuTarget()
x86 = pytest.mark.skipif(not HOST.triple.startswith("x86_64"), reason="clflush is an x86-64 instruction")


def test_the_loop_steps_one_cache_line_and_fences():
    text = str(cache_flush_ir())
    assert "llvm.x86.sse2.clflush" in text and "llvm.x86.sse2.mfence" in text
    assert f"add i64 %\"offset\", {CACHE_LINE_BYTES}" in text or f"add i64 %offset, {CACHE_LINE_BYTES}" in text


@x86
@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 4096, 1 << 20])
def test_flushed_arrays_keep_their_values(size):
    flusher = cache_flusher()
    assert flusher.uses_clflush
    values = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    array = values.copy()
    array *= 2.0  # dirty lines: clflush must write them back, not drop them
    flusher.flush([array, np.empty(0, np.float32)])
    np.testing.assert_array_equal(array, values * 2.0)


class _ArmLikeTarget:
    triple = "aarch64-unknown-linux-gnu"
    cache_sizes = CacheSizes(l1_bytes=64 * 1024, l2_bytes=1 << 20, l3_bytes=4 << 20)


def test_without_clflush_a_buffer_twice_the_last_level_cache_is_swept():
    flusher = CacheFlusher(_ArmLikeTarget())
    assert not flusher.uses_clflush
    array = np.arange(8, dtype=np.float32)
    flusher.flush([array])
    flusher.flush([array])
    np.testing.assert_array_equal(array, np.arange(8, dtype=np.float32))
    assert flusher._sweep.nbytes >= 2 * (4 << 20) and float(flusher._sweep[0]) == 2.0  # noqa: SLF001
