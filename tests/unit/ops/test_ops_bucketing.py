"""Bucketize (its reference against TensorFlow, its expansion into comparisons and a sum
against the reference), LogSoftmax, and the channels-first Conv2D and BiasAdd (expanded
into channels-last ops)."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, interpret_kernels, placeholder
from hypothesis import given, settings
from hypothesis import strategies as st
from op_constants import run_op_with_constants

from polytf.graph import Node
from polytf.ops import lookup
from polytf.passes.expansion import expand_ops

BOUNDARIES = (-1.0, 0.0, 0.0, 2.5)


def test_bucketize_reference_matches_tensorflow():
    tf = pytest.importorskip("tensorflow")
    x = np.float32([[-3.0, -1.0, -0.5, 0.0, 1.0, 2.5, 7.0, np.nan, -np.inf, np.inf]])
    node = Node("b", "Bucketize", ("x:0",), attrs={"boundaries": BOUNDARIES, "T": "float32"})
    (ours,), _, _ = run_op_with_constants(node, [x], lower=False)
    np.testing.assert_array_equal(ours, tf.raw_ops.Bucketize(input=x, boundaries=list(BOUNDARIES)).numpy())


@settings(max_examples=10, deadline=None)
@given(st.lists(st.floats(-4, 4, width=32), min_size=1, max_size=12))
def test_bucketize_expansion_matches_the_reference(values):
    x = np.float32(values).reshape(1, -1)
    graph = build_graph([placeholder("x", x.shape), Node("b", "Bucketize", ("x:0",), attrs={"boundaries": BOUNDARIES, "T": "float32"})], ["b:0"])
    rewritten, report = expand_ops(graph)
    assert report.rewrites == 1 and "Bucketize" not in {n.op for n in rewritten.nodes.values()}
    (expected,) = lookup("Bucketize").reference(graph.nodes["b"], [x])
    np.testing.assert_array_equal(interpret_kernels(rewritten, {"x:0": x})["b:0"], expected)


def test_log_softmax_matches_tensorflow_and_its_lowering(rand, run_op):
    tf = pytest.importorskip("tensorflow")
    x = rand(3, 7) * 10
    (expected,), (got,), _ = run_op(Node("s", "LogSoftmax", ("x:0",)), [x])
    np.testing.assert_allclose(expected, tf.nn.log_softmax(x).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_channels_first_convolution_and_bias_match_tensorflow_after_expansion(rand):
    tf = pytest.importorskip("tensorflow")
    x, f, bias = rand(1, 3, 9, 8), rand(3, 3, 3, 5), rand(5)
    attrs = {"strides": (1, 1, 2, 1), "padding": "SAME", "data_format": "NCHW", "dilations": (1, 1, 1, 1)}
    graph = build_graph(
        [placeholder("x", x.shape), const("f", f), const("b", bias), Node("c", "Conv2D", ("x:0", "f:0"), attrs=attrs),
         Node("y", "BiasAdd", ("c:0", "b:0"), attrs={"data_format": "NCHW"})],
        ["y:0"],
    )
    expected = tf.nn.bias_add(tf.raw_ops.Conv2D(input=tf.transpose(x, (0, 2, 3, 1)), filter=f, strides=[1, 2, 1, 1], padding="SAME"), bias)
    expected = np.transpose(expected.numpy(), (0, 3, 1, 2))
    (reference,) = lookup("Conv2D").reference(graph.nodes["c"], [x, f])
    np.testing.assert_allclose(reference + bias[:, None, None], expected, rtol=1e-5, atol=1e-5)
    rewritten, _ = expand_ops(graph)
    assert {n.attrs.get("data_format") for n in rewritten.nodes.values() if n.op == "Conv2D"} == {"NHWC"}
    assert "BiasAdd" not in {n.op for n in rewritten.nodes.values()}
    np.testing.assert_allclose(interpret_kernels(rewritten, {"x:0": x})["y:0"], expected, rtol=1e-5, atol=1e-5)
