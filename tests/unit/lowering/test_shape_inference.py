import numpy as np
import pytest

from polytf.errors import GraphError, ShapeError, UnsupportedOpError
from polytf.graph import Graph, Node, TensorType
from polytf.lowering.shape_inference import infer_types


def dense_graph(batch=None, extra=()):
    nodes = [
        Node("x", "Placeholder", attrs={"shape": (batch, 784), "dtype": "float32"}),
        Node("w", "Const", attrs={"value": np.zeros((784, 10), np.float32), "dtype": "float32"}),
        Node("b", "Const", attrs={"value": np.zeros((10,), np.float32), "dtype": "float32"}),
        Node("mm", "MatMul", ("x:0", "w:0")),
        Node("bias", "BiasAdd", ("mm:0", "b:0"), attrs={"data_format": "NHWC"}),
        Node("relu", "Relu", ("bias:0",)),
        *extra,
    ]
    return Graph(nodes={n.name: n for n in nodes}, outputs=("relu:0",))


def test_dense_graph_types():
    graph = infer_types(dense_graph(batch=2))
    assert graph.types["x:0"] == TensorType((2, 784))
    assert graph.types["mm:0"] == TensorType((2, 10))
    assert graph.types["bias:0"] == TensorType((2, 10))
    assert graph.types["relu:0"] == TensorType((2, 10))
    assert set(graph.constants) == {"w:0", "b:0"}
    assert graph.constants["w:0"].shape == (784, 10)


def test_unknown_batch_needs_input_shapes():
    with pytest.raises(
        ShapeError, match=r"placeholder 'x' has unknown dimension\(s\) float32\[\?, 784\].*--input x:1,784"
    ) as info:
        infer_types(dense_graph())
    assert "input_shapes={'x': (1, 784)}" in str(info.value)
    graph = infer_types(dense_graph(), input_shapes={"x": (3, 784)})
    assert graph.types["relu:0"] == TensorType((3, 10))


def test_input_shapes_conflicts():
    with pytest.raises(ShapeError, match="rank"):
        infer_types(dense_graph(), input_shapes={"x": (784,)})
    with pytest.raises(ShapeError, match="conflicts"):
        infer_types(dense_graph(), input_shapes={"x": (3, 785)})
    with pytest.raises(ShapeError, match="not a placeholder"):
        infer_types(dense_graph(), input_shapes={"w": (784, 10)})


def test_unknown_rank_placeholder():
    nodes = [Node("x", "Placeholder", attrs={"shape": None, "dtype": "float32"}), Node("r", "Relu", ("x:0",))]
    graph = Graph(nodes={n.name: n for n in nodes}, outputs=("r:0",))
    with pytest.raises(ShapeError, match="unknown rank.*--input x:"):
        infer_types(graph)
    assert infer_types(graph, input_shapes={"x": (2, 3)}).types["r:0"] == TensorType((2, 3))


def test_unsupported_ops_are_all_listed():
    extra = (Node("t", "Atan2", ("relu:0",)), Node("g", "Gather", ("t:0", "w:0")))
    with pytest.raises(UnsupportedOpError) as info:
        infer_types(dense_graph(batch=1, extra=extra))
    assert info.value.nodes == [("t", "Atan2"), ("g", "Gather")]
    assert "'t'" in str(info.value) and "'g'" in str(info.value)


def test_shape_errors_name_the_node():
    nodes = [
        Node("x", "Placeholder", attrs={"shape": (2, 3), "dtype": "float32"}),
        Node("y", "Placeholder", attrs={"shape": (4,), "dtype": "float32"}),
        Node("add", "AddV2", ("x:0", "y:0")),
    ]
    graph = Graph(nodes={n.name: n for n in nodes}, outputs=("add:0",))
    with pytest.raises(ShapeError, match=r"while inferring shapes of node 'add' \(AddV2\): .*broadcast"):
        infer_types(graph)


def test_reshape_constant_folding_and_views():
    nodes = [
        Node("x", "Placeholder", attrs={"shape": (None, 2, 3), "dtype": "float32"}),
        Node("s", "Const", attrs={"value": np.array([-1, 6], np.int32), "dtype": "int32"}),
        Node("r", "Reshape", ("x:0", "s:0")),
        Node("c", "Const", attrs={"value": np.arange(6, dtype=np.float32).reshape(1, 6), "dtype": "float32"}),
        Node("cs", "Reshape", ("c:0", "s:0")),
        Node("sq", "Squeeze", ("cs:0",), attrs={"squeeze_dims": ()}),
        Node("add", "AddV2", ("r:0", "sq:0")),
        Node("id", "Identity", ("add:0",)),
        Node("noop", "NoOp", control_inputs=("id",)),
    ]
    graph = infer_types(Graph(nodes={n.name: n for n in nodes}, outputs=("id:0",)), input_shapes={"x:0": (4, 2, 3)})
    assert graph.types["r:0"] == TensorType((4, 6))
    assert graph.types["sq:0"] == TensorType((6,))
    assert graph.types["id:0"] == TensorType((4, 6))
    np.testing.assert_array_equal(graph.constants["sq:0"], np.arange(6, dtype=np.float32))
    assert "r:0" not in graph.constants and "noop:0" not in graph.types


def test_unsupported_dtypes_are_rejected():
    nodes = [
        Node("x", "Placeholder", attrs={"shape": (2,), "dtype": "int32"}),
        Node("r", "Relu", ("x:0",)),
    ]
    # int32 tensors exist at run time, but Relu computes float32 only
    with pytest.raises(ShapeError, match=r"node 'r' \(Relu\) reads the run-time tensor 'x:0' of dtype int32"):
        infer_types(Graph(nodes={n.name: n for n in nodes}, outputs=("r:0",)))
    nodes = [
        Node("x", "Placeholder", attrs={"shape": (2,), "dtype": "float32"}),
        Node("c", "Const", attrs={"value": np.ones(2, np.int32), "dtype": "int32"}),
        Node("add", "AddV2", ("x:0", "c:0")),
    ]
    with pytest.raises(ShapeError, match="'add'"):
        infer_types(Graph(nodes={n.name: n for n in nodes}, outputs=("add:0",)))
    nodes = [Node("x", "Placeholder", attrs={"shape": (2,), "dtype": "float64"}), Node("r", "Relu", ("x:0",))]
    with pytest.raises(ShapeError, match="placeholder 'x'.*float64"):
        infer_types(Graph(nodes={n.name: n for n in nodes}, outputs=("r:0",)))


def test_missing_input_is_a_graph_error():
    nodes = [Node("r", "Relu", ("nowhere:0",))]
    with pytest.raises(GraphError, match="nowhere:0"):
        infer_types(Graph(nodes={n.name: n for n in nodes}, outputs=("r:0",)))
