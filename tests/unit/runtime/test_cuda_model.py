"""CudaModel on the emulated device: the CUDA model runtime (constants uploaded once,
tensors kept on the device, host steps with copies in and out, views, outputs, input
checks) run on the CPU. The kernels are the CUDA target's own (PTX for an offline sm_80,
the default recipes of its GPU search space); each launch runs the kernel's Scop and GPU
recipe compiled by the CPU target (:mod:`polytf.runtime.cuda.emulation`). Results are
checked against numpy, the CPU CompiledModel and TensorFlow."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, graph_matmul_bias_relu, placeholder, reshaped_matmul_nodes

import polytf
from polytf.compiler.backends import CudaBackend, cuda_unavailable_reason
from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import PreparedModel, prepare_model
from polytf.errors import DependencyMissingError, GraphError, PolytfError, ShapeError
from polytf.graph import Node
from polytf.lowering.lowered_kernel import lower_group
from polytf.passes.fusion import partition
from polytf.runtime.cuda.argument_table import CudaArgumentTable
from polytf.runtime.cuda.emulation import EmulatedDevice, EmulatedDeviceArray
from polytf.runtime.cuda.model import CudaModel
from polytf.schedules.recipe import GpuRecipe
from polytf.targets.cuda import CudaKernel, CudaTarget


def prepared_of(graph) -> PreparedModel:
    groups = partition(graph)
    return PreparedModel(graph, groups, tuple(lower_group(graph, g) for g in groups), ())


#: the CUDA target without a device: PTX for sm_80, nothing loaded until a launch on CuPy
TARGET = CudaTarget(compute_capability="sm_80")


def cuda_model(prepared, device=None) -> CudaModel:
    return CudaBackend(TARGET, 1, device or EmulatedDevice()).build_model(prepared)


def expected_matmul_bias_relu(graph, x):
    return np.maximum(x @ graph.constants["w:0"] + graph.constants["b:0"], 0)


def test_matmul_bias_relu_uploads_weights_once_and_matches_numpy_and_the_cpu_model():
    graph = graph_matmul_bias_relu(m=9, k=13, n=11)
    prepared = prepared_of(graph)
    device = EmulatedDevice()
    model = cuda_model(prepared, device)
    (kernel,) = model.kernels
    assert isinstance(kernel, CudaKernel) and ".entry" in kernel.ptx
    assert isinstance(kernel.recipe, GpuRecipe) and kernel.recipe.shared_memory  # a staged GPU mapping, not a CPU recipe
    assert device.counts["upload"] == 2  # w and b, at build time
    x = np.random.default_rng(0).standard_normal((9, 13)).astype(np.float32)
    for call in range(1, 3):
        result = model(x=x)
        assert list(result) == ["relu"]
        assert type(result["relu"]) is np.ndarray
        np.testing.assert_allclose(result["relu"], expected_matmul_bias_relu(graph, x), rtol=1e-5, atol=1e-5)
        assert device.counts["upload"] == 2 + call and device.counts["download"] == call  # the input in, the output out
    np.testing.assert_allclose(result["relu"], build_model(prepared, threads=1)(x=x)["relu"], rtol=1e-5, atol=1e-6)


def test_device_arrays_in_give_device_arrays_out_without_host_copies():
    graph = graph_matmul_bias_relu()
    device = EmulatedDevice()
    model = cuda_model(prepared_of(graph), device)
    x = np.random.default_rng(1).standard_normal((7, 13)).astype(np.float32)
    on_device = device.to_device(x)
    before = dict(device.counts)
    result = model(x=on_device)
    assert isinstance(result["relu"], EmulatedDeviceArray)
    assert device.counts["download"] == before.get("download", 0) and device.counts["upload"] == before["upload"]
    np.testing.assert_allclose(device.download(result["relu"]), expected_matmul_bias_relu(graph, x), rtol=1e-5, atol=1e-5)
    # an explicit choice wins: device arrays in, host arrays out
    host = model.run({"x": on_device}, device_outputs=False)["relu"]
    assert type(host) is np.ndarray and np.array_equal(host, device.download(result["relu"]))


def test_a_non_contiguous_device_input_is_copied_on_the_device():
    graph = graph_matmul_bias_relu()
    device = EmulatedDevice()
    model = cuda_model(prepared_of(graph), device)
    x = np.random.default_rng(2).standard_normal((13, 7)).astype(np.float32)
    transposed = device.to_device(x).T
    assert not transposed.flags.c_contiguous
    result = model(x=transposed)
    assert device.counts["duplicate"] == 1
    np.testing.assert_allclose(device.download(result["relu"]), expected_matmul_bias_relu(graph, x.T), rtol=1e-5, atol=1e-5)


def test_input_errors_name_the_placeholder():
    device = EmulatedDevice()
    model = cuda_model(prepared_of(graph_matmul_bias_relu()), device)
    with pytest.raises(ShapeError, match=r"input 'x' has shape \(3, 13\), the model takes float32\[7, 13\]: the GraphDef fixes dimension 0 to 7"):
        model(x=np.zeros((3, 13), np.float32))  # the placeholder's own shape: compiling for (3, 13) cannot work
    with pytest.raises(ShapeError, match=r"input 'x' has shape \(7, 12\)"):
        model(x=device.to_device(np.zeros((7, 12), np.float32)))
    with pytest.raises(ShapeError, match=r"input 'x' is a device array of dtype float64, the model takes float32.*astype"):
        model(x=device.to_device(np.zeros((7, 13), np.float64)))
    with pytest.raises(ShapeError, match=r"input 'x' cannot be converted to a float32 array"):
        model(x="not a number")
    with pytest.raises(GraphError, match=r"missing \['x'\]"):
        model()
    with pytest.raises(GraphError, match=r"unknown \['y'\]"):
        model(x=np.zeros((7, 13), np.float32), y=np.zeros(1))
    assert model(**{"x:0": np.zeros((7, 13), np.float32)})  # the tensor name of placeholder x


def test_views_and_outputs_that_are_placeholders_or_constants():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    table = rng.standard_normal((2, 2)).astype(np.float32)
    graph = build_graph([*reshaped_matmul_nodes(w), Node("same", "Identity", ("x:0",)), const("table", table)], ["out:0", "same:0", "table:0"])
    device = EmulatedDevice()
    model = cuda_model(prepared_of(graph), device)
    x = rng.standard_normal((2, 3, 2)).astype(np.float32)
    host = model(x=x)
    np.testing.assert_allclose(host["out"], x.reshape(2, 6) @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(host["same"], x)
    np.testing.assert_array_equal(host["table"], table)
    host["table"][...] = 0  # a fresh copy: the model's constant is untouched
    on_device = model(x=device.to_device(x))
    assert all(isinstance(value, EmulatedDeviceArray) for value in on_device.values())
    np.testing.assert_array_equal(device.download(on_device["table"]), table)
    np.testing.assert_array_equal(device.download(on_device["same"]), x)


def test_host_steps_run_between_device_kernels(tmp_path):
    """TopKV2 has no lowering: it runs on the host, its input downloaded, its values uploaded
    for the Relu kernel that reads them."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((5, 8)).astype(np.float32)
    graph = build_graph(
        [
            placeholder("x", (3, 5)),
            const("w", w),
            Node("mm", "MatMul", ("x:0", "w:0")),
            const("k", np.int32(4)),
            Node("top", "TopKV2", ("mm:0", "k:0"), attrs={"sorted": True}),
            Node("relu", "Relu", ("top:0",)),
        ],
        ["relu:0"],
    )
    from polytf.lowering.host_fallback import lower_with_fallback

    groups, kernels, host_nodes = lower_with_fallback(graph)
    prepared = PreparedModel(graph, groups, kernels, (), host_nodes)
    device = EmulatedDevice()
    model = cuda_model(prepared, device)
    assert model.step_kinds == ("kernel", "host", "kernel")
    x = rng.standard_normal((3, 5)).astype(np.float32)
    expected = np.maximum(np.sort(x @ w, axis=1)[:, ::-1][:, :4], 0)
    np.testing.assert_allclose(model(x=x)["relu"], expected, rtol=1e-5, atol=1e-5)
    before = dict(device.counts)
    on_device = model(x=device.to_device(x))["relu"]
    assert device.counts["download"] == before["download"] + 1  # the host step's input, nothing else
    np.testing.assert_allclose(device.download(on_device), expected, rtol=1e-5, atol=1e-5)


