"""The measured memory bandwidth: the generated STREAM triad computes ``b + s * c`` on every
element whatever the thread count, uses the target's vector lanes, and gives a positive,
finite figure."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from polytf.bench.memory_bandwidth import (
    COUNTED_BYTES_PER_ELEMENT,
    StreamTriad,
    measure_memory_bandwidth,
    stream_triad_ir,
    triad_elements,
)
from polytf.errors import PolytfError
from polytf.plan.buffers import aligned_empty


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_the_triad_is_one_vector_fma_per_vector_of_elements(lanes):
    text = str(stream_triad_ir(lanes))
    assert re.search(rf"call <{lanes} x float> @\"?llvm\.fma\.v{lanes}f32", text)
    assert "GOMP_parallel" in text and "omp_get_thread_num" in text  # run as polytf's parallel kernels are


@pytest.fixture(scope="module")
def triad():
    return StreamTriad()


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("vectors", [1, 5, 67])
def test_the_generated_triad_computes_every_element(triad, threads, vectors):
    rng = np.random.default_rng(vectors)
    elements = vectors * triad.lanes  # chunks of whole vectors: the last thread's is short or empty
    a, b, c = (aligned_empty((elements,)) for _ in range(3))
    a[...] = np.nan
    b[...] = rng.standard_normal(elements)
    c[...] = rng.standard_normal(elements)
    seconds = triad.run(a, b, c, 3.0, threads)
    assert seconds > 0
    np.testing.assert_allclose(a, b + np.float32(3.0) * c, rtol=1e-6, atol=1e-6)


def test_the_triad_refuses_arrays_it_cannot_stream(triad):
    a = aligned_empty((triad.lanes * 2,))
    with pytest.raises(PolytfError, match="multiple"):
        triad.run(a[:-1], a[:-1].copy(), a[:-1].copy(), 1.0, 1)
    with pytest.raises(PolytfError, match="float32"):
        triad.run(a, a.astype(np.float64), a, 1.0, 1)
    with pytest.raises(PolytfError, match="threads"):
        triad.run(a, a.copy(), a.copy(), 1.0, 0)


def test_arrays_are_four_times_the_last_level_cache():
    assert triad_elements(32 * 2**20, 8) * 4 == 128 * 2**20
    assert triad_elements(1024, 16) * 4 == 32 * 2**20  # at least 32 MiB
    assert triad_elements(3 * 2**20 + 4, 8) % 8 == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_bandwidth_is_positive_and_finite(threads):
    measured = measure_memory_bandwidth(threads, array_bytes=4 * 2**20, repeats=2)
    assert measured.threads == threads and measured.seconds > 0
    assert math.isfinite(measured.gb_per_s) and measured.gb_per_s > 0.1
    assert measured.gb_per_s == pytest.approx(COUNTED_BYTES_PER_ELEMENT * (measured.array_bytes // 4) / measured.seconds / 1e9)
    assert not measured.write_allocate_counted and measured.counted_bytes == 3 * measured.array_bytes
    assert "GB/s" in measured.describe() and set(measured.to_dict()) >= {"gb_per_s", "threads", "array_bytes"}


def test_bad_arguments_are_refused():
    with pytest.raises(PolytfError, match="threads >= 1"):
        measure_memory_bandwidth(0)
    with pytest.raises(PolytfError, match="lanes"):
        stream_triad_ir(0)
