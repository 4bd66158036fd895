"""Reshape sinking: element-wise nodes move above the view between them and their producer
(XLA's ReshapeMover), so a Keras ``Dense`` on a ``[B, T, C]`` input is one kernel with its
bias and GELU, and a ``MultiHeadAttention`` projection one kernel with its ``[H, D]`` bias."""

from __future__ import annotations

import numpy as np
import pytest
from graph_evaluation import assert_same_values, assert_types_consistent, typed_graph
from hand_built_graphs import const, placeholder
from hypothesis import given, settings
from hypothesis import strategies as st

from polytf.graph import Node
from polytf.passes.fusion import partition
from polytf.passes.pipeline import optimize
from polytf.passes.reshape_sinking import sink_reshapes


def _shape(name, values):
    return const(name, np.asarray(values, dtype=np.int32))


def _dense_gelu_nodes(batch=2, sequence=3, width=4, units=5, seed=0):
    """Keras 3's frozen ``Dense(units, activation="gelu")`` on ``[batch, sequence, width]``:
    Reshape -> MatMul -> Reshape -> BiasAdd -> exact GELU (Mul, Neg, Erfc, Mul)."""
    rng = np.random.default_rng(seed)
    return [
        placeholder("x", (batch, sequence, width)),
        _shape("flat_shape", [batch * sequence, width]),
        Node("flat", "Reshape", ("x:0", "flat_shape:0")),
        const("w", rng.standard_normal((width, units)).astype(np.float32)),
        Node("mm", "MatMul", ("flat:0", "w:0"), attrs={"transpose_a": False, "transpose_b": False}),
        _shape("out_shape", [batch, sequence, units]),
        Node("unflat", "Reshape", ("mm:0", "out_shape:0")),
        const("b", rng.standard_normal(units).astype(np.float32)),
        Node("bias", "BiasAdd", ("unflat:0", "b:0"), attrs={"data_format": "NHWC"}),
        const("half", np.float32(0.5)),
        Node("gelu/mul", "Mul", ("half:0", "bias:0")),
        const("minus_sqrt_half", np.float32(-0.70710677)),
        Node("gelu/scaled", "Mul", ("bias:0", "minus_sqrt_half:0")),
        Node("gelu/erfc", "Erfc", ("gelu/scaled:0",)),
        Node("gelu/out", "Mul", ("gelu/mul:0", "gelu/erfc:0")),
        Node("Identity", "Identity", ("gelu/out:0",)),
    ]


def _feeds(graph, seed=1):
    rng = np.random.default_rng(seed)
    return {
        node.name: rng.standard_normal(tuple(node.attrs["shape"])).astype(np.float32)
        for node in graph.nodes.values()
        if node.op == "Placeholder"
    }


def _group_of(groups, node_name):
    (group,) = [g for g in groups if node_name in g.nodes]
    return group


def test_dense_bias_and_gelu_join_the_matmul_kernel():
    graph = typed_graph(_dense_gelu_nodes(), ["Identity:0"])
    optimized, _ = optimize(graph)
    assert_same_values(graph, optimized, _feeds(graph))
    assert_types_consistent(optimized)
    compute = [n for n in optimized.nodes.values() if n.op in ("BiasAdd", "Mul", "Erfc")]
    assert len(compute) == 5 and all(optimized.types[n.output(0)].shape == (6, 5) for n in compute)
    groups = partition(optimized)
    matmul_group = _group_of(groups, "mm")
    assert set(matmul_group.nodes) == {"mm", *(n.name for n in compute)}
    assert len(groups) == 1


def test_sinking_without_it_the_chain_is_a_second_kernel():
    """The baseline the pass improves on: the same graph, partitioned without the pass."""
    graph = typed_graph(_dense_gelu_nodes(), ["Identity:0"])
    assert len(partition(graph)) == 2


