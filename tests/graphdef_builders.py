"""Small binary GraphDefs written with TensorFlow's protos (no TensorFlow needed), shared by
the tests that need a model file on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tensorboard.compat.proto import graph_pb2, types_pb2


def write_matmul_graphdef(path: Path, m: int, k: int, n: int, seed: int = 0) -> np.ndarray:
    """Write ``mm = MatMul(x: float32 [m, k], w: Const float32 [k, n])`` to ``path``.

    Returns:
        ``w``, standard normal values drawn with ``seed``.
    """
    weights = np.random.default_rng(seed).standard_normal((k, n)).astype(np.float32)
    graph = graph_pb2.GraphDef()
    x = graph.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    for size in (m, k):
        x.attr["shape"].shape.dim.add(size=size)
    w = graph.node.add(name="w", op="Const")
    w.attr["dtype"].type = w.attr["value"].tensor.dtype = types_pb2.DT_FLOAT
    for size in (k, n):
        w.attr["value"].tensor.tensor_shape.dim.add(size=size)
    w.attr["value"].tensor.tensor_content = weights.tobytes()
    graph.node.add(name="mm", op="MatMul", input=["x", "w"]).attr["T"].type = types_pb2.DT_FLOAT
    path.write_bytes(graph.SerializeToString())
    return weights


def write_dense_chain_graphdef(path: Path, widths: tuple[int, ...], rows: int = 3, seed: int = 0) -> list[np.ndarray]:
    """Write ``h0 = x: float32 [rows, widths[0]]``, ``h{i+1} = Relu(MatMul(h{i}, w{i}))`` with
    ``w{i}: Const [widths[i], widths[i+1]]``, output ``h{len(widths)-1}`` (a layer of the same
    widths as another is an identical kernel).

    Returns:
        The weights, standard normal values drawn with ``seed``.
    """
    rng = np.random.default_rng(seed)
    graph = graph_pb2.GraphDef()
    x = graph.node.add(name="h0", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    for size in (rows, widths[0]):
        x.attr["shape"].shape.dim.add(size=size)
    weights = []
    for layer, (k, n) in enumerate(zip(widths, widths[1:])):
        value = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        weights.append(value)
        w = graph.node.add(name=f"w{layer}", op="Const")
        w.attr["dtype"].type = w.attr["value"].tensor.dtype = types_pb2.DT_FLOAT
        for size in (k, n):
            w.attr["value"].tensor.tensor_shape.dim.add(size=size)
        w.attr["value"].tensor.tensor_content = value.tobytes()
        graph.node.add(name=f"mm{layer}", op="MatMul", input=[f"h{layer}", f"w{layer}"]).attr["T"].type = types_pb2.DT_FLOAT
        graph.node.add(name=f"h{layer + 1}", op="Relu", input=[f"mm{layer}"]).attr["T"].type = types_pb2.DT_FLOAT
    path.write_bytes(graph.SerializeToString())
    return weights
