"""Conv2DBackpropInput (transposed convolution): reference against TensorFlow, lowering
against the reference, its expansion into a convolution over output phases against the
reference, compiled kernels."""

from __future__ import annotations

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, const, interpret_kernels, kernels_of, placeholder
from hypothesis import given, settings
from hypothesis import strategies as st
from op_constants import run_op_with_constants

from polytf.errors import ShapeError
from polytf.graph import Node
from polytf.ops import lookup
from polytf.ops.conv import window
from polytf.ops.conv_transpose import phase_taps
from polytf.passes.expansion import expand_ops
from polytf.passes.pipeline import optimize
from polytf.schedules.search_space import SearchSpace

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
    strides = stride if isinstance(stride, tuple) else (stride, stride)
    return Node("t", "Conv2DBackpropInput", ("sizes:0", "f:0", "dy:0"), attrs={"strides": (1, *strides, 1), "padding": padding, "data_format": "NHWC"})


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


# --- the expansion: a dense convolution over the output phases ------------------------


def _transposed_graph(sizes, kernel, filters, strides, padding, seed=0):
    """``relu(Conv2DBackpropInput(sizes, f, dy))`` with a constant filter ``f``; returns the
    graph and its placeholder's shape."""
    rng = np.random.default_rng(seed)
    n, h, w, c = sizes
    oh = window(h, kernel[0], strides[0], 1, padding, "h").output
    ow = window(w, kernel[1], strides[1], 1, padding, "w").output
    nodes = [placeholder("dy", (n, oh, ow, filters)), const("sizes", np.asarray(sizes, np.int32)),
             const("f", rng.standard_normal((*kernel, c, filters)).astype(np.float32)), _node(strides, padding), Node("relu", "Relu", ("t:0",))]
    return build_graph(nodes, ["relu:0"]), (n, oh, ow, filters)


def _interpreted(graph, dy):
    """Every kernel of ``graph`` through the interpreter, in order: the value of ``relu:0``."""
    return interpret_kernels(graph, {"dy:0": dy})["relu:0"]


@st.composite
def _transposed_case(draw):
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    if draw(st.booleans()):
        strides = (strides[0], strides[0])
    kernel = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    height, width = (draw(st.integers(max(k, s), 9)) for k, s in zip(kernel, strides))
    return (draw(st.integers(1, 2)), height, width, draw(st.integers(1, 3))), kernel, draw(st.integers(1, 3)), strides, padding


@settings(max_examples=40, deadline=None)
@given(_transposed_case())
def test_expansion_into_output_phases_matches_the_reference(case):
    """Any kernel size, stride pair and padding: the expanded graph (a Conv2D over the output
    phases, interleaved and cut) computes the op's reference."""
    sizes, kernel, filters, strides, padding = case
    graph, dy_shape = _transposed_graph(sizes, kernel, filters, strides, padding)
    rewritten, report = expand_ops(graph)
    assert report.rewrites == 1
    ops = [node.op for node in rewritten.nodes.values()]
    assert "Conv2DBackpropInput" not in ops and ops.count("Conv2D") == 1
    dy = np.random.default_rng(1).standard_normal(dy_shape).astype(np.float32)
    node = graph.nodes["t"]
    (expected,) = lookup("Conv2DBackpropInput").reference(node, [graph.constants["sizes:0"], graph.constants["f:0"], dy])
    np.testing.assert_allclose(_interpreted(rewritten, dy), np.maximum(expected, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kernel,stride,padding,window_size,taps",
    [
        (3, 2, "SAME", 2, [[(1, 0), (0, 2)], [(1, 1)]]),  # Keras Conv2DTranspose(3, strides=2, "same")
        (2, 2, "VALID", 1, [[(0, 0)], [(0, 1)]]),  # the classic U-Net upsampling: a 1x1 convolution
        (4, 2, "SAME", 3, [[(1, 1), (0, 3)], [(2, 0), (1, 2)]]),  # DCGAN's 4x4, stride 2
        (3, 1, "SAME", 3, [[(2, 0), (1, 1), (0, 2)]]),  # stride 1: the flipped filter
    ],
)
def test_phase_taps_use_every_filter_row_once(kernel, stride, padding, window_size, taps):
    """Each filter row lands in exactly one phase, at one row of a window of ``ceil(K / s)``
    (+1 where the phases are offset) rows: no multiplication by an inserted zero."""
    size = 8 * stride
    axis = window(size, kernel, stride, 1, padding, "h")
    phases = phase_taps(axis)
    assert phases.window == window_size
    assert [list(t) for t in phases.taps] == taps
    assert sorted(k for phase in phases.taps for _, k in phase) == list(range(kernel))
    assert stride * phases.rows >= size


def test_transposed_convolution_is_scheduled_like_a_convolution():
    """After the graph passes, the transposed convolution's work is a Conv2D (or MatMul) kernel
    whose default recipe has register tiles and threads, not the lowered loop nest."""
    graph, _ = _transposed_graph((1, 32, 32, 16), (3, 3), 32, (2, 2), "SAME")
    optimized, _ = optimize(graph)
    anchors = [kernel for kernel in kernels_of(optimized) if any(op in ("Conv2D", "MatMul") for _, op in kernel.scop.ops)]
    assert len(anchors) == 1
    recipe = SearchSpace.for_scop(anchors[0].scop, 2).default_recipe()
    assert recipe.register_tile_sizes and recipe.parallel


@pytest.mark.parametrize("strides,padding", [((2, 2), "SAME"), ((1, 2), "SAME"), ((2, 3), "VALID")])
def test_expanded_transposed_convolution_compiles_correctly(monkeypatch, strides, padding):
    graph, _ = _transposed_graph((1, 12, 12, 4), (3, 3), 6, strides, padding, seed=3)
    optimized, _ = optimize(graph)
    assert not any(node.op == "Conv2DBackpropInput" for node in optimized.nodes.values())
    _, failures = verify_all_recipes(monkeypatch, optimized)
    assert failures == []
