"""Host fallback: a node whose op has a numpy reference but no lowering (or a lowering that
fails for it) runs on the host between compiled kernels; ``fallback=False`` refuses it.

The ops under test are added to the op table by a fixture (and removed after): ``TestHostCube``
(reference ``x ** 3``, no lowering) and ``TestFailingLowering`` (reference ``x + 1``, a
lowering that raises ShapeError)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import polytf
from polytf.cli import main
from polytf.compiler.model_source import ModelSource
from polytf.compiler.preparation import prepare_model
from polytf.errors import ShapeError, UnsupportedOpError
from polytf.lowering.host_fallback import HostExecutionError
from polytf.ops import ELEMENTWISE, Arity, OpDefinition
from polytf.ops.table import OP_TABLE

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


def _same_type(node, input_types, input_constants):
    return (input_types[0],)


def _failing_lowering(node, inputs, outputs, context):
    raise ShapeError(f"node '{node.name}': this attribute combination has no lowering")


@pytest.fixture
def host_ops(monkeypatch):
    definitions = [
        OpDefinition("TestHostCube", ELEMENTWISE, _same_type, lambda node, x: (np.asarray(x[0], np.float32) ** 3,), None, arity=Arity(1, 1)),
        OpDefinition("TestFailingLowering", ELEMENTWISE, _same_type, lambda node, x: (np.asarray(x[0], np.float32) + 1,), _failing_lowering, arity=Arity(1, 1)),
        OpDefinition("TestWrongShape", ELEMENTWISE, _same_type, lambda node, x: (np.zeros(7, np.float32),), None, arity=Arity(1, 1)),
    ]
    for definition in definitions:
        monkeypatch.setitem(OP_TABLE, definition.op, definition)


def _pbtxt(middle_op: str, second_op: str = "Relu") -> str:
    weights = ", ".join(f"{v:.1f}" for v in W.reshape(-1))
    return f"""
node {{ name: "x" op: "Placeholder" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }}
  attr {{ key: "shape" value {{ shape {{ dim {{ size: 2 }} dim {{ size: 4 }} }} }} }} }}
node {{ name: "w" op: "Const" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }}
  attr {{ key: "value" value {{ tensor {{ dtype: DT_FLOAT tensor_shape {{ dim {{ size: 4 }} dim {{ size: 3 }} }}
  float_val: [{weights}] }} }} }} }}
