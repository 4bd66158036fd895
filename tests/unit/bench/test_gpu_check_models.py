"""The GPU check's models, written without TensorFlow (:mod:`polytf.bench.gpu_check_models`):
their GraphDefs run the same in numpy (polytf's reference evaluator), TensorFlow, polytf's CUDA
runtime emulated on the CPU and PyTorch (when installed); ResNet50 and the encoder lower to the
same kernels as the zoo's Keras models; ResNet50's distinct conv layers, each one library call."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from tensorboard.compat.proto import graph_pb2, types_pb2

from polytf.bench import cuda_baselines
from polytf.bench.baselines import NumpyGraph
from polytf.bench.gpu_check_models import (
    CheckModel,
    ConvLayer,
    conv_layer_model,
    matmul_model,
    resnet50_conv_layers,
    resnet50_model,
    transformer_encoder_model,
)
from polytf.compiler.preparation import prepare_model
from polytf.errors import DependencyMissingError
from polytf.ops.attributes import attr_ints, attr_string

#: ResNet50's layers at image_size 32: conv1 on 38x38, a 1x1 s1, a 3x3 SAME, a 1x1 s2 (indices as at 224)
SMALL_LAYERS = resnet50_conv_layers(2, 32)
SMALL_MODELS = {
    "matmul": lambda: matmul_model(33, 17, 9),
    "conv1 7x7 s2 valid": lambda: conv_layer_model(SMALL_LAYERS[0]),
    "conv 1x1 s1": lambda: conv_layer_model(SMALL_LAYERS[2]),
    "conv 3x3 same": lambda: conv_layer_model(SMALL_LAYERS[3]),
    "conv 1x1 s2": lambda: conv_layer_model(SMALL_LAYERS[5]),
    "resnet50 32px": lambda: resnet50_model(2, image_size=32),
    "encoder": lambda: transformer_encoder_model(2, sequence=16, model_width=64, heads=4, feed_forward_width=128),
}
#: TensorFlow's, numpy's, PyTorch's and polytf's kernels differ by up to ~1e-5 of the output's std here
RELATIVE_TOLERANCE = 1e-4


def assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    scale = float(np.std(expected))
    assert scale > 0 and float(np.max(np.abs(actual - expected))) <= RELATIVE_TOLERANCE * scale


def numpy_output(model: CheckModel, path, feeds) -> np.ndarray:
    return NumpyGraph(path, [model.output])(**feeds)[model.output]


def kernel_signatures(path) -> list[tuple]:
    """Per kernel after polytf's passes: its ops and the shapes of its inputs and outputs."""
    prepared = prepare_model(path)
    assert not prepared.host_nodes
    return [
        (tuple(op for _, op in kernel.scop.ops), tuple((a.role, a.shape) for a in kernel.scop.arrays if a.role != "temporary"))
        for kernel in prepared.kernels
    ]


def test_resnet50_has_20_distinct_conv_layers_at_224_in_network_order():
    layers = resnet50_conv_layers(8)
    # conv1; conv2: 64->256 (shortcut and _3), 64->64 1x1, 64->64 3x3, 256->64; conv3..5: 5 each (shortcut s2, _1 s2, 3x3, _3, _1 of blocks 2+)
    assert len(layers) == 1 + 4 + 5 + 5 + 5 == len(set(layers))
    assert layers[0] == ConvLayer(8, 230, 230, 3, 64, 7, 2, "VALID") and layers[0].output_shape == (8, 112, 112, 64)
    assert layers[3] == ConvLayer(8, 56, 56, 64, 64, 3, 1, "SAME") and layers[3].name == "conv 56x56 64->64 3x3 s1 b8"
    assert layers[5] == ConvLayer(8, 56, 56, 256, 512, 1, 2, "VALID") and layers[5].output_shape == (8, 28, 28, 512)
    assert ConvLayer(8, 14, 14, 1024, 256, 1, 1, "VALID") in layers
    assert layers[-1] == ConvLayer(8, 7, 7, 2048, 512, 1, 1, "VALID")
    assert [layer.kernel for layer in layers].count(3) == 4 and all(layer.batch == 8 for layer in layers)
    assert resnet50_conv_layers(1, 32)[0] == ConvLayer(1, 38, 38, 3, 64, 7, 2, "VALID")


