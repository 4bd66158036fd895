"""Evaluate a graph node by node with the op table's numpy references (the test
oracle of the graph-pass tests: a pass must not change a graph's values)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from polytf.graph import Graph
from polytf.ops import lookup


def evaluate(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Graph output tensor -> value, for placeholder values ``feeds`` (by placeholder name)."""
    values: dict[str, np.ndarray] = {}
    for node in graph.nodes.values():
        if node.op == "Placeholder":
            values[node.output(0)] = np.asarray(feeds[node.name], dtype=np.float32)
            continue
        definition = lookup(node.op)
        assert definition is not None, f"no reference for {node.op}"
        results = definition.reference(node, [values[t] for t in node.inputs])
        for port, result in enumerate(results):
            values[node.output(port)] = np.asarray(result)
    return {tensor: values[tensor] for tensor in graph.outputs}


def assert_same_values(before: Graph, after: Graph, feeds: Mapping[str, np.ndarray], rtol: float = 1e-5) -> None:
    """``before`` and ``after`` have the same outputs with the same values (float32 rounding aside)."""
    assert after.outputs == before.outputs
    expected, actual = evaluate(before, feeds), evaluate(after, feeds)
    for tensor in before.outputs:
        scale = float(np.max(np.abs(expected[tensor]))) if expected[tensor].size else 0.0
        np.testing.assert_allclose(actual[tensor], expected[tensor], rtol=rtol, atol=rtol * scale + 1e-6, err_msg=tensor)


def typed_graph(nodes, outputs) -> Graph:
    """A typed graph of ``nodes`` (not pruned: the passes under test must do that)."""
    from polytf.lowering.shape_inference import infer_types

    return infer_types(Graph(nodes={n.name: n for n in nodes}, outputs=tuple(outputs), source="<test>"))


def assert_types_consistent(graph: Graph) -> None:
    """The types and constants a pass kept in step equal a fresh shape inference's."""
    from polytf.lowering.shape_inference import infer_types

    fresh = infer_types(graph.with_changes(types={}, constants={}))
    assert dict(graph.types) == dict(fresh.types)
    assert set(graph.constants) <= set(fresh.constants)


def ops_of(graph: Graph) -> list[str]:
    return [node.op for node in graph.nodes.values()]
