"""Pruning: keep only the fan-in of the graph's outputs.

Source: Grappler's model pruner (tensorflow/core/grappler/optimizers/model_pruner.cc)
removes nodes that cannot reach a fetch node; this pass does the same over data and
control edges.
"""

from __future__ import annotations

from polytf.graph import Graph, split_tensor_name
from polytf.graph.passes.report import PassReport

__all__ = ["PassReport", "live_nodes", "prune_to_outputs"]


def live_nodes(graph: Graph) -> set[str]:
    """Names of the nodes the outputs depend on (through data or control inputs), plus
    every placeholder (the model's interface, kept even when unused)."""
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
    keep.update(node.name for node in graph.placeholders)
    return keep


def prune_to_outputs(graph: Graph) -> tuple[Graph, PassReport]:
    """Drop every node the outputs do not depend on (placeholders are kept: they are the
    model's interface, even when unused); ``types`` and ``constants`` follow."""
    keep = live_nodes(graph)
    nodes = {name: node for name, node in graph.nodes.items() if name in keep}
    types = {t: v for t, v in graph.types.items() if split_tensor_name(t)[0] in nodes}
    constants = {t: v for t, v in graph.constants.items() if split_tensor_name(t)[0] in nodes}
    pruned = graph.with_changes(nodes=nodes, types=types, constants=constants)
    removed = len(graph.nodes) - len(nodes)
    return pruned, PassReport.between("prune", graph, pruned, removed, f"{removed} dead nodes removed" if removed else "")
