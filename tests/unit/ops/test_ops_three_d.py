"""Conv3D, MaxPool3D, AvgPool3D and Conv3DBackpropInputV2: the 2-D ops' definitions over a
third spatial axis. References against TensorFlow, lowerings against the references (the
same statement builders as the 2-D ops, with one more window iterator), the expansion of the
transposed convolution into a Conv3D over its output phases, compiled kernels, errors."""

from __future__ import annotations

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, const, placeholder
from hypothesis import given, settings
from hypothesis import strategies as st
from op_constants import run_op_with_constants

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import lookup
from polytf.ops.conv import window
from polytf.passes.pipeline import optimize
from polytf.schedules.search_space import SearchSpace


def _node(op, inputs, strides, padding, **attrs):
    return Node("n", op, inputs, attrs={"strides": (1, *strides, 1), "padding": padding, "data_format": "NDHWC", **attrs})


@st.composite
def _windows(draw, max_kernel=3):
    """(input sizes, kernel, strides, padding) of three spatial axes that fit."""
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    kernel = tuple(draw(st.integers(1, max_kernel)) for _ in range(3))
    strides = tuple(draw(st.integers(1, 2)) for _ in range(3))
    sizes = tuple(draw(st.integers(k, 6)) for k in kernel)
    return sizes, kernel, strides, padding


@settings(max_examples=15, deadline=None)
@given(_windows(), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2))
def test_conv3d_lowering_matches_the_reference(case, channels, filters, dilation):
    sizes, kernel, strides, padding = case
    if any((k - 1) * dilation + 1 > s for k, s in zip(kernel, sizes)):
        dilation = 1
    rng = np.random.default_rng(0)
    x, f = rng.standard_normal((2, *sizes, channels)).astype(np.float32), rng.standard_normal((*kernel, channels, filters)).astype(np.float32)
    node = _node("Conv3D", ("x:0", "f:0"), strides, padding, dilations=(1, dilation, dilation, dilation, 1))
    (expected,), (got,), (init, update) = run_op_with_constants(node, [x, f], known=(1,))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert init.iterators == ("d0", "d1", "d2", "d3", "d4")
    assert update.iterators == ("d0", "d1", "d2", "d3", "d4", "r0", "r1", "r2", "r3")


@pytest.mark.parametrize("strides,padding,dilation", [((1, 1, 1), "SAME", 1), ((2, 1, 2), "VALID", 1), ((1, 1, 1), "SAME", 2)])
def test_conv3d_reference_matches_tensorflow(strides, padding, dilation):
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(1)
    x, f = rng.standard_normal((2, 5, 7, 6, 3)).astype(np.float32), rng.standard_normal((3, 2, 3, 3, 4)).astype(np.float32)
    dilations = (1, dilation, dilation, dilation, 1)
    (ours,), _, _ = run_op_with_constants(_node("Conv3D", ("x:0", "f:0"), strides, padding, dilations=dilations), [x, f], lower=False, known=(1,))
    theirs = tf.raw_ops.Conv3D(input=x, filter=f, strides=[1, *strides, 1], padding=padding, dilations=list(dilations)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["MaxPool3D", "AvgPool3D"])
