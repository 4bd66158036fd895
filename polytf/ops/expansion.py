"""Op expansion: an op rewritten into other ops before lowering, by a rule its own module owns.

Some ops have no lowering of their own: an ``ArgMax`` compares values with *positions*
(statement bodies read array elements, not iterator values), a ``Split`` has several computed
outputs (the lowering binds output 0 of each node). Their modules write each node as ops
polytf compiles (MLIR's rewrite patterns); the graph pass :mod:`polytf.passes.expansion`
applies every op's rule through a :class:`GraphBuilder`, which edits the graph for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType


class GraphBuilder(Protocol):
    """What an expansion rule may read from the typed graph being rewritten and add to it.

    New nodes are placed before the node being expanded; a new node of that node's own name
    replaces it (its readers and the graph's outputs then need no rewiring).
    """

    def constant_value(self, tensor: str) -> np.ndarray | None:
        """The compile-time value of ``tensor``, or None."""

    def type_of(self, tensor: str) -> TensorType | None:
        """The static type of ``tensor``, or None."""

    def is_read(self, tensor: str) -> bool:
        """Whether some node reads ``tensor`` or it is a graph output."""

    def readers(self, tensor: str) -> tuple[Node, ...]:
        """The nodes that read ``tensor`` as a data input."""

    def definition(self, op: str):
        """The op table's :class:`~polytf.ops.definition.OpDefinition` of ``op``, or None (a
        rule reads other ops' traits through it)."""

    def fresh_name(self, base: str) -> str:
        """A node name not in use: ``base`` or ``base_N``."""

    def constant(self, base: str, value: np.ndarray) -> str:
        """A new ``Const`` node named after ``base``; returns its output tensor."""

    def add(self, node: Node, output_type: TensorType) -> str:
        """Add ``node`` (one output, of ``output_type``); returns its output tensor."""


#: rewrite(node, builder) -> output port -> the tensor that now computes it, for every output
#: some node reads (or the graph outputs); None when the node cannot be expanded (nothing was
#: added then).
RewriteFunction = Callable[[Node, GraphBuilder], "Mapping[int, str] | None"]


@dataclass(frozen=True)
class Expansion:
    """How an op is rewritten into other ops (``OpDefinition.expand``).

    Attributes:
        rewrite: the rule (see :data:`RewriteFunction`); it runs on typed graphs, on nodes
            whose outputs are not compile-time constants.
        result: what the op becomes, in words (``"one Slice per output"``), for ``polytf ops``.
    """

    rewrite: RewriteFunction
    result: str


def lowered_by_expansion(reason: str) -> Callable[..., list]:
    """The ``lower`` rule of an op with an expansion rule: the op is never lowered itself.

    Args:
        reason: what the op is compiled as, completing "``{op} node '{name}'`` ...".

    Returns:
        A lowering that raises ShapeError naming the node and the pass that should have
        replaced it.
    """

    def lower(node, inputs, outputs, context) -> list:
        raise ShapeError(f"{node.op} node '{node.name}' {reason}: run polytf.passes.expansion.expand_ops (part of the graph optimizer) before lowering")

    return lower


class NodeAdder:
    """Adds the nodes that replace ``node``, named under it, typed, with its dtype attribute
    ``T`` (the helper of the expansion rules).

    Args:
        builder: the graph being rewritten.
        node: the node expanded.
    """

    def __init__(self, builder: GraphBuilder, node: Node) -> None:
        self.builder, self.node = builder, node

    def constant(self, suffix: str, value: np.ndarray) -> str:
        """A constant ``node/suffix``; returns its tensor."""
        return self.builder.constant(f"{self.node.name}/{suffix}", value)

    def op(self, suffix: str | None, op: str, inputs: tuple[str, ...], output: TensorType, **attrs) -> str:
        """A node ``node/suffix`` of ``op`` (``suffix`` None: the node itself, replaced, with its
        control inputs); returns its output tensor."""
        name = self.node.name if suffix is None else self.builder.fresh_name(f"{self.node.name}/{suffix}")
        controls = self.node.control_inputs if suffix is None else ()
        return self.builder.add(Node(name, op, inputs, controls, attrs), output)


__all__ = ["Expansion", "GraphBuilder", "NodeAdder", "RewriteFunction", "lowered_by_expansion"]
