"""Constant folding: constant subgraphs become Const nodes, with a size cap, never
touching placeholder-dependent nodes."""

from __future__ import annotations

import numpy as np
from graph_evaluation import assert_same_values, assert_types_consistent, ops_of, typed_graph
from hand_built_graphs import const, placeholder

from polytf.config import GraphPassConfig
from polytf.graph import Node
from polytf.passes.constant_folding import fold_constants


def _graph(size=4):
    rng = np.random.default_rng(0)
    return typed_graph(
        [
            placeholder("x", (3, size)),
            const("a", rng.standard_normal(size).astype(np.float32)),
            const("b", rng.standard_normal(size).astype(np.float32)),
            const("shape", np.array([1, size], dtype=np.int32)),
            Node("ab", "Mul", ("a:0", "b:0")),
            Node("sum", "AddV2", ("ab:0", "a:0")),
            Node("row", "Reshape", ("sum:0", "shape:0")),
            Node("y", "AddV2", ("x:0", "row:0")),
            Node("z", "Relu", ("y:0",)),
        ],
        ["z:0"],
    )


def test_constant_chain_folds_into_one_const_of_the_same_name():
    graph = _graph()
    optimized, report = fold_constants(graph)
    assert ops_of(optimized) == ["Placeholder", "Const", "AddV2", "Relu"]
    row = optimized.nodes["row"]
    a, b = graph.nodes["a"].attr("value"), graph.nodes["b"].attr("value")
    np.testing.assert_array_equal(row.attr("value"), (a * b + a).reshape(1, 4))
    assert row.attr("dtype") == "float32"
    assert optimized.constants["row:0"].shape == (1, 4)
    assert report.rewrites == 3 and (report.nodes_before, report.nodes_after) == (9, 4)
    assert (report.edges_before, report.edges_after) == (9, 3)
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    assert_same_values(graph, optimized, {"x": x})
    assert_types_consistent(optimized)


def test_size_cap_keeps_large_results_computed():
    graph = _graph(size=8)
    optimized, report = fold_constants(graph, GraphPassConfig(constant_folding_max_elements=4))
    assert not report.changed
    assert ops_of(optimized) == ops_of(graph)


def test_placeholder_dependent_nodes_are_not_folded_but_a_static_shape_is():
    graph = typed_graph(
        [
            placeholder("x", (2, 5)),
            Node("shape", "Shape", ("x:0",), attrs={"out_type": "int32"}),
            Node("reshaped", "Reshape", ("x:0", "shape:0")),
            Node("relu", "Relu", ("reshaped:0",)),
        ],
        ["relu:0"],
    )
    optimized, _ = fold_constants(graph)
    assert [(n.name, n.op) for n in optimized.nodes.values()] == [("x", "Placeholder"), ("shape", "Const"), ("reshaped", "Reshape"), ("relu", "Relu")]
    np.testing.assert_array_equal(optimized.nodes["shape"].attr("value"), [2, 5])
    assert optimized.nodes["shape"].attr("value").dtype == np.int32
    assert_types_consistent(optimized)


def test_unregistered_ops_are_never_evaluated():
    from polytf.graph import Graph

    nodes = [const("seed", np.array([2, 2], dtype=np.int32)), Node("noise", "RandomUniform", ("seed:0",), attrs={"dtype": "float32"})]
    graph = Graph(nodes={n.name: n for n in nodes}, outputs=("noise:0",))
    optimized, report = fold_constants(graph)
    assert optimized.nodes["noise"].op == "RandomUniform" and not report.changed
