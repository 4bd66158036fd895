"""Which nodes a graph's outputs depend on.

Source: Grappler's model pruner (tensorflow/core/grappler/optimizers/model_pruner.cc) keeps
the nodes that can reach a fetch node; the frontend decodes only those nodes' constants, and
the pruning pass (:mod:`polytf.passes.pruning`) drops the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from polytf.graph.graph import Node
from polytf.graph.tensor_names import producer_name


def live_node_names(nodes: Mapping[str, Node], outputs: Iterable[str]) -> set[str]:
    """Names of the nodes of ``nodes`` that ``outputs`` (tensor names) depend on, through
    data or control inputs, plus every placeholder; one walk over the live edges.

    Raises:
        KeyError: an input names a node not in ``nodes``.
    """
    keep: set[str] = set()
    stack = [producer_name(t) for t in outputs]
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        node = nodes[name]
        stack.extend(map(producer_name, node.inputs))
        stack.extend(node.control_inputs)
    keep.update(name for name, node in nodes.items() if node.op == "Placeholder")
    return keep


__all__ = ["live_node_names"]
