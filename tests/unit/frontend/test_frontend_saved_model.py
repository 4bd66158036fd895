"""SavedModel directories as input: a zoo model exported with variables, compiled by polytf
from the directory, gives the outputs polytf gives for the same model frozen to a GraphDef,
keyed by the signature's output names (skipped without TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")

import polytf  # noqa: E402
from polytf.cli import main  # noqa: E402
from polytf.errors import GraphError  # noqa: E402
from polytf.frontend import load_graph  # noqa: E402
from polytf.frontend.saved_model import _renamed  # noqa: E402
from polytf.model_zoo import run_graphdef_with_tensorflow, write_model  # noqa: E402
from polytf.model_zoo.saved_models import SIGNATURE_OUTPUT, write_saved_model  # noqa: E402


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    directory = tmp_path_factory.mktemp("saved")
    return write_saved_model("cifar_cnn", directory / "cifar_cnn"), write_model("cifar_cnn", directory / "cifar_cnn.pb")


def test_placeholders_and_outputs_carry_the_signatures_names(cifar):
    saved, _ = cifar
    graph = load_graph(saved)
    assert [n.name for n in graph.placeholders] == ["input"]
    assert graph.outputs == (f"{SIGNATURE_OUTPUT}:0",)
    assert not {n.op for n in graph.nodes.values()} & {"VarHandleOp", "ReadVariableOp", "StatefulPartitionedCall"}


def test_saved_model_gives_the_frozen_graphs_outputs_bit_for_bit(cifar, tmp_path):
    saved, frozen = cifar
    x = np.random.default_rng(3).standard_normal((1, 32, 32, 3)).astype(np.float32)
    from_saved = polytf.load(saved, cache_dir=tmp_path / "cache")(input=x)
    from_frozen = polytf.load(frozen, cache_dir=tmp_path / "cache")(input=x)
    assert list(from_saved) == [SIGNATURE_OUTPUT]
    np.testing.assert_array_equal(from_saved[SIGNATURE_OUTPUT], from_frozen["Identity"])
    reference = run_graphdef_with_tensorflow(frozen, {"input": x}, ["Identity"])["Identity"]
    np.testing.assert_allclose(from_saved[SIGNATURE_OUTPUT], reference, rtol=1e-4, atol=1e-6)


def test_a_missing_signature_lists_the_available_ones(cifar):
    saved, frozen = cifar
    with pytest.raises(GraphError, match="no signature 'predict'.*serving_default"):
        load_graph(saved, signature="predict")
    with pytest.raises(GraphError, match="for SavedModel directories"):
        load_graph(frozen, signature="serving_default")


def test_cli_show_and_run_take_a_saved_model(cifar, tmp_path, capsys):
    saved, _ = cifar
    assert main(["show", str(saved), "--signature", "serving_default"]) == 0
    assert "kernels" in capsys.readouterr().out
    np.save(tmp_path / "x.npy", np.zeros((1, 32, 32, 3), np.float32))
    out = tmp_path / "out.npz"
    assert main(["run", str(saved), "--input", f"input={tmp_path / 'x.npy'}", "--output", str(out), "--cache-dir", str(tmp_path / "c")]) == 0
    assert list(np.load(out)) == [SIGNATURE_OUTPUT]


def test_renaming_moves_a_node_that_already_has_the_wanted_name_aside():
    from tensorboard.compat.proto import graph_pb2

    graph_def = graph_pb2.GraphDef()
    for name, inputs in (("x", []), ("output", ["x"]), ("Identity", ["output:0", "^x"])):
        node = graph_def.node.add(name=name, op="Identity")
        node.input.extend(inputs)
    renamed = _renamed(graph_def, {"Identity": "output", "x": "input"})
    assert [(n.name, list(n.input)) for n in renamed.node] == [("input", []), ("output_1", ["input"]), ("output", ["output_1:0", "^input"])]