def test_every_resnet50_conv_layer_model_is_one_library_call(tmp_path, monkeypatch):
    """library_baseline's rules on the prepared graph: one contraction, a Conv2D with VALID or
    SAME stride-1 odd-kernel padding (cuDNN), or the MatMul polytf makes of a 1x1 stride-1 conv (cuBLAS)."""
    calls = []
    monkeypatch.setattr(cuda_baselines, "_cublas", lambda graph, node: calls.append(("cublas", node)) or "cublas")
    monkeypatch.setattr(cuda_baselines, "_cudnn", lambda graph, node: (calls.append(("cudnn", node)) or "cudnn", "cuDNN"))
    for index, layer in enumerate(resnet50_conv_layers(8)):
        prepared = prepare_model(conv_layer_model(layer, seed=index).write(tmp_path / f"layer{index}.pb"))
        baseline, _ = cuda_baselines.library_baseline(prepared.graph)
        system, node = calls[-1]
        assert baseline == system == ("cublas" if (layer.kernel, layer.stride) == (1, 1) else "cudnn"), layer.name
        if system == "cudnn":
            padding, strides = attr_string(node, "padding", "VALID"), attr_ints(node, "strides", (1, 1, 1, 1), length=4)
            assert padding == layer.padding and strides == (1, layer.stride, layer.stride, 1)
            assert padding == "VALID" or (strides == (1, 1, 1, 1) and layer.kernel % 2 == 1)
    assert len(calls) == 20


@pytest.mark.parametrize("name", list(SMALL_MODELS))
def test_numpy_matches_tensorflow_on_the_same_graphdef(name, tmp_path):
    pytest.importorskip("tensorflow")
    from polytf.model_zoo import run_graphdef_with_tensorflow

    model = SMALL_MODELS[name]()
    path = model.write(tmp_path / "model.pb")
    feeds = model.random_inputs(seed=1)
    expected = run_graphdef_with_tensorflow(path, feeds, [model.output])[model.output]
    assert_close(numpy_output(model, path, feeds), expected)


@pytest.mark.parametrize("name", ["matmul", "conv1 7x7 s2 valid", "conv 1x1 s1", "conv 3x3 same", "conv 1x1 s2", "encoder"])
def test_the_emulated_cuda_runtime_matches_numpy(name, tmp_path):
    run_on_emulated_cuda(SMALL_MODELS[name](), tmp_path)


@pytest.mark.slow  # ~15 s: 59 kernels compiled for the host and run through the GPU mapping
def test_the_emulated_cuda_runtime_runs_resnet50_at_32_pixels(tmp_path):
    run_on_emulated_cuda(resnet50_model(1, image_size=32), tmp_path)


def run_on_emulated_cuda(model: CheckModel, tmp_path) -> None:
    from polytf.compiler.backends import CudaBackend
    from polytf.runtime.cuda.emulation import EmulatedDevice
    from polytf.targets.cuda import CudaTarget

    path = model.write(tmp_path / "model.pb")
    feeds = model.random_inputs(seed=2)
    compiled = CudaBackend(CudaTarget(compute_capability="sm_90"), 1, EmulatedDevice()).build_model(prepare_model(path))
    assert_close(np.asarray(compiled(**feeds)[model.output]), numpy_output(model, path, feeds))


@pytest.mark.parametrize("name", list(SMALL_MODELS))
def test_the_pytorch_module_matches_numpy(name, tmp_path):
    torch = pytest.importorskip("torch")
    model = SMALL_MODELS[name]()
    path = model.write(tmp_path / "model.pb")
    feeds = model.random_inputs(seed=3)
    module = model.torch_module("cpu")
    assert not module.training
    with torch.inference_mode():
        output = module(*(torch.from_numpy(feeds[placeholder]) for placeholder in model.input_shapes))
    assert output.dtype == torch.float32
    assert_close(output.numpy(), numpy_output(model, path, feeds))


def test_the_pytorch_module_without_pytorch_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(DependencyMissingError, match="pip install torch"):
        matmul_model(2, 3, 4).torch_module("cpu")