def test_the_compiled_model_matches_numpy():
    from polytf.compiler.model_builder import build_model
    from polytf.compiler.preparation import PreparedModel
    from polytf.lowering.lowered_kernel import lower_group

    graph, _ = optimize(typed_graph(_dense_gelu_nodes(batch=2, sequence=5, width=8, units=16), ["Identity:0"]))
    groups = partition(graph)
    model = build_model(PreparedModel(graph, groups, tuple(lower_group(graph, g) for g in groups), ()), threads=1)
    x = _feeds(graph)["x"]
    z = x.reshape(10, 8) @ graph.constants["w:0"] + graph.constants["b:0"]
    from math import erfc

    expected = (0.5 * z * np.vectorize(erfc)(-z / np.sqrt(2.0))).reshape(2, 5, 16)
    np.testing.assert_allclose(model(x=x)["Identity"], expected, rtol=1e-5, atol=1e-5)


def _projection_nodes(bias_shape, heads=2, head_width=4, sequence=6, width=8, seed=0, residual=False):
    """``MultiHeadAttention``'s query projection: BatchMatMulV2 to ``[1, T, H*D]``, a Reshape to
    ``[1, T, H, D]``, and an AddV2 of a bias of ``bias_shape`` (or of a placeholder ``[1, T, H, D]``
    when ``residual``)."""
    rng = np.random.default_rng(seed)
    operand = (
        placeholder("r", (1, sequence, heads, head_width))
        if residual
        else const("bias", rng.standard_normal(bias_shape).astype(np.float32))
    )
    return [
        placeholder("x", (1, sequence, width)),
        const("w", rng.standard_normal((width, heads * head_width)).astype(np.float32)),
        Node("mm", "BatchMatMulV2", ("x:0", "w:0"), attrs={"adj_x": False, "adj_y": False}),
        _shape("heads_shape", [1, sequence, heads, head_width]),
        Node("split_heads", "Reshape", ("mm:0", "heads_shape:0")),
        operand,
        Node("add", "AddV2", ("split_heads:0", f"{operand.name}:0")),
        Node("Identity", "Identity", ("add:0",)),
    ]


@pytest.mark.parametrize("bias_shape", [(2, 4), (1, 1, 2, 4), (6, 2, 4), (1,), ()])
def test_a_bias_over_a_suffix_of_the_axes_moves_with_the_add(bias_shape):
    graph = typed_graph(_projection_nodes(bias_shape), ["Identity:0"])
    sunk, report = sink_reshapes(graph)
    assert report.rewrites == 1
    assert sunk.types["add/in_source_shape:0"].shape == (1, 6, 8)
    assert sunk.nodes["add"].op == "Reshape" and sunk.types["add:0"].shape == (1, 6, 2, 4)
    assert_same_values(graph, sunk, _feeds(graph))
    assert_types_consistent(sunk)
    assert len(partition(optimize(graph)[0])) == 1


@pytest.mark.parametrize("bias_shape", [(4,), (2, 1), (6, 1, 1), (1, 6, 2, 1)])
def test_a_bias_that_is_not_a_whole_suffix_keeps_the_add_in_place(bias_shape):
    graph = typed_graph(_projection_nodes(bias_shape), ["Identity:0"])
    sunk, report = sink_reshapes(graph)
    assert report.rewrites == 0 and sunk.nodes["add"].op == "AddV2"


def test_a_full_size_operand_is_read_through_a_new_view():
    """A residual ``AddV2(view(matmul), r)``: ``r`` is reshaped by a new view, the add joins the
    matmul's kernel."""
    graph = typed_graph(_projection_nodes((), residual=True), ["Identity:0"])
    optimized, _ = optimize(graph)
    assert_same_values(graph, optimized, _feeds(graph))
    assert_types_consistent(optimized)
    (add,) = [n for n in optimized.nodes.values() if n.op == "AddV2"]
    assert optimized.types[add.output(0)].shape == (1, 6, 8)  # the add kept its name's view: "Identity" now
    assert len(partition(optimized)) == 1


def test_views_of_model_inputs_and_rank_raising_sources_stay():
    nodes = [
        placeholder("x", (2, 3, 4)),
        _shape("flat_shape", [6, 4]),
        Node("flat", "Reshape", ("x:0", "flat_shape:0")),
        const("one", np.float32(1.0)),
        Node("shifted", "AddV2", ("flat:0", "one:0")),  # a view of a placeholder: nothing to fuse with
        Node("relu", "Relu", ("x:0",)),
        Node("flat_relu", "Reshape", ("relu:0", "flat_shape:0")),
        Node("scaled", "Mul", ("flat_relu:0", "one:0")),  # a view to a lower rank: stays
        Node("out", "AddV2", ("shifted:0", "scaled:0")),
    ]
    graph = typed_graph(nodes, ["out:0"])
    assert sink_reshapes(graph)[1].rewrites == 0


