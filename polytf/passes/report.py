"""What a graph pass changed: node and edge counts before and after.

Every pass is a pure function ``Graph -> (Graph, PassReport)``; the report is what
``polytf show --passes`` prints. Edges are data inputs plus control inputs, as in a
GraphDef's ``input`` lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from polytf.graph import Graph


def edge_count(graph: Graph) -> int:
    """Data plus control inputs over all nodes of ``graph``."""
    return sum(len(node.inputs) + len(node.control_inputs) for node in graph.nodes.values())


@dataclass(frozen=True)
class PassReport:
    """What one run of a graph pass changed.

    Attributes:
        name: the pass, e.g. ``"constant folding"``.
        nodes_before: node count of the input graph.
        nodes_after: node count of the output graph.
        edges_before: data + control inputs of the input graph.
        edges_after: data + control inputs of the output graph.
        rewrites: local rewrites the pass applied (folded nodes, merged duplicates, ...);
            0 with equal counts means the pass changed nothing.
        detail: a short description of the rewrites, e.g. ``"263 Identity, 1 NoOp removed"``.
        round: the pipeline round the pass ran in (1 for the first).
    """

    name: str
    nodes_before: int
    nodes_after: int
    edges_before: int = 0
    edges_after: int = 0
    rewrites: int = 0
    detail: str = ""
    round: int = 1

    @classmethod
    def between(cls, name: str, before: Graph, after: Graph, rewrites: int = 0, detail: str = "") -> PassReport:
        """The report of a pass that turned ``before`` into ``after`` (the same graph when
        the pass changed nothing: its edges are counted once)."""
        edges_before = edge_count(before)
        edges_after = edges_before if after is before else edge_count(after)
        return cls(name, len(before.nodes), len(after.nodes), edges_before, edges_after, rewrites, detail)

    @property
    def changed(self) -> bool:
        """True when the pass rewrote something or the counts differ."""
        return bool(self.rewrites) or self.nodes_before != self.nodes_after or self.edges_before != self.edges_after

    def __str__(self) -> str:
        text = f"{self.name}: {self.nodes_before} -> {self.nodes_after} nodes, {self.edges_before} -> {self.edges_after} edges"
        return text + (f" ({self.detail})" if self.detail else "")
