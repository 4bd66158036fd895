"""Small binary GraphDefs for ``polytf ops --model`` (how each op of a model runs), written with
TensorFlow's protos (no TensorFlow needed), in the manner of :mod:`graphdef_builders`.

Each ``write_*`` function writes one model to ``path`` and its docstring says what each node
should be reported as.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tensorboard.compat.proto import graph_pb2, types_pb2

DTYPES = {np.dtype(np.float32): types_pb2.DT_FLOAT, np.dtype(np.int32): types_pb2.DT_INT32}


class GraphDefWriter:
    """Adds nodes to a GraphDef: ``placeholder``, ``constant`` and ``node`` (any op), then ``write``."""

    def __init__(self) -> None:
        self.graph = graph_pb2.GraphDef()

    def placeholder(self, name: str, shape: tuple[int, ...]) -> str:
        node = self.graph.node.add(name=name, op="Placeholder")
        node.attr["dtype"].type = types_pb2.DT_FLOAT
        for size in shape:
            node.attr["shape"].shape.dim.add(size=size)
        return name

    def constant(self, name: str, value) -> str:
        value = np.asarray(value)
        value = value.astype(np.float32) if value.dtype.kind == "f" else value.astype(np.int32)
        node = self.graph.node.add(name=name, op="Const")
        node.attr["dtype"].type = node.attr["value"].tensor.dtype = DTYPES[value.dtype]
        for size in value.shape:
            node.attr["value"].tensor.tensor_shape.dim.add(size=size)
        node.attr["value"].tensor.tensor_content = value.tobytes()
        return name

    def node(self, name: str, op: str, *inputs: str, output_shape: tuple[int, ...] | None = None, **attrs) -> str:
        """A node reading ``inputs`` (``"name"``, ``"name:1"``, ``"^name"``); ``attrs``: ints, strings
        and int lists; ``output_shape`` sets ``_output_shapes`` (as ``add_shapes=True`` does)."""
        node = self.graph.node.add(name=name, op=op, input=list(inputs))
        for key, value in attrs.items():
            if isinstance(value, str):
                node.attr[key].s = value.encode()
            elif isinstance(value, int):
                node.attr[key].i = value
            else:
                node.attr[key].list.i.extend(value)
        if output_shape is not None:
            shape = node.attr["_output_shapes"].list.shape.add()
            for size in output_shape:
                shape.dim.add(size=size)
        return name

    def write(self, path: Path) -> Path:
        path.write_bytes(self.graph.SerializeToString())
        return path


def write_unsupported_in_the_middle(path: Path, output_shape: tuple[int, ...] | None = None) -> Path:
    """``x [1, 8, 8, 3] -> Conv2D -> Relu -> Reshape [1, 256] -> u: Erfinv -> MatMul -> out: Identity``.

    Erfinv is not in the op table; Conv2D and Relu are compiled; Placeholder, the constants
    and Reshape need no code; MatMul is compiled when the Erfinv's output shape is known
    (``output_shape``, or ``--input u:1,256``), else not reached.
    """
    rng = np.random.default_rng(0)
    graph = GraphDefWriter()
    graph.placeholder("x", (1, 8, 8, 3))
    graph.constant("filter", rng.standard_normal((3, 3, 3, 4)))
    graph.node("conv", "Conv2D", "x", "filter", strides=[1, 1, 1, 1], padding="SAME")
    graph.node("relu", "Relu", "conv")
    graph.constant("flat_shape", np.array([1, 256]))
    graph.node("flat", "Reshape", "relu", "flat_shape")
    graph.node("u", "Erfinv", "flat", output_shape=output_shape)
    graph.constant("weights", rng.standard_normal((256, 5)))
    graph.node("dense", "MatMul", "u", "weights")
    graph.node("out", "Identity", "dense")
    return graph.write(path)


def write_shape_error_in_the_middle(path: Path) -> Path:
    """``x [2, 3] -> Relu -> bad: MatMul(., weights [4, 5]) -> Exp``, and ``side = Tanh(x)``.

    The MatMul's inner dimensions differ (3 != 4): it is unsupported with shape inference's
    message; Exp is not reached; Relu and Tanh are compiled.
    """
    graph = GraphDefWriter()
    graph.placeholder("x", (2, 3))
    graph.node("relu", "Relu", "x")
    graph.constant("weights", np.ones((4, 5)))
    graph.node("bad", "MatMul", "relu", "weights")
    graph.node("exp", "Exp", "bad")
    graph.node("side", "Tanh", "x")
    return graph.write(path)


def write_constant_subgraph(path: Path) -> Path:
    """``out = AddV2(x [4], Mul(a, b))`` with constants ``a``, ``b``: constant folding folds the Mul
    (one Const made by constant folding); AddV2 is compiled."""
    graph = GraphDefWriter()
    graph.placeholder("x", (4,))
    graph.constant("a", np.full(4, 2.0))
    graph.constant("b", np.arange(4.0))
    graph.node("ab", "Mul", "a", "b")
    graph.node("out", "AddV2", "x", "ab")
    return graph.write(path)


def write_no_code_ops(path: Path) -> Path:
    """``x [4] -> view: Identity -> sum: AddV2(view, c) ^order -> out: Identity``, ``order: NoOp``.

    Placeholder, Const, both Identity nodes and the NoOp need no code; AddV2 is compiled (it
    takes the name of the output Identity, as identity removal does).
    """
    graph = GraphDefWriter()
    graph.placeholder("x", (4,))
    graph.constant("c", np.ones(4))
    graph.node("order", "NoOp")
    graph.node("view", "Identity", "x")
    graph.node("sum", "AddV2", "view", "c", "^order")
    graph.node("out", "Identity", "sum")
    return graph.write(path)