def keras_resnet50_graphdef(batch: int, image_size: int) -> bytes:
    """The zoo's ResNet50 (``keras_application``) at another input size: the same Keras call and weights procedure."""
    from polytf.model_zoo import freeze_to_graphdef
    from polytf.model_zoo.keras_models import _import_keras
    from polytf.model_zoo.modern_models import randomize_normalization_weights

    keras = _import_keras()
    inputs = keras.Input(shape=(image_size, image_size, 3), batch_size=batch, name="input")
    model = randomize_normalization_weights(keras.applications.ResNet50(input_tensor=inputs, weights=None, classes=1000))
    return freeze_to_graphdef(model, [("input", (batch, image_size, image_size, 3))]).SerializeToString()


def test_resnet50_lowers_to_the_kernels_of_keras_resnet50_at_32_pixels(tmp_path):
    pytest.importorskip("tensorflow")
    keras_path = tmp_path / "keras.pb"
    keras_path.write_bytes(keras_resnet50_graphdef(2, 32))
    signatures = kernel_signatures(resnet50_model(2, image_size=32).write(tmp_path / "check.pb"))
    assert len(signatures) == 59 and signatures == kernel_signatures(keras_path)


def test_resnet50_lowers_to_the_kernels_of_the_zoo_resnet50(frozen_model, tmp_path):
    signatures = kernel_signatures(resnet50_model(1).write(tmp_path / "check.pb"))
    assert signatures == kernel_signatures(frozen_model("resnet50"))
    conv1_ops, (conv1_input, conv1_kernel, *_) = signatures[1]  # its output is written into the max pool's padded slab
    assert (
        conv1_ops == ("Conv2D", "BiasAdd", "Relu")
        and conv1_input == ("input", (1, 230, 230, 3))
        and conv1_kernel == ("input", (7, 7, 3, 64))
    )


def test_the_encoder_lowers_to_the_kernels_of_the_zoo_encoder(frozen_model, tmp_path):
    from polytf.model_zoo import freeze_to_graphdef, transformer_encoder

    signatures = kernel_signatures(transformer_encoder_model(1).write(tmp_path / "check.pb"))
    assert len(signatures) == 11 and signatures == kernel_signatures(frozen_model("transformer_encoder"))
    keras_path = tmp_path / "keras_small.pb"
    keras_model = transformer_encoder(2, sequence=16, model_width=64, heads=4, feed_forward_width=128)
    keras_path.write_bytes(freeze_to_graphdef(keras_model, [("input", (2, 16, 64))]).SerializeToString())
    assert kernel_signatures(SMALL_MODELS["encoder"]().write(tmp_path / "small.pb")) == kernel_signatures(keras_path)


def test_models_are_named_deterministic_and_have_no_trivial_weights():
    assert matmul_model(4096, 4096, 4096).name == "matmul 4096x4096x4096"
    assert transformer_encoder_model(8).name == "transformer_encoder b8"
    assert transformer_encoder_model(8).input_shapes == {"input": (8, 128, 256)}
    small = resnet50_model(1, image_size=32)
    assert small.name == "resnet50 32px b1" and small.input_shapes == {"input": (1, 32, 32, 3)} and small.output == "Identity"
    with pytest.raises(ValueError, match="at least 32"):
        resnet50_model(1, image_size=16)
    with pytest.raises(ValueError, match="multiple of heads"):
        transformer_encoder_model(1, model_width=30, heads=4)
    assert small.graphdef == resnet50_model(1, image_size=32).graphdef != resnet50_model(1, image_size=32, seed=1).graphdef
    graph = graph_pb2.GraphDef.FromString(small.graphdef)
    vectors = [
        np.frombuffer(node.attr["value"].tensor.tensor_content, np.float32)
        for node in graph.node
        if node.op == "Const"
        and node.attr["dtype"].type == types_pb2.DT_FLOAT
        and len(node.attr["value"].tensor.tensor_shape.dim) == 1
    ]
    assert len(vectors) == 53 * 5 + 1  # bias, gamma, beta, mean, variance of 53 convolutions; the dense bias
    assert all(np.std(vector) > 0.01 for vector in vectors)  # no zero biases or unit statistics
