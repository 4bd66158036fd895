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
