"""The graph IR: a TensorFlow graph after parsing, as immutable values.

A tensor is named the TensorFlow way, ``"node:port"``; :func:`tensor_name` gives the
canonical form. Nodes are kept in topological order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from polytf.graph.tensor_type import TensorType


def tensor_name(node: str, port: int = 0) -> str:
    """Canonical tensor name ``"node:port"``."""
    return f"{node}:{port}"


def split_tensor_name(name: str) -> tuple[str, int]:
    """``"dense/MatMul:1"`` -> ``("dense/MatMul", 1)``; a bare node name means port 0."""
    node, sep, port = name.rpartition(":")
    if sep and port.isascii() and port.isdigit():
        return node, int(port)
    return name, 0


@dataclass(frozen=True)
class Node:
    """One operation of the graph.

    Attributes:
        name: unique node name, e.g. ``"sequential/dense/MatMul"``.
        op: TensorFlow op type, e.g. ``"MatMul"``.
        inputs: data inputs as canonical tensor names ``"producer:port"``, in order.
        control_inputs: names of nodes that must run before this one (``^name`` in a GraphDef).
        attrs: attributes decoded to Python values (ints, floats, str, bools, lists,
            dtype names, shapes as tuples, tensors as numpy arrays).
    """

    name: str
    op: str
    inputs: tuple[str, ...] = ()
    control_inputs: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def output(self, port: int = 0) -> str:
        """Canonical name of this node's output ``port``."""
        return tensor_name(self.name, port)


@dataclass(frozen=True)
class Graph:
    """A dataflow graph with known inputs and outputs.

    Attributes:
        nodes: nodes by name, in topological order.
        outputs: canonical tensor names the caller wants back, in order.
        types: tensor name -> :class:`TensorType` (filled by shape inference).
        constants: tensor name -> numpy value, for tensors known at compile time.
        source: file the graph was read from, for messages.
    """

    nodes: Mapping[str, Node]
    outputs: tuple[str, ...]
    types: Mapping[str, TensorType] = field(default_factory=dict)
    constants: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<graph>"

    def __post_init__(self) -> None:
        for name in ("nodes", "types", "constants"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(dict(value)))

    @property
    def placeholders(self) -> tuple[Node, ...]:
        """The graph's inputs (``Placeholder`` nodes), in node order."""
        return tuple(n for n in self.nodes.values() if n.op == "Placeholder")

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def producer(self, tensor: str) -> Node:
        """The node that produces ``tensor``."""
        return self.nodes[split_tensor_name(tensor)[0]]

    def consumers(self) -> dict[str, list[Node]]:
        """Tensor name -> nodes that read it as a data input."""
        result: dict[str, list[Node]] = {}
        for node in self.nodes.values():
            for tensor in node.inputs:
                result.setdefault(tensor, []).append(node)
        return result

    def type_of(self, tensor: str) -> TensorType:
        return self.types[tensor]

    def with_changes(self, **changes: Any) -> Graph:
        """A copy with some fields replaced (graphs are immutable)."""
        return replace(self, **changes)
