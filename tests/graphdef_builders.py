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


def _const(graph: graph_pb2.GraphDef, name: str, value: np.ndarray) -> None:
    node = graph.node.add(name=name, op="Const")
    node.attr["dtype"].type = node.attr["value"].tensor.dtype = types_pb2.DT_FLOAT
    for size in value.shape:
        node.attr["value"].tensor.tensor_shape.dim.add(size=size)
    node.attr["value"].tensor.tensor_content = value.astype(np.float32).tobytes()


def write_conv_graphdef(
    path: Path,
    image: tuple[int, int, int],
    filters: int,
    window: int,
    stride: int,
    padding: str,
    pool: bool = False,
    seed: int = 0,
) -> None:
    """Write ``out = Relu(BiasAdd(Conv2D(x: float32 [-1, *image] (NHWC, a None batch), w:
    Const [window, window, image[2], filters], strides 1 s s 1, padding), b))``, then a 2x2
    max pool of stride 2 (``padding``) when ``pool``; weights standard normal from ``seed``."""
    rng = np.random.default_rng(seed)
    graph = graph_pb2.GraphDef()
    x = graph.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    for size in (-1, *image):
        x.attr["shape"].shape.dim.add(size=size)
    _const(graph, "w", rng.standard_normal((window, window, image[2], filters)) / np.sqrt(window * window * image[2]))
    _const(graph, "b", rng.standard_normal(filters))
    conv = graph.node.add(name="conv", op="Conv2D", input=["x", "w"])
    conv.attr["T"].type = types_pb2.DT_FLOAT
    conv.attr["strides"].list.i.extend([1, stride, stride, 1])
    conv.attr["padding"].s = padding.encode()
    graph.node.add(name="bias", op="BiasAdd", input=["conv", "b"]).attr["T"].type = types_pb2.DT_FLOAT
    graph.node.add(name="relu", op="Relu", input=["bias"]).attr["T"].type = types_pb2.DT_FLOAT
    if pool:
        node = graph.node.add(name="pool", op="MaxPool", input=["relu"])
        node.attr["T"].type = types_pb2.DT_FLOAT
        node.attr["ksize"].list.i.extend([1, 2, 2, 1])
        node.attr["strides"].list.i.extend([1, 2, 2, 1])
        node.attr["padding"].s = padding.encode()
    path.write_bytes(graph.SerializeToString())
