"""Required attributes are required, attributes have their kinds, and every op checks its
input count: malformed nodes are errors naming the node, never silent defaults or
tracebacks from inside an op's rule."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, placeholder

from polytf.errors import ShapeError
from polytf.graph import Node


def conv(attrs):
    return [placeholder("x", (1, 5, 5, 2)), const("f", np.ones((3, 3, 2, 4), np.float32)), Node("conv", "Conv2D", ("x:0", "f:0"), attrs=attrs)]


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"strides": (1, 1, 1, 1)}, "needs attribute 'padding' to be one of 'SAME', 'VALID', 'EXPLICIT'; it is missing"),
        ({"padding": "SAME"}, "needs attribute 'strides' to be a list of 4 integers; it is missing"),
        ({"padding": "SAME", "strides": 1}, "'strides' to be a list of 4 integers; it is 1"),
        ({"padding": b"\xff", "strides": (1, 1, 1, 1)}, "'padding' to be one of .* \\(UTF-8 text\\)"),
        ({"padding": "same", "strides": (1, 1, 1, 1)}, "it is 'same'"),
        ({"padding": "SAME", "strides": (1, 1, 1, 1), "data_format": 7}, "'data_format' to be a string; it is 7"),
    ],
)
def test_conv2d_attributes(attrs, message):
    with pytest.raises(ShapeError, match=f"node 'conv' \\(Conv2D\\) .*{message}"):
        build_graph(conv(attrs), ["conv:0"])


def test_pooling_needs_its_window_and_padding():
    x = placeholder("x", (1, 4, 4, 1))
    with pytest.raises(ShapeError, match="'pool' \\(MaxPool\\) needs attribute 'padding'"):
        build_graph([x, Node("pool", "MaxPool", ("x:0",), attrs={"ksize": (1, 2, 2, 1), "strides": (1, 2, 2, 1)})], ["pool:0"])
    with pytest.raises(ShapeError, match="needs attribute 'ksize'"):
        build_graph([x, Node("pool", "MaxPool", ("x:0",), attrs={"padding": "VALID", "strides": (1, 2, 2, 1)})], ["pool:0"])


def test_boolean_attributes_are_booleans():
    nodes = [placeholder("a", (2, 3)), placeholder("b", (3, 4)), Node("mm", "MatMul", ("a:0", "b:0"), attrs={"transpose_a": "yes"})]
    with pytest.raises(ShapeError, match="'transpose_a' to be a boolean; it is 'yes'"):
        build_graph(nodes, ["mm:0"])


@pytest.mark.parametrize(("op", "inputs", "message"), [("MatMul", ("a:0", "b:0", "a:0"), "has 3 data inputs; MatMul takes 2"), ("Relu", (), "has 0 data inputs; Relu takes 1")])
def test_wrong_input_counts_name_the_node(op, inputs, message):
    nodes = [placeholder("a", (2, 2)), placeholder("b", (2, 2)), Node("n", op, inputs)]
    with pytest.raises(ShapeError, match=f"node 'n' \\({op}\\) {message}"):
        build_graph(nodes, ["n:0"])


def test_placeholders_need_a_dtype_and_sane_dimensions():
    with pytest.raises(ShapeError, match="'x' \\(Placeholder\\) needs attribute 'dtype'"):
        build_graph([Node("x", "Placeholder", attrs={"shape": (2,)}), Node("r", "Relu", ("x:0",))], ["r:0"])
    with pytest.raises(ShapeError, match="over polytf's limit"):
        build_graph([placeholder("x", (2**20, 2**20, 2**10)), Node("r", "Relu", ("x:0",))], ["r:0"])
