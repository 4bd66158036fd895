"""Loop rerolling: Keras' TimeDistributed pattern (one slice per step, the same chain of
nodes on each, a Pack) becomes one chain over the stacked rows, with the same values; any
difference between the steps, or a step node read elsewhere, leaves the graph alone."""

from __future__ import annotations

import numpy as np
import pytest
from graph_evaluation import assert_same_values, assert_types_consistent, ops_of, typed_graph
from hand_built_graphs import const, placeholder
from hypothesis import given, settings
from hypothesis import strategies as st

from polytf.graph import Node
from polytf.passes.loop_rerolling import reroll_loops
from polytf.passes.pipeline import optimize

STEPS, ROWS, FEATURES, UNITS = 5, 3, 6, 4


def _unrolled(steps=STEPS, weights=None, transpose_a=False, shared_step=None, order=None, rows=ROWS):
    """``Pack([relu(x[t] @ W_t + b) for t in order])`` over ``x: [steps, rows, FEATURES]``."""
    rng = np.random.default_rng(0)
    weights = weights or ["w"] * steps
    order = order or list(range(steps))
    nodes = [placeholder("x", (steps, rows, FEATURES)), const("b", rng.standard_normal(UNITS).astype(np.float32)), const("stride", np.int32([1]))]
    for name in sorted(set(weights)):
        shape = (FEATURES, UNITS) if not transpose_a else (rows, UNITS)
        nodes.append(const(name, rng.standard_normal(shape).astype(np.float32)))
    outputs = []
    for step, t in enumerate(order):
        nodes += [
            const(f"begin{step}", np.int32([t])), const(f"end{step}", np.int32([t + 1])),
            Node(f"slice{step}", "StridedSlice", ("x:0", f"begin{step}:0", f"end{step}:0", "stride:0"), attrs={"T": "float32", "Index": "int32", "shrink_axis_mask": 1}),
            Node(f"mul{step}", "MatMul", (f"slice{step}:0", f"{weights[step]}:0"), attrs={"T": "float32", "transpose_a": transpose_a}),
            Node(f"bias{step}", "BiasAdd", (f"mul{step}:0", "b:0"), attrs={"T": "float32"}),
            Node(f"relu{step}", "Relu", (f"bias{step}:0",), attrs={"T": "float32"}),
        ]
        outputs.append(f"relu{step}:0")
    nodes.append(Node("stack", "Pack", tuple(outputs), attrs={"T": "float32", "N": steps, "axis": 0}))
    graph_outputs = ["stack:0"] + ([f"bias{shared_step}:0"] if shared_step is not None else [])
    return typed_graph(nodes, graph_outputs)


def _feeds(graph):
    shape = graph.types["x:0"].shape
    return {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}


@settings(max_examples=8, deadline=None)
@given(st.integers(2, 7), st.integers(1, 4))
def test_time_distributed_steps_become_one_chain_with_the_same_values(steps, rows):
    graph = _unrolled(steps, rows=rows)
    rewritten, report = reroll_loops(graph)
    assert report.rewrites == 1
    ops = ops_of(rewritten)
    assert ops.count("MatMul") == 1 and ops.count("BiasAdd") == 1 and "Pack" not in ops and "StridedSlice" not in ops
    assert_types_consistent(rewritten)
    assert_same_values(graph, rewritten, _feeds(graph))


@pytest.mark.parametrize(
    "variant",
    [
        {"weights": ["w", "w", "v", "w", "w"]},  # one step has its own weight
        {"transpose_a": True},  # rows of the output are columns of the input
        {"order": [0, 1, 3, 2, 4]},  # step 2 reads x[3]
        {"shared_step": 2},  # a step's intermediate is read elsewhere (a graph output)
    ],
)
def test_steps_that_differ_are_left_alone(variant):
    graph = _unrolled(**variant)
    rewritten, report = reroll_loops(graph)
    assert report.rewrites == 0 and ops_of(rewritten).count("MatMul") == STEPS


def test_the_graph_optimizer_rerolls_and_keeps_the_values():
    graph = _unrolled()
    optimized, reports = optimize(graph)
    assert any(r.name == "loop rerolling" and r.rewrites == 1 for r in reports)
    assert_same_values(graph, optimized, _feeds(graph))
