"""Long element-wise chains as GraphDefs, built from the protos alone (no TensorFlow):
the models that measure how compile time grows with a graph's size.

``x[1, width] -> op_0 -> op_1 -> ... -> op_{n-1} -> Identity``, where ``op_i`` cycles
through ``kinds``; ``AddV2`` and ``Mul`` take a constant vector ``[width]``; with
``fanout``, every fourth node also feeds a ``Relu`` that is a graph output, so fusion
groups have outputs in the middle.
"""

from __future__ import annotations

import numpy as np
from tensorboard.compat.proto import graph_pb2, types_pb2

#: ops a chain may use, with their numpy meaning (TF op definitions, math_ops.cc)
CHAIN_OPS = {
    "Relu": lambda x, c: np.maximum(x, 0),
    "Tanh": lambda x, c: np.tanh(x),
    "AddV2": lambda x, c: x + c,
    "Mul": lambda x, c: x * c,
}


def _constant(index: int, width: int) -> np.ndarray:
    return np.full(width, 0.5 + 0.1 * (index % 7), dtype=np.float32)


def elementwise_chain(length: int, kinds: tuple[str, ...] = ("Relu",), width: int = 64, fanout: bool = False) -> graph_pb2.GraphDef:
    """The chain GraphDef (placeholder ``x``, outputs ``Identity`` and, with ``fanout``, ``side<i>``).

    Raises:
        ValueError: an op not in :data:`CHAIN_OPS`, or a length below 1.
    """
    if length < 1 or any(kind not in CHAIN_OPS for kind in kinds):
        raise ValueError(f"a chain needs length >= 1 and ops from {sorted(CHAIN_OPS)}")
    graph = graph_pb2.GraphDef()
    x = graph.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    x.attr["shape"].shape.dim.add(size=1)
    x.attr["shape"].shape.dim.add(size=width)
    previous = "x"
    for index in range(length):
        kind = kinds[index % len(kinds)]
        inputs = [previous]
        if kind in ("AddV2", "Mul"):
            constant = graph.node.add(name=f"c{index}", op="Const")
            constant.attr["dtype"].type = types_pb2.DT_FLOAT
            tensor = constant.attr["value"].tensor
            tensor.dtype = types_pb2.DT_FLOAT
            tensor.tensor_shape.dim.add(size=width)
            tensor.tensor_content = _constant(index, width).tobytes()
            inputs.append(constant.name)
        node = graph.node.add(name=f"n{index}", op=kind, input=inputs)
        node.attr["T"].type = types_pb2.DT_FLOAT
        if fanout and index % 4 == 0:
            side = graph.node.add(name=f"side{index}", op="Relu", input=[node.name])
            side.attr["T"].type = types_pb2.DT_FLOAT
        previous = node.name
    graph.node.add(name="Identity", op="Identity", input=[previous]).attr["T"].type = types_pb2.DT_FLOAT
    return graph


def chain_reference(x: np.ndarray, length: int, kinds: tuple[str, ...] = ("Relu",)) -> np.ndarray:
    """What ``Identity`` of :func:`elementwise_chain` computes, in numpy (float32)."""
    value = np.asarray(x, np.float32)
    for index in range(length):
        kind = kinds[index % len(kinds)]
        value = CHAIN_OPS[kind](value, _constant(index, value.shape[-1])).astype(np.float32)
    return value


__all__ = ["CHAIN_OPS", "elementwise_chain", "chain_reference"]
