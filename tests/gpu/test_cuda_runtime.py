"""The CUDA model runtime on a real GPU: the CuPy backend, numpy and CuPy arrays in and out,
host steps, concurrent calls, and a zoo model against TensorFlow."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import polytf

pytestmark = pytest.mark.gpu


def test_cupy_backend_copies_and_times(cupy):
    from polytf.runtime.cuda.backend import CupyBackend

    backend = CupyBackend()
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    buffer = backend.upload(host)
    assert backend.is_device_array(buffer) and not backend.is_device_array(host)
    np.testing.assert_array_equal(backend.download(buffer), host)
    target = backend.allocate((3, 4), "float32", zeroed=True)
    assert float(target.sum()) == 0.0
    backend.upload_into(target, host + 1)
    np.testing.assert_array_equal(backend.download(backend.duplicate(target)), host + 1)
    assert backend.adopt(buffer) is buffer and backend.adopt(buffer.T).flags.c_contiguous
    backend.wait(backend.fence())
    assert backend.elapsed_s(lambda: cupy.matmul(buffer, buffer.T)) > 0
    backend.flush_caches()


def test_numpy_in_numpy_out_and_cupy_in_cupy_out(cupy, matmul_model, matmul_reference, tmp_path):
    model = polytf.load(matmul_model, target="cuda", cache_dir=tmp_path / "cache")
    assert type(model).__name__ == "CudaModel" and all(kernel.recipe.kind == "gpu" for kernel in model.kernels)
    x = np.random.default_rng(0).standard_normal((37, 45)).astype(np.float32)
    host = model(x=x)["relu"]
    assert type(host) is np.ndarray
    np.testing.assert_allclose(host, matmul_reference(x), rtol=1e-5, atol=1e-5)
    device = model(x=cupy.asarray(x))["relu"]
    assert isinstance(device, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(device), host, rtol=1e-6, atol=1e-6)
    cpu = polytf.load(matmul_model, cache_dir=tmp_path / "cache")
    np.testing.assert_allclose(host, cpu(x=x)["relu"], rtol=1e-5, atol=1e-5)


def test_device_input_errors_name_the_placeholder(cupy, matmul_model, tmp_path):
    from polytf.errors import ShapeError

    model = polytf.load(matmul_model, target="cuda", cache_dir=tmp_path / "cache")
    with pytest.raises(ShapeError, match=r"input 'x' is a device array of dtype float64"):
        model(x=cupy.zeros((37, 45), cupy.float64))
    with pytest.raises(ShapeError, match=r"input 'x' has shape \(36, 45\)"):
        model(x=cupy.zeros((36, 45), cupy.float32))


def test_concurrent_calls_on_the_gpu(cupy, matmul_model, matmul_reference, tmp_path):
    model = polytf.load(matmul_model, target="cuda", cache_dir=tmp_path / "cache")
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((37, 45)).astype(np.float32) for _ in range(8)]
    results = {}

    def work(first):
        for j in range(first, len(inputs), 4):
            results[j] = model(x=inputs[j])["relu"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for j, x in enumerate(inputs):
        np.testing.assert_allclose(results[j], matmul_reference(x), rtol=1e-5, atol=1e-5)


def test_latency_is_timed_with_cuda_events(cupy, matmul_model, tmp_path):
    model = polytf.load(matmul_model, target="cuda", cache_dir=tmp_path / "cache")
    latencies = model.latency_s({"x": cupy.ones((37, 45), cupy.float32)}, repeats=5, warmup=2)
    assert len(latencies) == 5 and all(0 < value < 1 for value in latencies)


def test_transformer_encoder_on_the_gpu_matches_tensorflow(cupy, frozen_model, tmp_path):
    from polytf.model_zoo import run_graphdef_with_tensorflow

    path = frozen_model("transformer_encoder")
    model = polytf.load(path, target="cuda", cache_dir=tmp_path / "cache")
    x = np.random.default_rng(2).standard_normal(model.input_types["input"].shape).astype(np.float32)
    actual = cupy.asnumpy(model(input=cupy.asarray(x))["Identity"])
    (reference,) = run_graphdef_with_tensorflow(path, {"input": x}, ["Identity"]).values()
    atol = 1e-5 * float(np.max(np.abs(reference))) + 1e-6  # the e2e tolerance
    np.testing.assert_allclose(actual, reference, rtol=1e-4, atol=atol)
