"""Small GraphDefs (text format, written with TensorFlow's protos; no TensorFlow needed) for the
export tests: a run-time gather, an output that is a placeholder passed through."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tensorboard.compat.proto import graph_pb2, types_pb2

_TYPES = {"float32": types_pb2.DT_FLOAT, "int32": types_pb2.DT_INT32}


def _placeholder(graph, name: str, dtype: str, shape: tuple[int, ...]) -> None:
    node = graph.node.add(name=name, op="Placeholder")
    node.attr["dtype"].type = _TYPES[dtype]
    for size in shape:
        node.attr["shape"].shape.dim.add(size=size)


def _const(graph, name: str, value: np.ndarray) -> None:
    node = graph.node.add(name=name, op="Const")
    node.attr["dtype"].type = node.attr["value"].tensor.dtype = _TYPES[value.dtype.name]
    for size in value.shape:
        node.attr["value"].tensor.tensor_shape.dim.add(size=size)
    node.attr["value"].tensor.tensor_content = value.tobytes()


def write_embedding_graphdef(path: Path, rows: int = 10, columns: int = 8, ids: int = 6) -> np.ndarray:
    """``out = Relu(GatherV2(table: Const [rows, columns], ids: int32 [ids], axis 0))`` and a
    second output ``ids_out = Identity(ids)`` (a placeholder passed through); returns the table."""
    table = np.random.default_rng(3).standard_normal((rows, columns)).astype(np.float32)
    graph = graph_pb2.GraphDef()
    _placeholder(graph, "ids", "int32", (ids,))
    _const(graph, "table", table)
    _const(graph, "axis", np.asarray(0, np.int32))
    gather = graph.node.add(name="gather", op="GatherV2", input=["table", "ids", "axis"])
    gather.attr["Tparams"].type = types_pb2.DT_FLOAT
    gather.attr["Tindices"].type = types_pb2.DT_INT32
    gather.attr["Taxis"].type = types_pb2.DT_INT32
    graph.node.add(name="out", op="Relu", input=["gather"]).attr["T"].type = types_pb2.DT_FLOAT
    graph.node.add(name="ids_out", op="Identity", input=["ids"]).attr["T"].type = types_pb2.DT_INT32
    path.write_bytes(graph.SerializeToString())
    return table
