"""Conv2DBackpropInput (transposed convolution): reference against TensorFlow, lowering
against the reference, compiled kernels."""

from __future__ import annotations

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, const, placeholder
from op_constants import run_op_with_constants

from polytf.errors import ShapeError
from polytf.graph import Node
from polytf.ops.conv import window

# (input [N, H, W, C], kernel (KH, KW), O, stride, padding): odd and even sizes, strides 1 and 2
CASES = [
    ((1, 5, 5, 3), (3, 3), 4, 1, "SAME"),
    ((2, 6, 7, 2), (3, 3), 3, 2, "SAME"),
    ((1, 8, 8, 3), (2, 2), 2, 2, "SAME"),
    ((1, 7, 6, 2), (3, 2), 3, 2, "VALID"),
    ((1, 6, 5, 1), (3, 3), 2, 1, "VALID"),
    ((1, 9, 9, 2), (4, 4), 2, 2, "SAME"),
    ((1, 4, 4, 2), (5, 5), 3, 3, "SAME"),
]


def _node(stride, padding):
    return Node("t", "Conv2DBackpropInput", ("sizes:0", "f:0", "dy:0"), attrs={"strides": (1, stride, stride, 1), "padding": padding, "data_format": "NHWC"})


def _inputs(rand, sizes, kernel, filters, stride, padding):
    n, h, w, c = sizes
    oh = window(h, kernel[0], stride, 1, padding, "h").output
    ow = window(w, kernel[1], stride, 1, padding, "w").output
    return [np.asarray(sizes, np.int32), rand(kernel[0], kernel[1], c, filters), rand(n, oh, ow, filters)]


@pytest.mark.parametrize("sizes,kernel,filters,stride,padding", CASES)
def test_conv_transpose_reference_matches_tensorflow(rand, sizes, kernel, filters, stride, padding):
    tf = pytest.importorskip("tensorflow")
    inputs = _inputs(rand, sizes, kernel, filters, stride, padding)
    (ours,), _, _ = run_op_with_constants(_node(stride, padding), inputs, lower=False)
    theirs = tf.raw_ops.Conv2DBackpropInput(
        input_sizes=inputs[0], filter=inputs[1], out_backprop=inputs[2], strides=[1, stride, stride, 1], padding=padding
    ).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sizes,kernel,filters,stride,padding", CASES)
def test_conv_transpose_lowering_matches_reference(rand, sizes, kernel, filters, stride, padding):
    inputs = _inputs(rand, sizes, kernel, filters, stride, padding)
    (expected,), (got,), statements = run_op_with_constants(_node(stride, padding), inputs)
    assert len(statements) == 4
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_conv_transpose_rejects_mismatched_shapes(rand):
    inputs = _inputs(rand, (1, 6, 6, 2), (3, 3), 3, 2, "SAME")
    inputs[2] = rand(1, 4, 3, 3)
    with pytest.raises(ShapeError, match="do not match a Conv2D"):
        run_op_with_constants(_node(2, "SAME"), inputs, lower=False)


@pytest.mark.parametrize("stride,padding", [(2, "SAME"), (1, "VALID")])
def test_conv_transpose_compiles_correctly(monkeypatch, stride, padding):
    rng = np.random.default_rng(3)
    sizes = (1, 8, 7, 4)
    oh, ow = window(8, 3, stride, 1, padding, "h").output, window(7, 3, stride, 1, padding, "w").output
    graph = build_graph(
        [placeholder("dy", (1, oh, ow, 6)), const("sizes", np.asarray(sizes, np.int32)), const("f", rng.standard_normal((3, 3, 4, 6)).astype(np.float32)),
         _node(stride, padding), Node("relu", "Relu", ("t:0",))],
        ["relu:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert kernels[0].scop.ops[0] == ("t", "Conv2DBackpropInput")
    assert failures == []