def test_concurrent_calls_use_their_own_contexts():
    graph = graph_matmul_bias_relu()
    model = cuda_model(prepared_of(graph))
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((7, 13)).astype(np.float32) for _ in range(6)]
    results: dict[int, np.ndarray] = {}
    barrier = threading.Barrier(3)

    def work(index):
        barrier.wait()
        for j in range(index, len(inputs), 3):
            results[j] = model(x=inputs[j])["relu"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for j, x in enumerate(inputs):
        np.testing.assert_allclose(results[j], expected_matmul_bias_relu(graph, x), rtol=1e-5, atol=1e-5)
    assert 1 <= model.context_count <= 3


def test_latencies_are_timed_on_bound_inputs():
    device = EmulatedDevice()
    model = cuda_model(prepared_of(graph_matmul_bias_relu()), device)
    latencies = model.latency_s({"x": np.ones((7, 13), np.float32)}, repeats=4, warmup=1)
    assert len(latencies) == 4 and all(value > 0 for value in latencies)
    assert device.counts["launch"] == 5 and device.counts["upload"] == 3  # the input uploaded once
    (kernel, kernel_latencies), = model.kernel_latency_s({"x": np.ones((7, 13), np.float32)}, repeats=3, warmup=1)
    assert kernel is model.kernels[0] and len(kernel_latencies) == 3


def test_a_device_input_that_starts_mid_row_is_copied_to_an_aligned_buffer():
    graph = graph_matmul_bias_relu()
    device = EmulatedDevice()
    model = cuda_model(prepared_of(graph), device)
    x = np.random.default_rng(3).standard_normal((7 * 13 + 1,)).astype(np.float32)
    shifted = device.to_device(x)[1:].reshape(7, 13)  # contiguous, 4 bytes past an aligned start
    result = model(x=shifted)
    assert device.counts["duplicate"] == 1
    np.testing.assert_allclose(device.download(result["relu"]), expected_matmul_bias_relu(graph, x[1:].reshape(7, 13)), rtol=1e-5, atol=1e-5)


def test_device_arguments_check_every_buffer():
    device = EmulatedDevice()
    model = cuda_model(prepared_of(graph_matmul_bias_relu()), device)
    (kernel,) = model.kernels
    arguments = CudaArgumentTable(kernel, device)
    slot = arguments.slot("A0")
    with pytest.raises(ShapeError, match="must be a device array of the emulated backend, not ndarray"):
        arguments.bind(slot, np.zeros((7, 13), np.float32))
    with pytest.raises(ShapeError, match="has dtype float64, the kernel takes float32"):
        arguments.bind(slot, device.allocate((7, 13), "float64"))
    with pytest.raises(ShapeError, match=r"holds 360 bytes, the kernel's accesses need 364"):
        arguments.bind(slot, device.allocate((90,), "float32"))
    with pytest.raises(ShapeError, match="must be a C-contiguous device array"):
        arguments.bind(slot, device.allocate((13, 7), "float32").T)
    with pytest.raises(ShapeError, match="not a multiple of 16 bytes"):
        arguments.bind(slot, device.allocate((7 * 13 + 1,), "float32")[1:].reshape(7, 13))
    arguments.bind(slot, device.allocate((7, 13), "float32"))
    with pytest.raises(ShapeError, match=r"arrays \['A1', 'A2', 'A3'\] are not bound"):
        arguments.launch()
    assert device.counts["launch"] == 0


def test_cuda_target_without_cupy_or_gpu_is_a_clear_error(tmp_path):
    reason = cuda_unavailable_reason()
    if reason is None:
        pytest.skip("this machine has CuPy and a GPU")
    path = tmp_path / "never_read.pbtxt"  # the target is checked before the model is read
    with pytest.raises(DependencyMissingError, match="target 'cuda' needs CuPy and an NVIDIA GPU.*install cupy-cuda12x"):
        polytf.load(path, target="cuda", cache_dir=tmp_path / "cache")
    with pytest.raises(PolytfError, match="unknown target 'gpu'; choose one of cpu, cuda"):
        polytf.load(path, target="gpu", cache_dir=tmp_path / "cache")


def test_transformer_encoder_on_the_emulated_device_matches_tensorflow(frozen_model):
    path = frozen_model("transformer_encoder")
    from polytf.model_zoo import run_graphdef_with_tensorflow

    device = EmulatedDevice()
    model = cuda_model(prepare_model(path), device)
    assert model.host_nodes == () and len(model.kernels) > 10
    assert all(isinstance(kernel.recipe, GpuRecipe) for kernel in model.kernels)
    x = np.random.default_rng(6).standard_normal(model.input_types["input"].shape).astype(np.float32)
    on_device = model(input=device.to_device(x))["Identity"]
    assert device.counts["download"] == 0  # every tensor stayed on the device
    (reference,) = run_graphdef_with_tensorflow(path, {"input": x}, ["Identity"]).values()
    actual = device.download(on_device)
    atol = 1e-5 * float(np.max(np.abs(reference))) + 1e-6  # the e2e tolerance (tests/e2e/conftest.py)
    np.testing.assert_allclose(actual, reference, rtol=1e-4, atol=atol)
