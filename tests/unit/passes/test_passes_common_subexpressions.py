"""Common-subexpression elimination: equal nodes and equal constants merge."""

from __future__ import annotations

import numpy as np
from graph_evaluation import assert_same_values, assert_types_consistent, ops_of, typed_graph
from hand_built_graphs import const, placeholder

from polytf.config import GraphPassConfig
from polytf.graph import Node
from polytf.passes.common_subexpressions import eliminate_common_subexpressions


def _feeds():
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((2, 4)).astype(np.float32), "y": rng.standard_normal((2, 4)).astype(np.float32)}


def test_duplicated_chains_commuted_operands_and_equal_constants_merge():
    c = np.arange(4, dtype=np.float32)
    graph = typed_graph(
        [
            placeholder("x", (2, 4)),
            placeholder("y", (2, 4)),
            const("c1", c),
            const("c2", c.copy()),
            Node("m1", "Mul", ("x:0", "y:0")),
            Node("m2", "Mul", ("y:0", "x:0")),
            Node("a1", "AddV2", ("m1:0", "c1:0")),
            Node("a2", "AddV2", ("m2:0", "c2:0")),
            Node("r1", "Relu", ("a1:0",)),
            Node("r2", "Relu", ("a2:0",)),
            Node("out", "Sub", ("r1:0", "r2:0")),
        ],
        ["out:0"],
    )
    optimized, report = eliminate_common_subexpressions(graph)
    assert ops_of(optimized) == ["Placeholder", "Placeholder", "Const", "Mul", "AddV2", "Relu", "Sub"]
    assert optimized.nodes["out"].inputs == ("r1:0", "r1:0")
    assert report.rewrites == 4 and (report.nodes_before, report.nodes_after) == (11, 7)
    assert (report.edges_before, report.edges_after) == (12, 7)
    assert_same_values(graph, optimized, _feeds())
    assert_types_consistent(optimized)


def test_different_attrs_different_constants_and_graph_outputs_do_not_merge():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    graph = typed_graph(
        [
            placeholder("x", (2, 4)),
            placeholder("y", (2, 4)),
            const("w", w),
            const("w_big", np.concatenate([w, w])[:4]),  # equal values, but above the cap below
            const("v", w + 1),
            Node("p", "MatMul", ("x:0", "w:0"), attrs={"transpose_b": False}),
            Node("q", "MatMul", ("x:0", "w:0"), attrs={"transpose_b": True}),
            Node("s", "MatMul", ("x:0", "v:0")),
            Node("t", "MatMul", ("x:0", "w_big:0")),
            Node("r1", "Relu", ("y:0",)),
            Node("r2", "Relu", ("y:0",)),
        ],
        ["p:0", "q:0", "s:0", "t:0", "r1:0", "r2:0"],
    )
    optimized, report = eliminate_common_subexpressions(graph, GraphPassConfig(cse_max_constant_elements=8))
    assert set(optimized.nodes) == set(graph.nodes)
    assert not report.changed
    assert_same_values(graph, optimized, _feeds())
