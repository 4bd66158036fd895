"""Normalization fusion: a float32 reduction over axes joins the kernel of its element-wise
producer (XLA's input fusion), an element-wise node joins the kernel of a sibling reading the
same inputs, and the broadcast consumers of the reductions (``(x - mean) * rsqrt(var)``) join
the reductions' kernel; so a LayerNorm is one kernel: two passes over each row while it is in
cache. A reduction never joins a contraction's kernel, and data movement never joins."""

from __future__ import annotations

import numpy as np
import pytest
from graph_evaluation import typed_graph
from hand_built_graphs import const, placeholder

from polytf.graph import Node
from polytf.passes.fusion import partition


def _layer_norm_nodes(rows=6, width=16, seed=0, producer="Relu"):
    """TensorFlow's LayerNorm arithmetic (Keras 3 freezes ``LayerNormalization`` so) on
    ``producer(x)``: mean, squared difference, variance, rsqrt, scale and shift."""
    rng = np.random.default_rng(seed)
    nodes = [placeholder("x", (rows, width))]
    if producer == "MatMul":
        nodes += [const("w", rng.standard_normal((width, width)).astype(np.float32)), Node("h", "MatMul", ("x:0", "w:0"))]
    else:
        nodes.append(Node("h", producer, ("x:0",)))
    return nodes + [
        const("axis", np.int32(-1)),
        Node("mean", "Mean", ("h:0", "axis:0"), attrs={"keep_dims": True}),
        Node("difference", "SquaredDifference", ("h:0", "mean:0")),
        Node("variance", "Mean", ("difference:0", "axis:0"), attrs={"keep_dims": True}),
        const("epsilon", np.float32(1e-6)),
        Node("variance_epsilon", "AddV2", ("variance:0", "epsilon:0")),
        Node("rsqrt", "Rsqrt", ("variance_epsilon:0",)),
        const("gamma", rng.uniform(0.5, 1.5, width).astype(np.float32)),
        Node("scale", "Mul", ("rsqrt:0", "gamma:0")),
        Node("centered", "Sub", ("h:0", "mean:0")),
        Node("normalized", "Mul", ("centered:0", "scale:0")),
        const("beta", rng.standard_normal(width).astype(np.float32)),
        Node("out", "AddV2", ("normalized:0", "beta:0")),
    ]


def _group_of(groups, node_name):
    (group,) = [g for g in groups if node_name in g.nodes]
    return group


def test_a_layer_norm_after_a_matmul_is_one_kernel():
    """After a MatMul (a residual add in a matmul's epilogue): the mean starts the LayerNorm's
    kernel, and everything else joins it (10 kernels unfused; 6 with producer-consumer fusion
    alone)."""
    graph = typed_graph(_layer_norm_nodes(producer="MatMul"), ["out:0"])
    groups = partition(graph)
    assert [g.nodes for g in groups] == [
        ("h",),
        ("mean", "difference", "variance", "variance_epsilon", "rsqrt", "scale", "centered", "normalized", "out"),
    ]
    assert len(partition(graph, fuse=False)) == 10


def test_a_layer_norm_after_an_element_wise_node_joins_its_kernel():
    groups = partition(typed_graph(_layer_norm_nodes(producer="Relu"), ["out:0"]))
    assert len(groups) == 1 and groups[0].nodes[:2] == ("h", "mean")


def test_siblings_reading_the_same_inputs_share_a_kernel():
    """TensorFlow's own LayerNorm arithmetic (the GPT block's): ``x - mean`` and
    ``SquaredDifference(x, mean)`` both read ``x`` and ``mean``."""
    nodes = [
        placeholder("x", (4, 8)),
        placeholder("y", (4, 8)),
        Node("difference", "Sub", ("x:0", "y:0")),
        Node("squared", "SquaredDifference", ("x:0", "y:0")),
        Node("other", "AddV2", ("x:0", "x:0")),
        Node("out", "Mul", ("difference:0", "squared:0")),
    ]
    groups = partition(typed_graph(nodes, ["out:0", "other:0"]))
    assert _group_of(groups, "squared").nodes == ("difference", "squared", "out")
    assert _group_of(groups, "other").nodes == ("other",)


def test_data_movement_and_contractions_take_no_reduction():
    rng = np.random.default_rng(2)
    nodes = [
        placeholder("x", (4, 8)),
        const("permutation", np.array([1, 0], dtype=np.int32)),
        Node("transposed", "Transpose", ("x:0", "permutation:0")),
        const("axis", np.int32(-1)),
        Node("sum", "Sum", ("transposed:0", "axis:0"), attrs={"keep_dims": True}),
        const("w", rng.standard_normal((8, 8)).astype(np.float32)),
        Node("product", "MatMul", ("x:0", "w:0")),
        Node("maximum", "Max", ("product:0", "axis:0"), attrs={"keep_dims": True}),
    ]
    groups = partition(typed_graph(nodes, ["sum:0", "maximum:0"]))
    assert [g.nodes for g in groups] == [("transposed",), ("sum",), ("product",), ("maximum",)]


def test_a_bool_reduction_keeps_a_kernel_of_its_own():
    nodes = [
        placeholder("x", (4, 8)),
        const("zero", np.float32(0.0)),
        Node("positive", "Greater", ("x:0", "zero:0")),
        const("axis", np.int32(1)),
        Node("all", "All", ("positive:0", "axis:0"), attrs={"keep_dims": False}),
    ]
    groups = partition(typed_graph(nodes, ["all:0"]))
    assert [g.nodes for g in groups] == [("positive",), ("all",)]


@pytest.mark.parametrize("producer", ["Relu", "MatMul"])
def test_the_compiled_layer_norm_matches_numpy(producer):
    from polytf.compiler.model_builder import build_model
    from polytf.compiler.preparation import PreparedModel
    from polytf.lowering.lowered_kernel import lower_group

    graph = typed_graph(_layer_norm_nodes(rows=9, width=40, producer=producer), ["out:0"])
    groups = partition(graph)
    model = build_model(PreparedModel(graph, groups, tuple(lower_group(graph, g) for g in groups), ()), threads=2)
    x = np.random.default_rng(5).standard_normal((9, 40)).astype(np.float32) * 3 + 1
    h = x @ graph.constants["w:0"] if producer == "MatMul" else np.maximum(x, 0)
    h64 = h.astype(np.float64)
    mean = h64.mean(-1, keepdims=True)
    variance = ((h64 - mean) ** 2).mean(-1, keepdims=True)
    expected = (h64 - mean) / np.sqrt(variance + 1e-6) * graph.constants["gamma:0"] + graph.constants["beta:0"]
    got = model(x=x)["out"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * np.max(np.abs(expected)) + 1e-6)
