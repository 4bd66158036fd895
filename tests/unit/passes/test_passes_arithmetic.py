"""Arithmetic simplification: neutral elements, double negation, constant chains, Sub of
a constant."""

from __future__ import annotations

import numpy as np
import pytest
from graph_evaluation import assert_same_values, assert_types_consistent, ops_of, typed_graph
from hand_built_graphs import const, placeholder

from polytf.graph import Node
from polytf.passes.arithmetic import simplify_arithmetic


def _feeds(shape=(3, 4)):
    return {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize(
    "op, constant_value, constant_first",
    [("Mul", 1.0, False), ("Mul", 1.0, True), ("AddV2", 0.0, False), ("Add", 0.0, True), ("Sub", 0.0, False)],
)
def test_neutral_elements_vanish(op, constant_value, constant_first):
    inputs = ("c:0", "x:0") if constant_first else ("x:0", "c:0")
    graph = typed_graph(
        [placeholder("x", (3, 4)), const("c", np.full((1, 4), constant_value, np.float32)), Node("op", op, inputs), Node("out", "Relu", ("op:0",))],
        ["out:0"],
    )
    optimized, report = simplify_arithmetic(graph)
    assert ops_of(optimized) == ["Placeholder", "Relu"]
    assert optimized.nodes["out"].inputs == ("x:0",)
    assert report.rewrites == 1
    assert_same_values(graph, optimized, _feeds())


def test_a_neutral_constant_that_broadcasts_x_to_a_larger_shape_stays():
    graph = typed_graph(
        [placeholder("x", (4,)), const("ones", np.ones((2, 4), np.float32)), Node("op", "Mul", ("x:0", "ones:0")), Node("out", "Relu", ("op:0",))],
        ["out:0"],
    )
    optimized, report = simplify_arithmetic(graph)
    assert "Mul" in ops_of(optimized) and not report.changed


def test_double_negation_vanishes_and_a_simplified_output_keeps_its_name():
    graph = typed_graph([placeholder("x", (3, 4)), Node("n1", "Neg", ("x:0",)), Node("n2", "Neg", ("n1:0",))], ["n2:0"])
    optimized, report = simplify_arithmetic(graph)
    assert [(n.name, n.op, n.inputs) for n in optimized.nodes.values()] == [("x", "Placeholder", ()), ("n2", "Identity", ("x:0",))]
    assert_same_values(graph, optimized, _feeds())
    assert_types_consistent(optimized)


def test_constant_chains_combine_and_sub_becomes_add_of_the_negation():
    rng = np.random.default_rng(3)
    c1, c2, c3, c4 = (rng.standard_normal(4).astype(np.float32) for _ in range(4))
    graph = typed_graph(
        [
            placeholder("x", (3, 4)),
            const("c1", c1),
            const("c2", c2),
            const("c3", c3),
            const("c4", c4),
            Node("m1", "Mul", ("x:0", "c1:0")),
            Node("m2", "Mul", ("c2:0", "m1:0")),
            Node("s", "Sub", ("m2:0", "c3:0")),
            Node("a", "AddV2", ("s:0", "c4:0")),
            Node("out", "Relu", ("a:0",)),
        ],
        ["out:0"],
    )
    optimized, report = simplify_arithmetic(graph)
    assert ops_of(optimized) == ["Placeholder", "Const", "Mul", "Const", "AddV2", "Relu"]
    multiply, add = optimized.nodes["m2"], optimized.nodes["a"]
    assert multiply.inputs[0] == "x:0" and add.inputs[0] == "m2:0"
    np.testing.assert_allclose(optimized.constants[multiply.inputs[1]], c1 * c2, rtol=1e-6)
    np.testing.assert_allclose(optimized.constants[add.inputs[1]], c4 - c3, rtol=1e-6)
    assert "Sub(x, c) -> AddV2(x, -c)" in report.detail
    assert_same_values(graph, optimized, _feeds())
    assert_types_consistent(optimized)


def test_a_chain_whose_inner_node_has_another_reader_is_left_alone():
    graph = typed_graph(
        [
            placeholder("x", (3, 4)),
            const("c1", np.float32(2.0)),
            const("c2", np.float32(3.0)),
            Node("m1", "Mul", ("x:0", "c1:0")),
            Node("m2", "Mul", ("m1:0", "c2:0")),
            Node("out", "AddV2", ("m1:0", "m2:0")),
        ],
        ["out:0"],
    )
    optimized, report = simplify_arithmetic(graph)
    assert not report.changed and set(optimized.nodes) == set(graph.nodes)
