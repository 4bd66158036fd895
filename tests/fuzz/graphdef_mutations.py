"""A seeded mutation generator over small GraphDefs, for fuzzing the frontend.

Seed graphs are built from the protos alone (no TensorFlow): an MLP, a convolution with
pooling, and reshapes, reductions, concatenation and padding. A case is one seed with one
to three mutations applied at the proto level (attributes deleted, retyped or made
invalid UTF-8; inputs dropped, duplicated, pointed at missing nodes or bad ports; cycles;
duplicate names; absurd dimensions and constant bombs; tensor content that mismatches its
shape; unknown dtypes; changed op types) or at the byte level (a truncated or
bit-flipped file). ``case(seed)`` is deterministic: the same number gives the same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
from tensorboard.compat.proto import attr_value_pb2, graph_pb2, types_pb2

FLOAT = types_pb2.DT_FLOAT


def _placeholder(graph, name, shape):
    node = graph.node.add(name=name, op="Placeholder")
    node.attr["dtype"].type = FLOAT
    for size in shape:
        node.attr["shape"].shape.dim.add(size=size)
    return node


def _const(graph, name, value):
    value = np.asarray(value)
    node = graph.node.add(name=name, op="Const")
    dtype = {"float32": FLOAT, "int32": types_pb2.DT_INT32}[value.dtype.name]
    node.attr["dtype"].type = dtype
    tensor = node.attr["value"].tensor
    tensor.dtype = dtype
    for size in value.shape:
        tensor.tensor_shape.dim.add(size=size)
    tensor.tensor_content = value.tobytes()
    return node


def _op(graph, name, op, inputs, **attrs):
    node = graph.node.add(name=name, op=op, input=list(inputs))
    node.attr["T"].type = FLOAT
    for key, value in attrs.items():
        if isinstance(value, bool):
            node.attr[key].b = value
        elif isinstance(value, int):
            node.attr[key].i = value
        elif isinstance(value, str):
            node.attr[key].s = value.encode()
        elif isinstance(value, (list, tuple)):
            node.attr[key].list.i.extend(value)
    return node


def mlp() -> graph_pb2.GraphDef:
    graph = graph_pb2.GraphDef()
    rng = np.random.default_rng(0)
    _placeholder(graph, "x", (2, 8))
    _const(graph, "w", rng.standard_normal((8, 4)).astype(np.float32))
    _const(graph, "b", rng.standard_normal(4).astype(np.float32))
    _op(graph, "mm", "MatMul", ["x", "w"], transpose_a=False, transpose_b=False)
    _op(graph, "bias", "BiasAdd", ["mm", "b"], data_format="NHWC")
    _op(graph, "relu", "Relu", ["bias"])
    _op(graph, "softmax", "Softmax", ["relu"])
    _op(graph, "Identity", "Identity", ["softmax"])
    return graph


def convolution() -> graph_pb2.GraphDef:
    graph = graph_pb2.GraphDef()
    rng = np.random.default_rng(1)
    _placeholder(graph, "x", (1, 6, 5, 2))
    _const(graph, "f", rng.standard_normal((3, 3, 2, 3)).astype(np.float32))
    _const(graph, "b", rng.standard_normal(3).astype(np.float32))
    _op(graph, "conv", "Conv2D", ["x", "f"], strides=[1, 1, 1, 1], padding="SAME", data_format="NHWC", dilations=[1, 1, 1, 1])
    _op(graph, "bias", "BiasAdd", ["conv", "b"], data_format="NHWC")
    _op(graph, "relu", "Relu", ["bias"])
    _op(graph, "pool", "MaxPool", ["relu"], ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID", data_format="NHWC")
    _op(graph, "Identity", "Identity", ["pool"])
    return graph


def shapes() -> graph_pb2.GraphDef:
    graph = graph_pb2.GraphDef()
    _placeholder(graph, "x", (2, 3, 4))
    _const(graph, "shape", np.array([6, 4], np.int32))
    _op(graph, "flat", "Reshape", ["x", "shape"])
    _const(graph, "axes", np.array([1], np.int32))
    _op(graph, "mean", "Mean", ["flat", "axes"], keep_dims=True)
    _const(graph, "axis", np.array(1, np.int32))
    concat = _op(graph, "concat", "ConcatV2", ["flat", "mean", "axis"], N=2)
    concat.attr["Tidx"].type = types_pb2.DT_INT32
    _const(graph, "paddings", np.array([[0, 1], [2, 0]], np.int32))
    _op(graph, "pad", "Pad", ["concat", "paddings"])
    _op(graph, "Identity", "Identity", ["pad"])
    return graph


SEEDS: dict[str, Callable[[], graph_pb2.GraphDef]] = {"mlp": mlp, "convolution": convolution, "shapes": shapes}

_BAD_PORTS = ("x:99", "x:²", "x:-1", "x:", ":0", "x:0:0", "^", "^missing", "missing:0", "x:٣")
_BAD_BYTES = (b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"SAME\x00", b"")
_DIMS = (-2, -1, 0, 1, 2**31, 2**40, 2**62)
_OPS = ("Relu", "MatMul", "Conv2D", "Reshape", "Softmax", "NoSuchOp", "Placeholder", "Const", "Identity", "Mean", "ConcatV2", "Pad", "IdentityN", "While")


def _random_node(rng: random.Random, graph) -> graph_pb2.NodeDef:
    return graph.node[rng.randrange(len(graph.node))]


def _mutate_attr(rng, graph) -> str:
    node = _random_node(rng, graph)
    keys = sorted(node.attr)  # protobuf map order is not stable between processes
    if not keys:
        node.attr["padding"].s = rng.choice(_BAD_BYTES)
        return f"{node.name}: padding={node.attr['padding'].s!r}"
    key = rng.choice(keys)
    choice = rng.randrange(7)
    if choice == 0:
        del node.attr[key]
        return f"{node.name}: delete attr {key}"
    value = attr_value_pb2.AttrValue()
    if choice == 1:
        value.s = rng.choice(_BAD_BYTES)
    elif choice == 2:
        value.i = rng.choice((-1, 0, 3, 2**40))
    elif choice == 3:
        value.f = rng.choice((float("nan"), -1.0, 1e30))
    elif choice == 4:
        value.list.i.extend(rng.choice(([], [1], [1, 0, 0, 1], [1, -1, -1, 1], [2, 2, 2, 2, 2])))
    elif choice == 5:
        value.type = rng.choice((0, 7, 999, types_pb2.DT_INT8, types_pb2.DT_STRING, types_pb2.DT_RESOURCE, 101))
    else:
        for size in (rng.choice(_DIMS), rng.choice(_DIMS)):
            value.shape.dim.add(size=size)
    node.attr[key].CopyFrom(value)
    return f"{node.name}: attr {key} := {str(value).strip()[:60]!r}"


def _mutate_inputs(rng, graph) -> str:
    node = _random_node(rng, graph)
    choice = rng.randrange(5)
    if choice == 0 and node.input:
        del node.input[rng.randrange(len(node.input))]
        return f"{node.name}: drop an input"
    if choice == 1:
        node.input.append(rng.choice([n.name for n in graph.node]))
        return f"{node.name}: extra input"
    if choice == 2 and node.input:
        node.input.append(node.input[0])
        return f"{node.name}: duplicate input"
    if choice == 3:
        bad = rng.choice(_BAD_PORTS).replace("x", rng.choice([n.name for n in graph.node]))
        if node.input:
            node.input[rng.randrange(len(node.input))] = bad
        else:
            node.input.append(bad)
        return f"{node.name}: input {bad!r}"
    later = rng.choice([n.name for n in graph.node])
    node.input.append(later)
    return f"{node.name}: may close a cycle through {later}"


def _mutate_node(rng, graph) -> str:
    node = _random_node(rng, graph)
    choice = rng.randrange(4)
    if choice == 0:
        node.op = rng.choice(_OPS)
        return f"{node.name}: op := {node.op}"
    if choice == 1:
        other = _random_node(rng, graph)
        other.name = node.name
        return f"duplicate name {node.name}"
    if choice == 2:
        node.name = rng.choice(("", "a b", "\x00", "x:1", "^c", "é", node.name + "/" * 3))
        return f"name := {node.name!r}"
    node.device = "/gpu:0"
    node.attr["_class"].list.s.append(b"loc:@x")
    return f"{node.name}: device and internal attrs"


def _mutate_tensor(rng, graph) -> str:
    consts = [n for n in graph.node if n.op == "Const"] or [_const(graph, "extra", np.zeros(2, np.float32))]
    node = rng.choice(consts)
    tensor = node.attr["value"].tensor
    choice = rng.randrange(6)
    if choice == 0:
        tensor.tensor_content = tensor.tensor_content[: max(0, len(tensor.tensor_content) - rng.choice((1, 4)))]
        return f"{node.name}: tensor_content cut"
    if choice == 1:
        del tensor.tensor_shape.dim[:]
        for size in (20000, 20000):
            tensor.tensor_shape.dim.add(size=size)
        tensor.tensor_content = b""
        tensor.float_val.append(1.0)
        return f"{node.name}: 20000x20000 from one value"
    if choice == 2:
        tensor.dtype = rng.choice((999, types_pb2.DT_STRING, types_pb2.DT_HALF, types_pb2.DT_COMPLEX64, types_pb2.DT_VARIANT))
        return f"{node.name}: tensor dtype {tensor.dtype}"
    if choice == 3:
        tensor.tensor_shape.dim.add(size=rng.choice(_DIMS))
        return f"{node.name}: tensor shape gets a dim"
    if choice == 4:
        tensor.tensor_shape.unknown_rank = True
        return f"{node.name}: tensor of unknown rank"
    dims = [d.size for d in tensor.tensor_shape.dim]
    del tensor.tensor_shape.dim[:]
    for size in reversed(dims or [3]):
        tensor.tensor_shape.dim.add(size=size + rng.choice((0, 1)))
    return f"{node.name}: tensor shape changed"


def _mutate_placeholder(rng, graph) -> str:
    node = next((n for n in graph.node if n.op == "Placeholder"), None)
    if node is None:  # an earlier mutation changed its op
        return _mutate_attr(rng, graph)
    choice = rng.randrange(4)
    if choice == 0:
        dims = node.attr["shape"].shape.dim
        if not dims:  # a scalar, or an earlier mutation deleted the shape
            dims.add(size=1)
        dims[rng.randrange(len(dims))].size = rng.choice(_DIMS)
        return f"{node.name}: a dim := {node.attr['shape'].shape}"
    if choice == 1:
        node.attr["shape"].shape.unknown_rank = True
        return f"{node.name}: unknown rank"
    if choice == 2:
        node.attr["dtype"].type = rng.choice((types_pb2.DT_INT32, types_pb2.DT_BOOL, types_pb2.DT_STRING, 999))
        return f"{node.name}: dtype {node.attr['dtype'].type}"
    for _ in range(rng.choice((1, 3))):
        node.attr["shape"].shape.dim.add(size=rng.choice((1, 2, 2**20)))
    return f"{node.name}: more dims"


MUTATIONS = (_mutate_attr, _mutate_inputs, _mutate_node, _mutate_tensor, _mutate_placeholder)


def case(seed: int) -> tuple[bytes, str]:
    """The serialized GraphDef of case ``seed`` and a description of its mutations."""
    rng = random.Random(seed)
    name = rng.choice(sorted(SEEDS))
    graph = SEEDS[name]()
    steps = [name]
    for _ in range(rng.choice((1, 1, 2, 3))):
        steps.append(rng.choice(MUTATIONS)(rng, graph))
    data = graph.SerializeToString(deterministic=True)
    if rng.random() < 0.08:
        if rng.random() < 0.5:
            data = data[: rng.randrange(1, len(data))]
            steps.append("truncated")
        else:
            flipped = bytearray(data)
            for _ in range(rng.randrange(1, 6)):
                flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            data = bytes(flipped)
            steps.append("bits flipped")
    return data, "; ".join(steps)


__all__ = ["SEEDS", "MUTATIONS", "case"]
