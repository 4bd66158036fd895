"""Pruning: keep only the fan-in of the graph's outputs.

Source: Grappler's model pruner (tensorflow/core/grappler/optimizers/model_pruner.cc)
removes nodes that cannot reach a fetch node; this pass does the same over data and
control edges.
"""

from __future__ import annotations

import weakref

from polytf.graph import Graph
from polytf.graph.reachability import live_node_names
from polytf.graph.tensor_names import producer_name
from polytf.passes.report import PassReport

__all__ = ["PassReport", "is_pruned", "live_node_names", "live_nodes", "mark_pruned", "prune_to_outputs"]

#: Graphs known to have no dead node, by identity (graphs are immutable); weak, so an entry
#: goes with its graph. The pipeline hands every pass a pruned graph: this spares each pass
#: a walk of the whole graph to find out again.
_PRUNED: weakref.WeakValueDictionary[int, Graph] = weakref.WeakValueDictionary()


def mark_pruned(graph: Graph) -> Graph:
    """Record that every node of ``graph`` is live (the caller has just pruned it); returns it."""
    _PRUNED[id(graph)] = graph
    return graph


def is_pruned(graph: Graph) -> bool:
    """True when every node of ``graph`` is live (remembered per graph)."""
    if _PRUNED.get(id(graph)) is graph:
        return True
    if len(live_nodes(graph)) == len(graph.nodes):
        mark_pruned(graph)
        return True
    return False


def live_nodes(graph: Graph) -> set[str]:
    """Names of the nodes the outputs depend on (through data or control inputs), plus
    every placeholder (the model's interface, kept even when unused)."""
    return live_node_names(graph.nodes, graph.outputs)


def prune_to_outputs(graph: Graph) -> tuple[Graph, PassReport]:
    """Drop every node the outputs do not depend on (placeholders are kept: they are the
    model's interface, even when unused); ``types`` and ``constants`` follow. A graph with
    nothing to drop is returned as it is."""
    if is_pruned(graph):
        return graph, PassReport.between("prune", graph, graph)
    keep = live_nodes(graph)
    nodes = {name: node for name, node in graph.nodes.items() if name in keep}
    types = {t: v for t, v in graph.types.items() if producer_name(t) in nodes}
    constants = {t: v for t, v in graph.constants.items() if producer_name(t) in nodes}
    pruned = mark_pruned(graph.with_changes(nodes=nodes, types=types, constants=constants))
    removed = len(graph.nodes) - len(nodes)
    return pruned, PassReport.between("prune", graph, pruned, removed, f"{removed} dead nodes removed" if removed else "")
