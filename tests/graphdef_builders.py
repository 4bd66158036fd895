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


def write_dense_block_graphdef(path: Path, batch: int = 1, layers: int = 3, seed: int = 0) -> None:
    """Write a DenseNet block on ``x: float32 [batch, 6, 6, 3]`` (``batch`` -1: a None batch):
    a 3x3 stem conv to 8 channels, then per layer ``concat(previous, conv3x3(relu(conv1x1(
    relu(previous)))))`` (a 1x1 bottleneck of 6 channels, 4 channels of growth), and a 1x1
    head conv of ``relu`` of the last concatenation to 5 channels (``out``). The 3x3 convs
    write into one concatenation's buffer at other offsets (windows of it:
    :mod:`polytf.plan.buffer_placement`)."""
    rng = np.random.default_rng(seed)
    graph = graph_pb2.GraphDef()
    x = graph.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    for size in (batch, 6, 6, 3):
        x.attr["shape"].shape.dim.add(size=size)

    def conv(name: str, source: str, window: int, channels_in: int, channels_out: int) -> str:
        _const(graph, f"{name}_w", rng.standard_normal((window, window, channels_in, channels_out)) / np.sqrt(window * window * channels_in))
        node = graph.node.add(name=name, op="Conv2D", input=[source, f"{name}_w"])
        node.attr["T"].type = types_pb2.DT_FLOAT
        node.attr["strides"].list.i.extend([1, 1, 1, 1])
        node.attr["padding"].s = b"SAME"
        return name

    def relu(name: str, source: str) -> str:
        graph.node.add(name=name, op="Relu", input=[source]).attr["T"].type = types_pb2.DT_FLOAT
        return name

    axis = graph.node.add(name="axis", op="Const")
    axis.attr["dtype"].type = axis.attr["value"].tensor.dtype = types_pb2.DT_INT32
    axis.attr["value"].tensor.int_val.append(3)
    previous, width = conv("stem", "x", 3, 3, 8), 8
    for layer in range(layers):
        narrow = conv(f"narrow{layer}", relu(f"pre{layer}", previous), 1, width, 6)
        grown = conv(f"grow{layer}", relu(f"mid{layer}", narrow), 3, 6, 4)
        concat = graph.node.add(name=f"cat{layer}", op="ConcatV2", input=[previous, grown, "axis"])
        concat.attr["T"].type = types_pb2.DT_FLOAT
        concat.attr["N"].i = 2
        concat.attr["Tidx"].type = types_pb2.DT_INT32
        previous, width = f"cat{layer}", width + 4
    conv("out", relu("post", previous), 1, width, 5)
    path.write_bytes(graph.SerializeToString())
