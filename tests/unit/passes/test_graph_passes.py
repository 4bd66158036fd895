"""Pruning and fusion partitioning."""

from __future__ import annotations

import numpy as np
from hand_built_graphs import build_graph, const, graph_matmul_bias_relu, placeholder

from polytf.graph import Graph, Node
from polytf.lowering.shape_inference import infer_types
from polytf.passes.fusion import partition
from polytf.passes.pruning import prune_to_outputs


def test_pruning_keeps_only_the_fan_in_of_outputs():
    nodes = [placeholder("x", (2, 3)), placeholder("unused", (4,)), Node("relu", "Relu", ("x:0",)), Node("dead", "Relu", ("x:0",)), Node("dead2", "Relu", ("dead:0",))]
    graph = infer_types(Graph(nodes={n.name: n for n in nodes}, outputs=("relu:0",)))
    pruned, report = prune_to_outputs(graph)
    assert set(pruned.nodes) == {"x", "unused", "relu"}
    assert (report.nodes_before, report.nodes_after) == (5, 3)
    assert "dead:0" not in pruned.types


def test_epilogue_fuses_into_matmul():
    groups = partition(graph_matmul_bias_relu())
    assert len(groups) == 1
    assert groups[0].nodes == ("mm", "bias", "relu")
    assert groups[0].outputs == ("relu:0",)
    assert set(groups[0].inputs) == {"x:0", "w:0", "b:0"}


def test_no_fusion_gives_one_group_per_op():
    assert [g.nodes for g in partition(graph_matmul_bias_relu(), fuse=False)] == [("mm",), ("bias",), ("relu",)]


def test_shared_intermediate_becomes_a_group_output():
    rng = np.random.default_rng(0)
    graph = build_graph(
        [
            placeholder("x", (4, 5)),
            const("w", rng.standard_normal((5, 6)).astype(np.float32)),
            Node("mm", "MatMul", ("x:0", "w:0")),
            Node("relu", "Relu", ("mm:0",)),
            Node("softmax", "Softmax", ("mm:0",)),
        ],
        ["relu:0", "softmax:0"],
    )
    groups = partition(graph)
    first = groups[0]
    assert first.nodes == ("mm", "relu")
    assert "mm:0" in first.outputs and "relu:0" in first.outputs
    assert groups[1].nodes == ("softmax",)


def test_fusion_never_creates_a_cycle():
    # add reads the matmul (group 0) and the softmax (group 1, which reads group 0):
    # fusing add into group 0 would make 0 and 1 depend on each other.
    rng = np.random.default_rng(0)
    graph = build_graph(
        [
            placeholder("x", (4, 5)),
            const("w", rng.standard_normal((5, 6)).astype(np.float32)),
            Node("mm", "MatMul", ("x:0", "w:0")),
            Node("softmax", "Softmax", ("mm:0",)),
            Node("add", "AddV2", ("mm:0", "softmax:0")),
        ],
        ["add:0"],
    )
    groups = partition(graph)
    position = {node: i for i, g in enumerate(groups) for node in g.nodes}
    assert position["add"] >= position["softmax"]
