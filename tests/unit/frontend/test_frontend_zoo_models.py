"""Zoo models frozen by TensorFlow parse with the frontend (skipped without TensorFlow)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from polytf.errors import DependencyMissingError, GraphError
from polytf.frontend import load_graph

EXPECTED_INPUT_SHAPES = {
    ("mlp", 1): (1, 784),
    ("cifar_cnn", 1): (1, 32, 32, 3),
    ("odd_matmul", 1): (37, 53),
    ("conv_bias_relu", 1): (1, 17, 19, 5),
}


@pytest.mark.parametrize(("name", "batch"), list(EXPECTED_INPUT_SHAPES))
def test_zoo_model_parses(frozen_model, name: str, batch: int) -> None:
    path = frozen_model(name, batch)
    graph = load_graph(path)
    assert [n.name for n in graph.placeholders] == ["input"]
    placeholder = graph.node("input")
    assert placeholder.attr("dtype") == "float32"
    assert placeholder.attr("shape") == EXPECTED_INPUT_SHAPES[(name, batch)]
    assert graph.outputs == ("Identity:0",)
    assert graph.node("Identity").op == "Identity"
    assert list(graph.nodes)[-1] == "Identity"
    ops = {n.op for n in graph.nodes.values()}
    assert not ops & {"VarHandleOp", "ReadVariableOp", "StatefulPartitionedCall", "PartitionedCall"}
    # Every 1-D float constant (the biases) is non-trivial: a dropped bias would be caught.
    biases = [
        n.attr("value")
        for n in graph.nodes.values()
        if n.op == "Const" and n.attr("value").ndim == 1 and n.attr("dtype") == "float32"
    ]
    for bias in biases:
        assert np.abs(bias).min() > 0 and np.abs(bias).max() > 0.01
    if name in ("mlp", "cifar_cnn", "conv_bias_relu"):
        assert biases


def test_zoo_layer_ops(frozen_model) -> None:
    cnn = load_graph(frozen_model("cifar_cnn", 1))
    ops = [n.op for n in cnn.nodes.values()]
    assert ops.count("Conv2D") == 4 and ops.count("MaxPool") == 2 and ops.count("MatMul") == 2
    assert ops.count("Softmax") == 1
    conv = load_graph(frozen_model("conv_bias_relu", 1))
    assert [n.op for n in conv.nodes.values() if n.op not in ("Const",)] == [
        "Placeholder",
        "Conv2D",
        "BiasAdd",
        "Relu",
        "Identity",
    ]
    mm = load_graph(frozen_model("odd_matmul", 1))
    assert [n.op for n in mm.nodes.values()] == ["Placeholder", "Const", "MatMul", "Identity"]


def test_cnn_batch_4(frozen_model) -> None:
    graph = load_graph(frozen_model("cifar_cnn", 4))
    assert graph.node("input").attr("shape") == (4, 32, 32, 3)


def test_truncated_zoo_model(frozen_model, tmp_path) -> None:
    data = frozen_model("mlp", 1).read_bytes()
    for cut in (len(data) // 2, len(data) - 1, 100):
        path = tmp_path / f"cut_{cut}.pb"
        path.write_bytes(data[:cut])
        with pytest.raises(GraphError, match="cut_"):
            load_graph(path)


def test_explicit_output_on_zoo_model(frozen_model) -> None:
    path = frozen_model("conv_bias_relu", 1)
    assert load_graph(path, outputs=["BiasAdd"]).outputs == ("BiasAdd:0",)
    with pytest.raises(GraphError, match="'Identity'"):
        load_graph(path, outputs=["Idnetity"])


def test_tensorflow_runner_matches_numpy(frozen_model) -> None:
    from polytf.model_zoo import run_graphdef_with_tensorflow, time_graphdef_with_tensorflow

    path = frozen_model("odd_matmul", 1)
    graph = load_graph(path)
    weight = graph.node("Const").attr("value")
    x = np.random.default_rng(0).standard_normal((37, 53)).astype(np.float32)
    result = run_graphdef_with_tensorflow(path, {"input": x}, ["Identity"])
    assert list(result) == ["Identity"]
    np.testing.assert_allclose(result["Identity"], x @ weight, rtol=1e-5, atol=1e-5)
    by_tensor = run_graphdef_with_tensorflow(str(path), {"input:0": x}, ["Identity:0", "MatMul"])
    np.testing.assert_array_equal(by_tensor["Identity:0"], by_tensor["MatMul"])
    latencies = time_graphdef_with_tensorflow(path, {"input": x}, ["Identity"], repeats=3, warmup=1)
    assert len(latencies) == 3 and all(t > 0 for t in latencies)


def test_conv_bias_relu_against_numpy(frozen_model) -> None:
    """The TF reference itself is checked once against a direct numpy convolution."""
    from polytf.model_zoo import run_graphdef_with_tensorflow

    path = frozen_model("conv_bias_relu", 1)
    graph = load_graph(path)
    kernel, bias = graph.node("Const").attr("value"), graph.node("Const_1").attr("value")
    x = np.random.default_rng(1).standard_normal((1, 17, 19, 5)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    expected = np.zeros((1, 17, 19, 7), np.float32)
    for dy in range(3):
        for dx in range(3):
            expected += padded[:, dy : dy + 17, dx : dx + 19, :] @ kernel[dy, dx]
    expected = np.maximum(expected + bias, 0)
    result = run_graphdef_with_tensorflow(path, {"input": x}, ["Identity"])["Identity"]
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)


def test_model_zoo_cli(tmp_path) -> None:
    pytest.importorskip("tensorflow")
    from polytf.model_zoo.__main__ import main

    out = tmp_path / "sub" / "conv.pb"
    assert main(["conv_bias_relu", "--batch", "2", "-o", str(out)]) == 0
    graph = load_graph(out)
    assert graph.node("input").attr("shape") == (2, 17, 19, 5)


def test_model_zoo_cli_help() -> None:
    result = subprocess.run([sys.executable, "-m", "polytf.model_zoo", "--help"], capture_output=True, text=True, check=True)
    assert "mlp" in result.stdout and "--batch" in result.stdout


def test_missing_tensorflow_is_reported(monkeypatch) -> None:
    from polytf.model_zoo.keras_models import import_tensorflow

    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(DependencyMissingError, match=r"pip install 'polytf\[tensorflow\]'"):
        import_tensorflow()


@pytest.mark.parametrize(
    ("name", "placeholders", "ops"),
    [
        ("gpt2_block", {"input": ("int32", (1, 64))}, {"GatherV2", "MatrixBandPart", "SelectV2", "Fill", "Pow", "Tanh", "Split"}),
        ("bert_encoder", {"input": ("int32", (1, 64)), "attention_mask": ("int32", (1, 64))}, {"GatherV2", "Cast", "Erfc"}),
        ("unet", {"input": ("float32", (1, 64, 64, 3))}, {"Conv2DBackpropInput", "ResizeBilinear", "ConcatV2", "MaxPool"}),
    ],
)
def test_coverage_models_carry_the_ops_they_exist_for(frozen_model, name, placeholders, ops) -> None:
    graph = load_graph(frozen_model(name, 1))
    found = {n.name: (n.attr("dtype"), n.attr("shape")) for n in graph.placeholders}
    assert found == placeholders
    assert ops <= {n.op for n in graph.nodes.values()}
    assert graph.outputs == ("Identity:0",)


def test_zoo_writes_a_saved_model_with_its_signature(tmp_path) -> None:
    tf = pytest.importorskip("tensorflow")
    from polytf.model_zoo.saved_models import SIGNATURE_NAME, SIGNATURE_OUTPUT, write_saved_model

    directory = write_saved_model("cifar_cnn", tmp_path / "cifar")
    assert (directory / "saved_model.pb").is_file() and any((directory / "variables").iterdir())
    signature = tf.saved_model.load(str(directory)).signatures[SIGNATURE_NAME]
    assert list(signature.structured_outputs) == [SIGNATURE_OUTPUT]
    assert [spec.name for spec in signature.structured_input_signature[1].values()] == ["input"]
    with pytest.raises(ValueError, match="no SavedModel export"):
        write_saved_model("matmul", tmp_path / "m")