@pytest.mark.parametrize("ksize,strides,padding", [((2, 2, 2), (2, 2, 2), "VALID"), ((3, 3, 2), (2, 1, 2), "SAME"), ((1, 3, 3), (1, 2, 2), "SAME")])
def test_pooling_3d_matches_tensorflow_and_its_lowering(op, ksize, strides, padding):
    tf = pytest.importorskip("tensorflow")
    x = -np.abs(np.random.default_rng(2).standard_normal((2, 5, 7, 6, 3)).astype(np.float32)) - 1.0  # a padded cell read as 0 would show
    node = _node(op, ("x:0",), strides, padding, ksize=(1, *ksize, 1))
    (expected,), (got,), statements = run_op_with_constants(node, [x])
    theirs = getattr(tf.raw_ops, op)(input=x, ksize=[1, *ksize, 1], strides=[1, *strides, 1], padding=padding).numpy()
    np.testing.assert_allclose(expected, theirs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert max(len(statement.iterators) for statement in statements) == 8  # d0..d4 and a window iterator per spatial axis


def test_three_d_ops_refuse_a_two_d_layout():
    node = _node("Conv3D", ("x:0", "f:0"), (1, 1, 1), "SAME")
    with pytest.raises(ShapeError, match="rank-5 NDHWC"):
        lookup("Conv3D").infer(node, [TensorType((1, 4, 4, 3)), TensorType((3, 3, 3, 4))], [None, None])
    node = Node("n", "MaxPool3D", ("x:0",), attrs={"ksize": (1, 2, 2, 2, 1), "strides": (1, 2, 2, 2, 1), "padding": "VALID", "data_format": "NCDHW"})
    with pytest.raises(ShapeError, match="NDHWC only"):
        lookup("MaxPool3D").infer(node, [TensorType((1, 4, 4, 4, 3))], [None])


def _transposed_graph(sizes, kernel, filters, strides, padding):
    rng = np.random.default_rng(3)
    outputs = [window(size, k, s, 1, padding, "axis").output for size, k, s in zip(sizes[1:4], kernel, strides)]
    dy_shape = (sizes[0], *outputs, filters)
    nodes = [placeholder("dy", dy_shape), const("sizes", np.asarray(sizes, np.int32)), const("f", rng.standard_normal((*kernel, sizes[4], filters)).astype(np.float32)),
             _node("Conv3DBackpropInputV2", ("sizes:0", "f:0", "dy:0"), strides, padding), Node("relu", "Relu", ("n:0",))]
    return build_graph(nodes, ["relu:0"]), dy_shape


@pytest.mark.parametrize(
    "sizes,kernel,strides,padding",
    [((1, 6, 8, 8, 4), (3, 3, 3), (2, 2, 2), "SAME"), ((1, 5, 7, 6, 2), (2, 3, 3), (1, 2, 2), "VALID"), ((2, 7, 5, 6, 3), (3, 2, 2), (2, 1, 3), "SAME")],
)
def test_conv3d_transpose_becomes_a_conv3d_over_its_phases(monkeypatch, sizes, kernel, strides, padding):
    """The reference against TensorFlow, then the optimised graph (a Conv3D over the output
    phases, no Conv3DBackpropInputV2 left) compiled under every heuristic recipe."""
    tf = pytest.importorskip("tensorflow")
    graph, dy_shape = _transposed_graph(sizes, kernel, 3, strides, padding)
    node, dy = graph.nodes["n"], np.random.default_rng(4).standard_normal(dy_shape).astype(np.float32)
    (ours,) = lookup("Conv3DBackpropInputV2").reference(node, [graph.constants["sizes:0"], graph.constants["f:0"], dy])
    theirs = tf.raw_ops.Conv3DBackpropInputV2(input_sizes=graph.constants["sizes:0"], filter=graph.constants["f:0"], out_backprop=dy, strides=[1, *strides, 1], padding=padding).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    optimized, _ = optimize(graph)
    ops = [n.op for n in optimized.nodes.values()]
    assert "Conv3DBackpropInputV2" not in ops and ops.count("Conv3D") == 1
    _, failures = verify_all_recipes(monkeypatch, optimized)
    assert failures == []


def test_conv3d_compiles_correctly_and_is_scheduled_like_a_convolution(monkeypatch):
    rng = np.random.default_rng(5)
    graph = build_graph(
        [placeholder("x", (1, 4, 9, 8, 5)), const("f", rng.standard_normal((3, 3, 3, 5, 20)).astype(np.float32)),
         _node("Conv3D", ("x:0", "f:0"), (1, 1, 1), "SAME"), Node("relu", "Relu", ("n:0",))],
        ["relu:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert failures == []
    (kernel,) = kernels
    recipe = SearchSpace.for_scop(kernel.scop, 2).default_recipe()
    assert recipe.parallel and any(recipe.register_tile_sizes)
