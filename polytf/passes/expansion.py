"""Op expansion: every node whose op has an expansion rule (``OpDefinition.expand``) is
rewritten into ops polytf compiles, before fusion.

An op whose rule is owned by its module (:mod:`polytf.ops.expansion`): ``ArgMax``, ``ArgMin``
and ``OneHot`` become comparisons, selections and reductions over a constant array of
positions (:mod:`polytf.ops.index_ops`); ``Split``, ``SplitV`` and ``Unpack`` one ``Slice`` per
used output (:mod:`polytf.ops.split`). This pass only applies the rules, as MLIR's greedy
pattern driver applies the rewrite patterns ops register.

A rule adds typed nodes in front of the node and says which tensor now computes each output
some node reads. Readers are rewired to those tensors; the node disappears, or, when its
output 0 is a graph output, stays as an ``Identity`` of its replacement (a view: no run-time
cost; see :meth:`GraphEditor.forward`). A rule may instead replace the node under its own name
(its last op), so that nothing needs rewiring. Left alone: an untyped graph, nodes whose
outputs shape inference folded to constants, and nodes with an output ``k > 0`` that is a
graph output (a name the user sees; lowering then says what is wrong).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from polytf.graph import Graph, Node, TensorType
from polytf.ops import lookup
from polytf.passes.editor import GraphEditor
from polytf.passes.report import PassReport


class _Builder:
    """The :class:`polytf.ops.expansion.GraphBuilder` of one node: ``editor`` edited in front of
    ``node``."""

    def __init__(self, editor: GraphEditor, node: Node) -> None:
        self.editor, self.node = editor, node
        #: a new node took the expanded node's name
        self.replaced = False

    def constant_value(self, tensor: str) -> np.ndarray | None:
        return self.editor.constant_value(tensor)

    def type_of(self, tensor: str) -> TensorType | None:
        return self.editor.type_of(tensor)

    def is_read(self, tensor: str) -> bool:
        return bool(self.editor.consumers(tensor)) or self.editor.is_output(tensor)

    def readers(self, tensor: str) -> tuple[Node, ...]:
        return tuple(self.editor.nodes[name] for name in self.editor.consumers(tensor))

    def definition(self, op: str):
        return lookup(op)

    def fresh_name(self, base: str) -> str:
        return self.editor.fresh_name(base)

    def constant(self, base: str, value: np.ndarray) -> str:
        return self.editor.add_constant(base, value, before=self.node.name)

    def add(self, node: Node, output_type: TensorType) -> str:
        self.replaced = self.replaced or node.name == self.node.name
        self.editor.set_node(node, output_types=[output_type], before=self.node.name)
        return node.output(0)


def expand_ops(graph: Graph) -> tuple[Graph, PassReport]:
    """Apply the expansion rule of every node whose op has one (see the module docstring).

    Returns:
        The new graph and its report (``rewrites``: nodes expanded; ``detail``: per op).

    Raises:
        ShapeError: a rule found a node its op does not accept (shape inference reports it
            first in the pipeline).
    """
    return _apply_rules(graph, "expand", "op expansion", "expanded")


def rewrite_matrix_products(graph: Graph) -> tuple[Graph, PassReport]:
    """Apply the ``matrix_product`` rule of every node whose op has one: a node that is a
    matrix product in disguise (a 1x1, stride-1 ``Conv2D``) becomes a ``MatMul`` of views.
    Run after batch-norm folding (which folds into the convolution's filter) and before
    reshape sinking (which moves the element-wise consumers above the output view).

    Returns:
        The new graph and its report (``rewrites``: nodes rewritten; ``detail``: per op).

    Raises:
        ShapeError: as :func:`expand_ops`.
    """
    return _apply_rules(graph, "matrix_product", "matrix products", "rewritten as MatMul")


def _apply_rules(graph: Graph, rule: str, pass_name: str, verb: str) -> tuple[Graph, PassReport]:
    """Apply ``getattr(definition, rule)`` (an :class:`~polytf.ops.expansion.Expansion`) to
    every node whose op has one; the report is named ``pass_name``, its detail "N Op ``verb``"."""
    editor = GraphEditor(graph)
    expanded: Counter[str] = Counter()
    for name, original in graph.nodes.items() if editor.typed else ():
        definition = lookup(original.op)
        expansion = getattr(definition, rule) if definition is not None else None
        if expansion is None:
            continue
        node = editor.nodes[name]
        if editor.constant_value(node.output(0)) is not None or any(editor.is_output(node.output(port)) for port in range(1, editor.output_count(node))):
            continue
        builder = _Builder(editor, node)
        replacements = expansion.rewrite(node, builder)
        if replacements is None:
            continue
        mapping = {node.output(port): tensor for port, tensor in replacements.items() if tensor != node.output(port)}
        editor.rewire(mapping)
        if not builder.replaced:
            if node.output(0) in mapping:
                editor.forward(name, mapping[node.output(0)])
            else:
                editor.remove(name)
        expanded[node.op] += 1
    editor.rewrites = sum(expanded.values())
    detail = ", ".join(f"{count} {op}" for op, count in sorted(expanded.items()))
    return editor.finish(pass_name, f"{detail} {verb}" if detail else "")
