"""A dynamic model at a batch size N runs the batch-1 kernels on slices of one sample
(:mod:`polytf.compiler.sliced_kernels`): the same results as a static compile at N, on one
thread and on two (the slices entry's three ways of running), with no kernel compiled for N;
kernels that mix samples or re-read their weights per sample are compiled at N."""

from __future__ import annotations

import numpy as np
import pytest
from graphdef_builders import write_conv_graphdef, write_dense_block_graphdef, write_matmul_graphdef
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polytf
from polytf.compiler import code_cache, sliced_kernels
from polytf.runtime.cpu.sliced_kernel import SampleLoop


@pytest.fixture(autouse=True)
def small_slices(monkeypatch):
    """These models' slices are tiny: every separable kernel is sliced, however small."""
    monkeypatch.setattr(sliced_kernels, "MIN_SLICE_POINTS", 0)


def _sliced(model) -> list[SampleLoop]:
    return [kernel.function for kernel in model.kernels if isinstance(kernel.function, SampleLoop)]


def _refuse_compiling(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was compiled for a batch size the batch-1 kernels serve")

    monkeypatch.setattr(code_cache.KernelCodeCache, "__call__", refuse)
    monkeypatch.setattr(code_cache.KernelCodeCache, "prefetch", refuse)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    channels=st.integers(1, 6),
    filters=st.integers(1, 20),
    window=st.sampled_from([1, 3]),
    stride=st.integers(1, 2),
    padding=st.sampled_from(["SAME", "VALID"]),
    pool=st.booleans(),
    batch=st.integers(2, 5),
    threads=st.sampled_from([1, 2]),
)
def test_a_batch_runs_as_slices_of_the_batch_1_kernels_and_matches_a_static_compile(
    tmp_path_factory, monkeypatch, channels, filters, window, stride, padding, pool, batch, threads
):
    work = tmp_path_factory.mktemp("conv")
    path = work / "conv.pb"
    write_conv_graphdef(path, (9, 8, channels), filters, window, stride, padding, pool)
    dynamic = polytf.load(path, cache_dir=work / "cache", threads=threads, progress=False)
    x = np.random.default_rng(batch).standard_normal((batch, 9, 8, channels)).astype(np.float32)
    static = polytf.load(path, cache_dir=work / "cache", threads=threads, input_shapes={"x": x.shape}, progress=False)
    with monkeypatch.context() as patched:
        _refuse_compiling(patched)
        at_batch = dynamic.at_sizes(N=batch)
    loops = _sliced(at_batch)
    assert len(loops) == len(at_batch.kernels) and all(loop.count == batch for loop in loops)
    assert all(loop.slices is not None for loop in loops)  # the native slices entry, not the Python loop
    expected = static(x=x)
    for name, value in dynamic(x=x).items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-5, atol=1e-5)


def test_without_a_slices_entry_the_runs_are_called_one_by_one(tmp_path):
    path = tmp_path / "conv.pb"
    write_conv_graphdef(path, (6, 6, 3), 8, 3, 1, "SAME", pool=True)
    model = polytf.load(path, cache_dir=tmp_path / "cache", threads=2, progress=False).at_sizes(N=3)
    x = np.random.default_rng(0).standard_normal((3, 6, 6, 3)).astype(np.float32)
    expected = model(x=x)
    for loop in _sliced(model):
        loop.slices = None  # code cached before kernels had a slices entry
    for name, value in model(x=x).items():
        np.testing.assert_array_equal(value, expected[name])


def test_a_matrix_vector_product_per_sample_is_compiled_at_its_batch(tmp_path):
    # (slices of any size allowed: the weight bytes alone refuse it)
    # [N, 64] x [64, 32]: a slice does 2048 points and re-reads 8 KB of weights
    path = tmp_path / "matmul.pb"
    weights = write_matmul_graphdef(path, -1, 64, 32)
    model = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    assert _sliced(model.at_sizes(N=4)) == []
    np.testing.assert_allclose(model(x=x)["mm"], x @ weights, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("batch", "slices"), [(6, 2), (5, 0)])
def test_only_multiples_of_the_smallest_batch_are_sliced(tmp_path, batch, slices):
    path = tmp_path / "conv.pb"
    write_conv_graphdef(path, (6, 6, 2), 4, 3, 1, "SAME")
    model = polytf.load(path, cache_dir=tmp_path / "cache", input_shapes={"x": ("N=3..9", 6, 6, 2)}, progress=False)
    at_batch = model.at_sizes(N=batch)
    loops = _sliced(at_batch)
    assert [loop.count for loop in loops] == [slices] * len(at_batch.kernels) if slices else loops == []  # 5 is no multiple of 3
    x = np.random.default_rng(2).standard_normal((batch, 6, 6, 2)).astype(np.float32)
    static = polytf.load(path, cache_dir=tmp_path / "cache", input_shapes={"x": x.shape}, progress=False)
    np.testing.assert_allclose(at_batch(x=x)["relu"], static(x=x)["relu"], rtol=1e-5, atol=1e-5)


def test_slices_smaller_than_the_minimum_are_compiled_at_their_batch(tmp_path, monkeypatch):
    path = tmp_path / "conv.pb"
    write_conv_graphdef(path, (6, 6, 3), 8, 3, 1, "SAME")
    model = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)
    monkeypatch.setattr(sliced_kernels, "MIN_SLICE_POINTS", 10**9)
    assert _sliced(model.at_sizes(N=2)) == []
    monkeypatch.setattr(sliced_kernels, "MIN_SLICE_POINTS", 0)
    assert len(_sliced(model.at_sizes(N=3))) == 1


def test_each_batch_holds_the_weights_of_the_smallest_batch_once(tmp_path):
    path = tmp_path / "conv.pb"
    write_conv_graphdef(path, (6, 6, 3), 16, 3, 1, "SAME", pool=True)
    model = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)
    base, at_three = model.at_sizes(N=1), model.at_sizes(N=3)
    constants, base_constants = at_three._constants, base._constants  # every weight, as read and packed
    equal = [key for key, value in constants.items() if key in base_constants and np.array_equal(value, base_constants[key])]
    assert equal and all(constants[key] is base_constants[key] for key in equal)
    x = np.random.default_rng(4).standard_normal((3, 6, 6, 3)).astype(np.float32)
    static = polytf.load(path, cache_dir=tmp_path / "cache", input_shapes={"x": x.shape}, progress=False)
    np.testing.assert_allclose(model(x=x)["pool"], static(x=x)["pool"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_kernels_writing_windows_of_a_concatenation_run_as_slices(tmp_path, monkeypatch, threads):
    """A DenseNet block with a None batch: the 3x3 convolutions write windows of one
    concatenation's buffer (:mod:`polytf.plan.buffer_placement`); at batch 4 they run the
    batch-1 kernels on slices of the batch-4 buffer, from their windows' first elements."""
    path = tmp_path / "dense.pb"
    write_dense_block_graphdef(path, batch=-1)
    dynamic = polytf.load(path, cache_dir=tmp_path / "cache", threads=threads, progress=False)
    x = np.random.default_rng(4).standard_normal((4, 6, 6, 3)).astype(np.float32)
    static = polytf.load(path, cache_dir=tmp_path / "cache", threads=threads, input_shapes={"x": x.shape}, progress=False)
    with monkeypatch.context() as patched:
        _refuse_compiling(patched)
        at_batch = dynamic.at_sizes(N=4)
    assert len(_sliced(at_batch)) == len(at_batch.kernels)
    np.testing.assert_allclose(dynamic(x=x)["out"], static(x=x)["out"], rtol=1e-5, atol=1e-5)
