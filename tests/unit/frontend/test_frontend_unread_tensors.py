"""Found by probing the frontend beside the mutation fuzzer: a large tensor in an attribute
no op reads is never decoded, and a FusedBatchNorm ``epsilon`` of the wrong kind is a
ShapeError naming the node (it reached the batch-norm folding pass as a ValueError)."""

from __future__ import annotations

import resource

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, placeholder
from tensorboard.compat.proto import graph_pb2, types_pb2

from polytf.compiler.preparation import prepare_model
from polytf.errors import ShapeError
from polytf.frontend import graph_from_graphdef
from polytf.frontend.lazy_tensor import LazyTensor
from polytf.graph import Node


def matmul_with_unread_tensor_attribute(side: int) -> graph_pb2.GraphDef:
    """``Relu(MatMul(x, w))`` whose MatMul carries a ``side x side`` one-value tensor attr."""
    graph = graph_pb2.GraphDef()
    x = graph.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    for size in (2, 4):
        x.attr["shape"].shape.dim.add(size=size)
    w = graph.node.add(name="w", op="Const")
    w.attr["dtype"].type = types_pb2.DT_FLOAT
    w.attr["value"].tensor.dtype = types_pb2.DT_FLOAT
    for size in (4, 3):
        w.attr["value"].tensor.tensor_shape.dim.add(size=size)
    w.attr["value"].tensor.float_val.append(0.5)
    matmul = graph.node.add(name="mm", op="MatMul", input=["x", "w"])
    matmul.attr["T"].type = types_pb2.DT_FLOAT
    junk = matmul.attr["junk"].tensor
    junk.dtype = types_pb2.DT_FLOAT
    for size in (side, side):
        junk.tensor_shape.dim.add(size=size)
    junk.float_val.append(1.0)
    graph.node.add(name="relu", op="Relu", input=["mm"]).attr["T"].type = types_pb2.DT_FLOAT
    return graph


def test_a_tensor_attribute_no_op_reads_is_never_decoded(tmp_path):
    graph = graph_from_graphdef(matmul_with_unread_tensor_attribute(20000))
    junk = graph.node("mm").attr("junk")
    assert isinstance(junk, LazyTensor) and junk.shape == (20000, 20000)
    np.testing.assert_array_equal(graph.node("w").attr("value"), np.full((4, 3), 0.5, np.float32))

    path = tmp_path / "junk.pb"
    path.write_bytes(matmul_with_unread_tensor_attribute(16000).SerializeToString())  # 1.02 GB decoded: under the cap
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    prepare_model(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb < 200 * 1024


def batch_norm(epsilon):
    attrs = {"is_training": False, "data_format": "NHWC"}
    if epsilon is not None:
        attrs["epsilon"] = epsilon
    parameters = [const(name, np.ones(3, np.float32)) for name in ("scale", "offset", "mean", "variance")]
    node = Node("bn", "FusedBatchNormV3", ("x:0", "scale:0", "offset:0", "mean:0", "variance:0"), attrs=attrs)
    return [placeholder("x", (1, 2, 2, 3)), *parameters, node]


@pytest.mark.parametrize("epsilon", ["x", b"\xff", (1e-3,), True])
def test_batch_norm_epsilon_must_be_a_number(epsilon):
    with pytest.raises(ShapeError, match="node 'bn' \\(FusedBatchNormV3\\) needs attribute 'epsilon' to be a number"):
        build_graph(batch_norm(epsilon), ["bn:0"])


@pytest.mark.parametrize("epsilon", [None, 1e-3, 1])
def test_batch_norm_epsilon_defaults_to_tensorflows(epsilon):
    graph = build_graph(batch_norm(epsilon), ["bn:0"])
    assert graph.type_of("bn:0").shape == (1, 2, 2, 3)
