"""Pruning: keep only the fan-in of the graph's outputs.

Source: Grappler's model pruner (tensorflow/core/grappler/optimizers/model_pruner.cc)
removes nodes that cannot reach a fetch node; this pass does the same over data and
control edges.
"""

from __future__ import annotations

from dataclasses import dataclass

from polytf.graph import Graph, split_tensor_name


@dataclass(frozen=True)
class PassReport:
    """What a graph pass changed."""

    name: str
    nodes_before: int
    nodes_after: int
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.name}: {self.nodes_before} -> {self.nodes_after} nodes{(' (' + self.detail + ')') if self.detail else ''}"


def prune_to_outputs(graph: Graph) -> tuple[Graph, PassReport]:
    """Drop every node the outputs do not depend on (placeholders are kept: they are the
    model's interface, even when unused)."""
    keep: set[str] = set()
    stack = [split_tensor_name(t)[0] for t in graph.outputs]
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        node = graph.nodes[name]
        stack.extend(split_tensor_name(t)[0] for t in node.inputs)
        stack.extend(node.control_inputs)
    nodes = {name: node for name, node in graph.nodes.items() if name in keep or node.op == "Placeholder"}
    types = {t: v for t, v in graph.types.items() if split_tensor_name(t)[0] in nodes}
    constants = {t: v for t, v in graph.constants.items() if split_tensor_name(t)[0] in nodes}
    pruned = graph.with_changes(nodes=nodes, types=types, constants=constants)
    return pruned, PassReport("prune", len(graph.nodes), len(nodes))
