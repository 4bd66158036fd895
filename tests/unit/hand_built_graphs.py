"""Small hand-built graphs (no TensorFlow needed) lowered to kernels, for the
schedule, target, runtime and tuner tests."""

from __future__ import annotations

import numpy as np

from polytf.graph import Graph, Node
from polytf.lowering.lowered_kernel import lower_group
from polytf.lowering.shape_inference import infer_types
from polytf.passes.fusion import partition, resolve_view
from polytf.passes.pruning import prune_to_outputs
from polytf.poly.interpreter import interpret


def placeholder(name, shape, dtype="float32"):
    return Node(name, "Placeholder", attrs={"dtype": dtype, "shape": tuple(shape)})


def const(name, value):
    value = np.asarray(value)
    return Node(name, "Const", attrs={"dtype": value.dtype.name, "value": value})


def build_graph(nodes, outputs) -> Graph:
    graph = Graph(nodes={n.name: n for n in nodes}, outputs=tuple(outputs), source="<test>")
    return prune_to_outputs(infer_types(graph))[0]


def kernels_of(graph: Graph, fuse: bool = True):
    return [lower_group(graph, group) for group in partition(graph, fuse=fuse)]


def interpret_kernels(graph: Graph, feeds):
    """Every kernel of ``graph`` through the Scop interpreter, in order, from ``feeds``
    (tensor name -> array): the value of every tensor a kernel writes, and the feeds."""
    values = dict(feeds)
    for kernel in kernels_of(graph):
        inputs = {}
        for info in kernel.input_arrays:
            tensor = resolve_view(graph, info.tensor)
            inputs[info.name] = np.reshape(values[tensor] if tensor in values else graph.constants[tensor], info.shape)
        state = interpret(kernel.scop, inputs)
        for info in kernel.output_arrays:
            values[info.tensor] = state[info.name]
    return values


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def graph_matmul_bias_relu(m=7, k=13, n=11, transpose_b=False):
    rng = np.random.default_rng(0)
    weights = _rand(rng, n, k) if transpose_b else _rand(rng, k, n)
    return build_graph(
        [
            placeholder("x", (m, k)),
            const("w", weights),
            const("b", _rand(rng, n)),
            Node("mm", "MatMul", ("x:0", "w:0"), attrs={"transpose_a": False, "transpose_b": transpose_b}),
            Node("bias", "BiasAdd", ("mm:0", "b:0"), attrs={"data_format": "NHWC"}),
            Node("relu", "Relu", ("bias:0",)),
        ],
        ["relu:0"],
    )


def graph_conv_bias_relu(h=9, w=7, c=3, o=5, stride=2, padding="SAME", dilation=1, batch=1):
    rng = np.random.default_rng(1)
    return build_graph(
        [
            placeholder("x", (batch, h, w, c)),
            const("f", _rand(rng, 3, 3, c, o)),
            const("b", _rand(rng, o)),
            Node("conv", "Conv2D", ("x:0", "f:0"), attrs={"strides": (1, stride, stride, 1), "padding": padding, "data_format": "NHWC", "dilations": (1, dilation, dilation, 1)}),
            Node("bias", "BiasAdd", ("conv:0", "b:0"), attrs={"data_format": "NHWC"}),
            Node("relu", "Relu", ("bias:0",)),
        ],
        ["relu:0"],
    )


def graph_maxpool(h=9, w=8, c=3, padding="SAME"):
    return build_graph(
        [placeholder("x", (2, h, w, c)), Node("pool", "MaxPool", ("x:0",), attrs={"ksize": (1, 3, 3, 1), "strides": (1, 2, 2, 1), "padding": padding, "data_format": "NHWC"})],
        ["pool:0"],
    )


def graph_softmax(rows=5, columns=9):
    return build_graph([placeholder("x", (rows, columns)), Node("softmax", "Softmax", ("x:0",))], ["softmax:0"])


def graph_broadcast_chain():
    rng = np.random.default_rng(2)
    return build_graph(
        [
            placeholder("x", (3, 4, 6)),
            placeholder("y", (4, 1)),
            const("c", _rand(rng, 6)),
            Node("add", "AddV2", ("x:0", "y:0")),
            Node("mul", "Mul", ("add:0", "c:0")),
            Node("sub", "Sub", ("mul:0", "x:0")),
            Node("relu", "Relu", ("sub:0",)),
        ],
        ["relu:0"],
    )


def graph_depthwise(shape=(1, 5, 4, 3), multiplier=1, seed=0):
    """A SAME-padded 3x3 DepthwiseConv2dNative of an input of ``shape`` (NHWC) with
    ``multiplier`` filters per channel."""
    rng = np.random.default_rng(seed)
    attrs = {"strides": (1, 1, 1, 1), "padding": "SAME", "data_format": "NHWC", "dilations": (1, 1, 1, 1)}
    return build_graph(
        [placeholder("x", shape), const("f", _rand(rng, 3, 3, shape[-1], multiplier)), Node("dw", "DepthwiseConv2dNative", ("x:0", "f:0"), attrs=attrs)],
        ["dw:0"],
    )


def graph_centred_column_mean(rows=6, columns=6):
    """``mean(x - mean(x, axis=2, keepdims), axis=1)`` of an ``x: [1, rows, columns]``: one
    fusion group whose last statement iterates ``[columns; rows]`` where the others iterate
    ``[rows, columns]`` (a LayerNorm then a mean over tokens); with ``rows == columns`` their
    iterators have the same names and extents, and a band over ``d1`` would be illegal."""
    return build_graph(
        [
            placeholder("x", (1, rows, columns)),
            const("across", np.array([2], dtype=np.int32)),
            const("down", np.array([1], dtype=np.int32)),
            Node("mean", "Mean", ("x:0", "across:0"), attrs={"keep_dims": True}),
            Node("centred", "Sub", ("x:0", "mean:0")),
            Node("out", "Mean", ("centred:0", "down:0"), attrs={"keep_dims": False}),
        ],
        ["out:0"],
    )


def reshaped_matmul_nodes(w) -> list[Node]:
    """``out = Identity(Reshape(x: [2, 3, 2], [2, 6]) @ w)``: a view (the reshape) before a
    kernel, for the runtimes' tests."""
    return [
        placeholder("x", (2, 3, 2)),
        const("shape", np.array([2, 6], dtype=np.int32)),
        Node("flat", "Reshape", ("x:0", "shape:0")),
        const("w", w),
        Node("mm", "MatMul", ("flat:0", "w:0")),
        Node("out", "Identity", ("mm:0",)),
    ]


GRAPHS = {
    "matmul_bias_relu": graph_matmul_bias_relu,
    "matmul_transpose_b": lambda: graph_matmul_bias_relu(5, 9, 17, transpose_b=True),
    "conv_same_stride2": graph_conv_bias_relu,
    "conv_valid_dilated": lambda: graph_conv_bias_relu(10, 9, 2, 4, stride=1, padding="VALID", dilation=2),
    "maxpool_same": graph_maxpool,
    "softmax": graph_softmax,
    "broadcast_chain": graph_broadcast_chain,
    "centred_column_mean": graph_centred_column_mean,
}


