"""polytf.frontend.load_graph on hand-written GraphDefs (no TensorFlow needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tensorboard.compat.proto import graph_pb2, node_def_pb2, types_pb2

from polytf.errors import GraphError
from polytf.frontend import load_graph, parse_graphdef

# Placeholder x[-1, 4] -> MatMul with a Const (one float_val repeated to fill [4, 3]) -> BiasAdd
# with a Const given as tensor_content (float32 1, 2, 3 little-endian) -> Relu; IdentityN "pair"
# of (relu, x); "second" reads "pair:1" and has a control input "^ctrl" (a NoOp).
SMALL_PBTXT = r"""
node {
  name: "x"
  op: "Placeholder"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: -1 } dim { size: 4 } } } }
}
node {
  name: "w"
  op: "Const"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr {
    key: "value"
    value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 4 } dim { size: 3 } } float_val: 0.5 } }
  }
}
node {
  name: "mm"
  op: "MatMul"
  input: "x"
  input: "w:0"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "transpose_a" value { b: false } }
  attr { key: "transpose_b" value { b: false } }
}
node {
  name: "b"
  op: "Const"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr {
    key: "value"
    value {
      tensor {
        dtype: DT_FLOAT
        tensor_shape { dim { size: 3 } }
        tensor_content: "\000\000\200?\000\000\000@\000\000@@"
      }
    }
  }
}
node {
  name: "ba"
  op: "BiasAdd"
  input: "mm"
  input: "b"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "data_format" value { s: "NHWC" } }
}
node {
  name: "relu"
  op: "Relu"
  input: "ba"
  attr { key: "T" value { type: DT_FLOAT } }
}
node { name: "ctrl" op: "NoOp" }
node {
  name: "pair"
  op: "IdentityN"
  input: "relu"
  input: "x"
  attr { key: "T" value { list { type: DT_FLOAT type: DT_FLOAT } } }
}
node {
  name: "second"
  op: "Identity"
  input: "pair:1"
  input: "^ctrl"
  attr { key: "T" value { type: DT_FLOAT } }
}
versions { producer: 1994 }
"""


def write_text(tmp_path: Path, text: str = SMALL_PBTXT, name: str = "small.pbtxt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def write_binary(tmp_path: Path, text: str = SMALL_PBTXT, name: str = "small.pb") -> Path:
    graph_def = text_format.Parse(text, graph_pb2.GraphDef())
    path = tmp_path / name
    path.write_bytes(graph_def.SerializeToString())
    return path


def check_small_graph(graph, source: Path) -> None:
    assert list(graph.nodes) == ["x", "w", "mm", "b", "ba", "relu", "ctrl", "pair", "second"]
    assert graph.source == str(source)
    assert graph.outputs == ("second:0",)
    assert graph.types == {} and graph.constants == {}
    assert [n.name for n in graph.placeholders] == ["x"]

    x = graph.node("x")
    assert x.attrs == {"dtype": "float32", "shape": (None, 4)}
    assert x.inputs == () and x.control_inputs == ()

    w = graph.node("w").attr("value")
    assert isinstance(w, np.ndarray) and w.dtype == np.float32 and w.shape == (4, 3)
    np.testing.assert_array_equal(w, np.full((4, 3), 0.5, np.float32))

    b = graph.node("b").attr("value")
    assert b.dtype == np.float32 and b.shape == (3,)
    np.testing.assert_array_equal(b, [1.0, 2.0, 3.0])

    mm = graph.node("mm")
    assert mm.op == "MatMul"
    assert mm.inputs == ("x:0", "w:0")
    assert mm.attrs == {"T": "float32", "transpose_a": False, "transpose_b": False}
    assert graph.node("ba").inputs == ("mm:0", "b:0")
    assert graph.node("ba").attr("data_format") == "NHWC"
    assert graph.node("pair").attr("T") == ("float32", "float32")

    second = graph.node("second")
    assert second.inputs == ("pair:1",)
    assert second.control_inputs == ("ctrl",)
    assert graph.producer("pair:1").name == "pair"


def test_text_graph(tmp_path: Path) -> None:
    path = write_text(tmp_path)
    check_small_graph(load_graph(path), path)


def test_binary_graph_round_trip(tmp_path: Path) -> None:
    path = write_binary(tmp_path)
    check_small_graph(load_graph(path), path)
    check_small_graph(load_graph(str(path)), path)


def test_text_detected_by_content_with_pb_suffix(tmp_path: Path) -> None:
    path = write_text(tmp_path, name="actually_text.pb")
    check_small_graph(load_graph(path), path)


def test_binary_with_pbtxt_suffix(tmp_path: Path) -> None:
    path = write_binary(tmp_path, name="actually_binary.pbtxt")
    check_small_graph(load_graph(path), path)


def test_topological_order_keeps_file_order_where_possible(tmp_path: Path) -> None:
    text = """
    node { name: "r" op: "Relu" input: "a" }
    node { name: "p" op: "Placeholder" }
    node { name: "q" op: "Placeholder" }
    node { name: "a" op: "AddV2" input: "p" input: "q" }
    node { name: "n" op: "Neg" input: "q" input: "^r" }
    """
    graph = load_graph(write_text(tmp_path, text))
    assert list(graph.nodes) == ["p", "q", "a", "r", "n"]
    assert graph.outputs == ("n:0",)


def test_default_outputs_exclude_const_noop_placeholder(tmp_path: Path) -> None:
    text = """
    node { name: "p" op: "Placeholder" }
    node { name: "unused_const" op: "Const" }
    node { name: "noop" op: "NoOp" }
    node { name: "a" op: "Relu" input: "p" }
    node { name: "b" op: "Neg" input: "p" }
    """
    graph = load_graph(write_text(tmp_path, text))
    assert graph.outputs == ("a:0", "b:0")


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (["relu"], ("relu:0",)),
        (["pair:1"], ("pair:1",)),
        (["relu:0", "second"], ("relu:0", "second:0")),
        ("mm", ("mm:0",)),
    ],
)
def test_explicit_outputs(tmp_path: Path, requested, expected) -> None:
    graph = load_graph(write_text(tmp_path), outputs=requested)
    assert graph.outputs == expected


def test_unknown_output_lists_candidates(tmp_path: Path) -> None:
    path = write_text(tmp_path)
    with pytest.raises(GraphError) as info:
        load_graph(path, outputs=["rleu"])
    message = str(info.value)
    assert "rleu" in message and str(path) in message
    assert "'relu'" in message and "'second'" in message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            'node { name: "a" op: "Relu" input: "b" } node { name: "b" op: "Relu" input: "a" }',
            ["cycle", "'a'", "'b'"],
        ),
        ('node { name: "a" op: "Relu" input: "ghost:0" }', ["'ghost'", "'a'", "not exist"]),
        ('node { name: "a" op: "Relu" input: "^ghost" }', ["'ghost'"]),
        (
            'node { name: "a" op: "Placeholder" } node { name: "a" op: "Relu" input: "a" }',
            ["duplicate", "'a'"],
        ),
        ('node { name: "a" op: "Placeholder" }', ["no output"]),
    ],
)
def test_inconsistent_graphs(tmp_path: Path, text: str, words: list[str]) -> None:
    path = write_text(tmp_path, text, "bad.pbtxt")
    with pytest.raises(GraphError) as info:
        load_graph(path)
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message


def _assert_bad_file(path: Path) -> None:
    with pytest.raises(GraphError) as info:
        load_graph(path)
    message = str(info.value)
    assert str(path) in message
    assert "GraphDef" in message
    # Not chained to a protobuf error: raised outside an except block, or `from None`.
    error = info.value
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__


def test_missing_file(tmp_path: Path) -> None:
    _assert_bad_file(tmp_path / "missing.pb")


def test_directory(tmp_path: Path) -> None:
    folder = tmp_path / "a_folder"
    folder.mkdir()
    _assert_bad_file(folder)


def test_saved_model_directory(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "saved_model.pb").write_bytes(b"\x00")
    with pytest.raises(GraphError, match="SavedModel"):
        load_graph(folder)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("empty.pb", b""),
        ("blank.pbtxt", b"  \n\n"),
        ("random.pb", np.random.default_rng(0).bytes(2000)),
        ("random_small.pb", np.random.default_rng(1).bytes(7)),
        ("photo.pb", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01" + np.random.default_rng(2).bytes(500)),
        ("photo.jpg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01" + np.random.default_rng(3).bytes(500)),
        ("model.pb", b"import numpy as np\n\ndef main():\n    print('hello')\n"),
        ("model.py", b'"""A docstring."""\nimport os\nprint(os.getcwd())\n'),
        ("model.pbtxt", b"node { name: 'a' op: 'Relu' input: 'b' \n"),  # unbalanced braces
        ("wrong_field.pbtxt", b'node { name: "a" operation: "Relu" }'),
        ("weights.h5", b"\x89HDF\r\n\x1a\n" + bytes(100)),
        ("model.keras", b"PK\x03\x04" + bytes(100)),
        ("no_op.pb", graph_pb2.GraphDef(node=[node_def_pb2.NodeDef(name="a")]).SerializeToString()),
        ("no_nodes.pb", graph_pb2.GraphDef(versions={"producer": 1}).SerializeToString()),
        ("json.pb", b'{"node": [{"name": "a", "op": "Relu"}]}'),
    ],
)
def test_bad_files(tmp_path: Path, name: str, content: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    _assert_bad_file(path)


def test_every_truncation_of_a_binary_graph(tmp_path: Path) -> None:
    """Cutting the file anywhere inside a node or the versions field must give a GraphError;
    a cut exactly between top-level fields leaves a shorter but well-formed GraphDef, which
    may load (if consistent) or give a GraphError -- never another exception."""
    graph_def = text_format.Parse(SMALL_PBTXT, graph_pb2.GraphDef())
    data = graph_def.SerializeToString()
    boundaries = {0}
    offset = 0
    for node in graph_def.node:
        offset += len(graph_pb2.GraphDef(node=[node]).SerializeToString())
        boundaries.add(offset)
    path = tmp_path / "cut.pb"
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        if cut in boundaries:
            try:
                load_graph(path)
            except GraphError as error:
                assert str(path) in str(error)
        else:
            _assert_bad_file(path)


def test_parse_graphdef_returns_proto(tmp_path: Path) -> None:
    graph_def = parse_graphdef(write_text(tmp_path))
    assert isinstance(graph_def, graph_pb2.GraphDef)
    assert len(graph_def.node) == 9


def test_frontend_does_not_import_tensorflow() -> None:
    code = "import sys, polytf.frontend, polytf.model_zoo; assert 'tensorflow' not in sys.modules, 'imported TF'"
    subprocess.run([sys.executable, "-c", code], check=True)


def _large_graph_def() -> tuple[graph_pb2.GraphDef, np.ndarray]:
    """The small graph and a 2.4 MB constant "big"."""
    graph_def = text_format.Parse(SMALL_PBTXT, graph_pb2.GraphDef())
    weights = np.random.default_rng(4).standard_normal((3, 200_000)).astype("<f4")
    big = graph_def.node.add(name="big", op="Const")
    big.attr["dtype"].type = types_pb2.DT_FLOAT
    tensor = big.attr["value"].tensor
    tensor.dtype = types_pb2.DT_FLOAT
    tensor.tensor_shape.dim.add(size=3)
    tensor.tensor_shape.dim.add(size=200_000)
    tensor.tensor_content = weights.tobytes()
    return graph_def, weights


def test_large_binary_graph_is_parsed(tmp_path: Path) -> None:
    graph_def, weights = _large_graph_def()
    path = tmp_path / "large.pb"
    path.write_bytes(graph_def.SerializeToString())
    assert parse_graphdef(path) == graph_def
    value = load_graph(path, outputs=["big"]).node("big").attr("value")
    assert value.dtype == np.float32 and value.shape == (3, 200_000)
    np.testing.assert_array_equal(value, weights)


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("blank.pb", b" \t\r\n\x0b\x0c" * 200_000, "the file is empty"),
        ("random.pb", np.random.default_rng(5).bytes(1_500_000), "not a valid GraphDef"),
        ("cut.pb", _large_graph_def()[0].SerializeToString()[:-1000], "truncated or corrupted"),
    ],
)
def test_large_bad_files_are_read_and_reported(tmp_path: Path, name: str, content: bytes, words: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    _assert_bad_file(path)
    with pytest.raises(GraphError, match=words):
        load_graph(path)