node {{ name: "mm" op: "MatMul" input: "x" input: "w" }}
node {{ name: "middle" op: "{middle_op}" input: "mm" }}
node {{ name: "out" op: "{second_op}" input: "middle" }}
node {{ name: "side" op: "{middle_op}" input: "x" }}
"""


@pytest.fixture
def model_path(tmp_path):
    def write(middle_op: str, second_op: str = "Relu"):
        path = tmp_path / f"{middle_op}.pbtxt"
        path.write_text(_pbtxt(middle_op, second_op))
        return path

    return write


def test_a_node_without_lowering_runs_on_the_host_between_kernels(host_ops, model_path, tmp_path):
    model = polytf.load(model_path("TestHostCube"), cache_dir=tmp_path / "cache", outputs=["out", "side"])
    assert [(n.name, n.op) for n in model.host_nodes] == [("middle", "TestHostCube"), ("side", "TestHostCube")]
    assert "no lowering" in model.host_nodes[0].reason
    assert len(model.kernels) == 2  # MatMul and Relu compiled; the cubes are not
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    result = model(x=x)
    np.testing.assert_allclose(result["out"], np.maximum((x @ W) ** 3, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result["side"], x**3, rtol=1e-6)


def test_fallback_off_lists_the_host_nodes(host_ops, model_path, tmp_path):
    with pytest.raises(UnsupportedOpError) as raised:
        polytf.load(model_path("TestHostCube"), cache_dir=tmp_path / "cache", outputs=["out", "side"], fallback=False)
    assert {name for name, _ in raised.value.nodes} == {"middle", "side"}


def test_a_lowering_that_fails_sends_its_node_to_the_host(host_ops, model_path, tmp_path):
    path = model_path("TestFailingLowering")
    prepared = prepare_model(ModelSource(path, outputs=["out"]))
    (host,) = prepared.host_nodes
    assert host.name == "middle" and "lowering failed" in host.reason and "no lowering" in host.reason
    model = polytf.load(path, cache_dir=tmp_path / "cache", outputs=["out"])
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(model(x=x)["out"], np.maximum(x @ W + 1, 0), rtol=1e-5, atol=1e-6)
    with pytest.raises(UnsupportedOpError, match="middle"):
        prepare_model(ModelSource(path, outputs=["out"]), fallback=False)


def test_a_host_result_of_the_wrong_shape_is_a_clear_error(host_ops, model_path, tmp_path):
    model = polytf.load(model_path("TestWrongShape"), cache_dir=tmp_path / "cache", outputs=["out"])
    with pytest.raises(HostExecutionError, match="node 'middle' .*returned float32\\[7\\].*float32\\[2, 3\\]"):
        model(x=np.zeros((2, 4), np.float32))


def test_host_steps_are_reentrant(host_ops, model_path, tmp_path):
    model = polytf.load(model_path("TestHostCube"), cache_dir=tmp_path / "cache", outputs=["out"])
    inputs = [np.random.default_rng(seed).standard_normal((2, 4)).astype(np.float32) for seed in range(8)]
    expected = [model(x=x)["out"] for x in inputs]
    results = [None] * len(inputs)

    def call(i):
        for _ in range(20):
            results[i] = model(x=inputs[i])["out"]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


def test_cli_show_names_host_nodes_and_no_fallback_refuses(host_ops, model_path, capsys):
    path = model_path("TestHostCube")
    assert main(["show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "on the host" in shown and "node 'middle' (TestHostCube)" in shown
    assert main(["show", str(path), "--passes"]) == 0
    assert "runs on the host: node 'side' (TestHostCube)" in capsys.readouterr().out
    assert main(["show", str(path), "--no-fallback"]) == 1
    captured = capsys.readouterr()
    assert "node 'middle' (op TestHostCube)" in captured.out + captured.err


def test_tune_skips_host_nodes_and_reports_them(host_ops, model_path, tmp_path):
    report = polytf.tune(model_path("TestHostCube"), trials=1, cache_dir=tmp_path / "cache", outputs=["out"])
    assert [n.name for n in report.host_nodes] == ["middle"]
    assert {row.kernel for row in report.kernels} and not any("middle" in row.kernel for row in report.kernels)


def test_a_tensorflow_op_with_only_a_reference_runs_on_the_host_and_matches_tensorflow(tmp_path, capsys):
    """``TopKV2`` (a sort: no affine loop nest) has a numpy reference but no lowering: it runs
    on the host between the compiled MatMul and the compiled softmax, both of its outputs
    read by compiled kernels; ``polytf show`` names it, and --no-fallback refuses it."""
    tf = pytest.importorskip("tensorflow")
    from polytf.model_zoo.freeze import freeze_to_graphdef
    from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow

    weights = tf.constant(np.random.default_rng(1).standard_normal((5, 9)).astype(np.float32))

    def model(x):
        values, indices = tf.math.top_k(tf.matmul(x, weights), k=3)
        return tf.nn.softmax(values) * tf.cast(indices, tf.float32)

    path = tmp_path / "top_k.pb"
    path.write_bytes(freeze_to_graphdef(tf.function(model), [("x", (4, 5))]).SerializeToString())
    compiled = polytf.load(path, cache_dir=tmp_path / "cache")
    assert [(node.name, node.op) for node in compiled.host_nodes] == [("TopKV2", "TopKV2")]
    assert "no lowering" in compiled.host_nodes[0].reason and len(compiled.kernels) >= 2
    x = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    (name,) = compiled.output_names
    expected = run_graphdef_with_tensorflow(path, {"x": x}, [name])[name]
    np.testing.assert_allclose(compiled(x=x)[name], expected, rtol=1e-5, atol=1e-6)
    assert main(["show", str(path)]) == 0
    assert "runs on the host: node 'TopKV2' (TopKV2)" in capsys.readouterr().out
    assert main(["show", str(path), "--no-fallback"]) == 1
    assert "TopKV2" in "".join(capsys.readouterr())
    with pytest.raises(UnsupportedOpError, match="TopKV2"):
        polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
