"""Op expansion: the pass applies every op's expansion rule (``OpDefinition.expand``), whatever
the op, and the expanded graph computes what the original one did."""

from __future__ import annotations

import numpy as np
from graph_evaluation import assert_same_values, assert_types_consistent, ops_of, typed_graph
from hand_built_graphs import const, placeholder

from polytf.graph import Node, TensorType
from polytf.ops import ELEMENTWISE, Arity, Expansion, OpDefinition, lookup
from polytf.ops.coverage import rewritten_ops
from polytf.ops.table import OP_TABLE
from polytf.passes.expansion import expand_ops


def _graph():
    return typed_graph(
        [
            placeholder("x", (3, 6)),
            const("axis", np.int32(1)),
            const("first", np.int32(0)),
            const("depth", np.int32(4)),
            const("on", np.float32(2.0)),
            const("off", np.float32(-1.0)),
            Node("parts", "Split", ("axis:0", "x:0"), attrs={"num_split": 3}),
            Node("rows", "Unpack", ("x:0",), attrs={"num": 3, "axis": 0}),
            Node("largest", "ArgMax", ("parts:1", "axis:0"), attrs={"output_type": "int32"}),
            Node("hot", "OneHot", ("largest:0", "depth:0", "on:0", "off:0")),
            Node("smallest", "ArgMin", ("rows:2", "first:0")),
            Node("sum", "AddV2", ("parts:2", "parts:0")),
        ],
        ["hot:0", "smallest:0", "sum:0", "rows:0"],
    )


def test_expansion_replaces_every_expanded_op_and_keeps_the_values():
    graph = _graph()
    expanded, report = expand_ops(graph)
    assert not {"Split", "Unpack", "ArgMax", "ArgMin", "OneHot"} & set(ops_of(expanded))
    assert report.rewrites == 5 and report.detail == "1 ArgMax, 1 ArgMin, 1 OneHot, 1 Split, 1 Unpack expanded"
    assert expanded.outputs == graph.outputs and expanded.nodes["rows"].op == "Identity"  # a graph output keeps its name
    assert expanded.nodes["hot"].op == "SelectV2" and expanded.nodes["smallest"].op == "Min"  # the last op takes the name
    assert_types_consistent(expanded)
    assert_same_values(graph, expanded, {"x": np.random.default_rng(3).standard_normal((3, 6)).astype(np.float32)})


def test_the_pass_applies_any_op_rule_and_leaves_untyped_graphs_alone(monkeypatch):
    """An op the pass has never heard of is expanded by its own rule: the pass reads the trait."""

    def twice(node, builder):
        x_type = builder.type_of(node.inputs[0])
        return {0: builder.add(Node(node.name, "AddV2", (node.inputs[0], node.inputs[0]), node.control_inputs, {"T": "float32"}), x_type)}

    definition = OpDefinition(
        "TestTwice", ELEMENTWISE, lambda node, types, constants: (types[0],), lambda node, inputs: (2 * inputs[0],), arity=Arity(1, 1),
        expand=Expansion(twice, "an addition"),
    )
    monkeypatch.setitem(OP_TABLE, "TestTwice", definition)
    graph = typed_graph([placeholder("x", (4,)), Node("t", "TestTwice", ("x:0",)), Node("r", "Relu", ("t:0",))], ["r:0"])
    expanded, report = expand_ops(graph)
    assert ops_of(expanded) == ["Placeholder", "AddV2", "Relu"] and report.detail == "1 TestTwice expanded"
    assert expanded.types["t:0"] == TensorType((4,))
    assert_same_values(graph, expanded, {"x": np.arange(4, dtype=np.float32) - 2})
    assert rewritten_ops()["TestTwice"] == "compiled as an addition (expansion pass)"
    untyped = graph.with_changes(types={}, constants={})
    assert expand_ops(untyped)[0] is untyped


def test_rewritten_ops_are_the_ops_with_an_expansion_rule():
    notes = rewritten_ops()
    assert sorted(notes) == ["ArgMax", "ArgMin", "BiasAdd", "Bucketize", "Conv2D", "Conv2DBackpropInput", "Conv3DBackpropInputV2", "OneHot", "Split", "SplitV", "Unpack"]
    assert notes["Split"] == "compiled as one Slice per output (expansion pass)"
    assert all(lookup(op).expand is not None for op in notes)
