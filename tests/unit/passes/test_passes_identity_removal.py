"""Identity removal: identities, NoOps and control edges go; graph output names stay."""

from __future__ import annotations

import numpy as np
from graph_evaluation import assert_same_values, assert_types_consistent, ops_of, typed_graph
from hand_built_graphs import placeholder

from polytf.graph import Graph, Node
from polytf.passes.identity_removal import remove_identities


def _feeds():
    return {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}


def test_identity_chains_collapse_and_the_output_name_moves_to_the_producer():
    graph = typed_graph(
        [
            placeholder("x", (2, 3)),
            Node("read", "Identity", ("x:0",)),
            Node("stop", "StopGradient", ("read:0",)),
            Node("relu", "Relu", ("stop:0",)),
            Node("snap", "Snapshot", ("relu:0",)),
            Node("Identity", "Identity", ("snap:0",)),
        ],
        ["Identity:0"],
    )
    optimized, report = remove_identities(graph)
    assert ops_of(optimized) == ["Placeholder", "Relu"]
    assert optimized.nodes["Identity"].inputs == ("x:0",), "the Relu now carries the output's name"
    assert (report.nodes_before, report.nodes_after, report.edges_before, report.edges_after) == (6, 2, 5, 1)
    assert report.rewrites == 4 and "1 StopGradient" in report.detail
    assert_same_values(graph, optimized, _feeds())
    assert_types_consistent(optimized)


def test_an_output_identity_of_a_placeholder_or_of_another_output_stays():
    graph = typed_graph(
        [
            placeholder("x", (2, 3)),
            Node("out_x", "Identity", ("x:0",)),
            Node("relu", "Relu", ("x:0",)),
            Node("out_relu", "Identity", ("relu:0",)),
        ],
        ["out_x:0", "relu:0", "out_relu:0"],
    )
    optimized, report = remove_identities(graph)
    assert set(optimized.nodes) == {"x", "out_x", "relu", "out_relu"}
    assert not report.changed
    assert_same_values(graph, optimized, _feeds())


def test_noop_and_control_edges_onto_pure_nodes_are_removed_control_edges_onto_unknown_ops_stay():
    nodes = [
        placeholder("x", (2, 3)),
        Node("read", "Identity", ("x:0",)),
        Node("side_effect", "AssignVariableOp"),
        Node("group", "NoOp", (), ("read", "side_effect")),
        Node("relu", "Relu", ("read:0",), ("group",)),
    ]
    graph = Graph(nodes={n.name: n for n in nodes}, outputs=("relu:0",))  # untyped: AssignVariableOp is no polytf op
    optimized, report = remove_identities(graph)
    assert set(optimized.nodes) == {"x", "side_effect", "relu"}
    assert optimized.nodes["relu"].inputs == ("x:0",)
    assert optimized.nodes["relu"].control_inputs == ("side_effect",)
    assert (report.edges_before, report.edges_after) == (5, 2)