def test_an_operand_computed_from_the_source_keeps_the_node_in_place():
    """LayerNorm's ``x * rsqrt(var(x))`` with ``x`` a view: the scale comes from a reduction of
    the source, which runs after the source's kernel, so moving the product would not fuse."""
    rng = np.random.default_rng(3)
    nodes = [
        placeholder("x", (6, 4)),
        const("w", rng.standard_normal((4, 8)).astype(np.float32)),
        Node("mm", "MatMul", ("x:0", "w:0")),
        _shape("shape", [2, 3, 8]),
        Node("view", "Reshape", ("mm:0", "shape:0")),
        const("axis", np.int32(-1)),
        Node("mean", "Mean", ("view:0", "axis:0"), attrs={"keep_dims": True}),
        Node("scale", "Rsqrt", ("mean:0",)),
        const("gamma", rng.standard_normal(8).astype(np.float32)),
        Node("scale_gamma", "Mul", ("scale:0", "gamma:0")),
        Node("normalized", "Mul", ("view:0", "scale_gamma:0")),
    ]
    graph = typed_graph(nodes, ["normalized:0"])
    assert sink_reshapes(graph)[1].rewrites == 0


def test_the_pass_reaches_a_fixed_point():
    graph = typed_graph(_projection_nodes((), residual=True), ["Identity:0"])
    once, report = sink_reshapes(graph)
    assert report.rewrites == 1
    twice, report = sink_reshapes(once)
    assert report.rewrites == 0 and twice is once


def test_an_untyped_graph_is_returned_unchanged():
    from polytf.graph import Graph

    nodes = _dense_gelu_nodes()
    graph = Graph(nodes={n.name: n for n in nodes}, outputs=("Identity:0",), source="<test>")
    assert sink_reshapes(graph)[0] is graph


@settings(max_examples=25, deadline=None)
@given(
    sequence=st.integers(1, 5),
    heads=st.integers(1, 3),
    head_width=st.integers(1, 4),
    bias_axes=st.lists(st.booleans(), min_size=4, max_size=4),
    op=st.sampled_from(["AddV2", "Mul", "Sub", "Maximum", "RealDiv"]),
    view_first=st.booleans(),
)
def test_values_never_change(sequence, heads, head_width, bias_axes, op, view_first):
    """Any bias shape (each axis of ``[1, T, H, D]`` kept or 1, leading ones dropped), either
    operand order: the pass keeps the values, and moves the node exactly when the bias covers a
    whole suffix of the axes."""
    full = (1, sequence, heads, head_width)
    bias_shape = tuple(size if keep else 1 for size, keep in zip(full, bias_axes, strict=True))
    while len(bias_shape) > 0 and bias_shape[0] == 1 and bias_axes[4 - len(bias_shape)] is False:
        bias_shape = bias_shape[1:]
    nodes = _projection_nodes(bias_shape, heads=heads, head_width=head_width, sequence=sequence, width=3)
    bias = nodes[5]
    if op == "RealDiv":
        value = np.abs(bias.attrs["value"]) + 0.5
        nodes[5] = const("bias", value.astype(np.float32))
    inputs = ("split_heads:0", "bias:0") if view_first else ("bias:0", "split_heads:0")
    nodes[6] = Node("add", op, inputs)
    graph = typed_graph(nodes, ["Identity:0"])
    sunk, report = sink_reshapes(graph)
    assert_same_values(graph, sunk, _feeds(graph))
    aligned = (1,) * (4 - len(bias_shape)) + bias_shape
    varying = [axis for axis, size in enumerate(aligned) if size != 1]
    whole_suffix = not varying or aligned[varying[0] :] == full[varying[0] :]
    if varying and varying[0] >= 2:  # a suffix inside the split heads axis [H, D] -> H*D
        whole_suffix = whole_suffix and (varying[0] == 2 or heads == 1)
    assert report.rewrites == int(whole_suffix), (bias_shape, full)
