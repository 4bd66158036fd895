"""A working copy of a graph that one pass rewrites, then freezes into a new ``Graph``.

Graphs are immutable values; a pass copies the graph into a :class:`GraphEditor`,
replaces, adds and removes nodes there, and :meth:`GraphEditor.finish` returns the new
graph (nodes re-sorted topologically, nodes that no output needs any more removed,
``types``/``constants`` kept in step) with its :class:`PassReport`.

Conventions every pass follows:

* a node replaced by a cheaper equivalent keeps its name, so its consumers and the
  graph's outputs need no rewiring;
* a node whose value becomes another tensor ``t`` is *forwarded*: its consumers read
  ``t`` instead. If the node produces a graph output (a name the user sees, e.g.
  ``"Identity:0"``) it stays, as an ``Identity`` of ``t`` (a view: no run-time cost);
* new nodes get fresh names under the node they serve (``"bn/mul/folded_filter"``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from polytf.errors import GraphError
from polytf.graph import Graph, Node, TensorType, split_tensor_name, tensor_name
from polytf.graph.passes.pruning import live_nodes
from polytf.graph.passes.report import PassReport


def const_node(name: str, value: np.ndarray, control_inputs: tuple[str, ...] = ()) -> Node:
    """A ``Const`` node the way the frontend decodes one: attrs ``value`` and ``dtype``."""
    value = np.asarray(value)
    return Node(name, "Const", (), control_inputs, {"dtype": value.dtype.name, "value": value})


class GraphEditor:
    """Mutable working copy of a :class:`Graph` (see the module docstring).

    Args:
        graph: the pass's input; typed (after shape inference) or not. When it is typed,
            new nodes must be given their output types.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: dict[str, Node] = dict(graph.nodes)
        self.types: dict[str, TensorType] = dict(graph.types)
        self.constants: dict[str, Any] = dict(graph.constants)
        self.outputs: tuple[str, ...] = tuple(graph.outputs)
        self.output_nodes: frozenset[str] = frozenset(split_tensor_name(t)[0] for t in graph.outputs)
        self.typed = bool(graph.types)
        self.rewrites = 0
        self._order: dict[str, tuple[float, float]] = {name: (float(i), 0.0) for i, name in enumerate(graph.nodes)}
        self._fresh = itertools.count(1)
        self._consumers: dict[str, list[str]] | None = None

    # --- queries -----------------------------------------------------------------------

    def producer(self, tensor: str) -> Node | None:
        return self.nodes.get(split_tensor_name(tensor)[0])

    def constant_value(self, tensor: str) -> np.ndarray | None:
        """The compile-time value of ``tensor``: a ``Const`` output or a value shape
        inference recorded in ``graph.constants``; None when not known."""
        if tensor in self.constants:
            return np.asarray(self.constants[tensor])
        node, port = split_tensor_name(tensor)
        producer = self.nodes.get(node)
        if producer is not None and producer.op == "Const" and port == 0 and producer.attr("value") is not None:
            return np.asarray(producer.attr("value"))
        return None

    def type_of(self, tensor: str) -> TensorType | None:
        return self.types.get(tensor)

    def consumers(self, tensor: str) -> list[str]:
        """Names of the nodes that read ``tensor`` as a data input (once per node)."""
        if self._consumers is None:
            table: dict[str, list[str]] = {}
            for node in self.nodes.values():
                for t in dict.fromkeys(node.inputs):
                    table.setdefault(t, []).append(node.name)
            self._consumers = table
        return self._consumers.get(tensor, [])

    def is_output(self, tensor: str) -> bool:
        return tensor in self.outputs

    def has_single_use(self, tensor: str) -> bool:
        """True when exactly one node reads ``tensor``, once, and it is no graph output."""
        users = self.consumers(tensor)
        return len(users) == 1 and self.nodes[users[0]].inputs.count(tensor) == 1 and not self.is_output(tensor)

    def fresh_name(self, base: str) -> str:
        """A node name not in use, ``base`` or ``base_N``."""
        name = base
        while name in self.nodes or name in self.graph.nodes:
            name = f"{base}_{next(self._fresh)}"
        return name

    # --- edits -------------------------------------------------------------------------

    def set_node(self, node: Node, output_types: Iterable[TensorType | None] | None = None, before: str | None = None) -> None:
        """Add ``node`` or replace the node of that name.

        Args:
            output_types: types of its outputs, port by port; given, they replace every
                recorded type of the node (None keeps the recorded ones).
            before: for a new node, the node it should precede in program order.
        """
        self._consumers = None
        if node.name not in self._order:
            anchor = self._order.get(before or "", (float(len(self._order)), 0.0))
            self._order[node.name] = (anchor[0], anchor[1] - 1e6 + next(self._fresh))
        self.nodes[node.name] = node
        if output_types is not None:
            self._drop_tensors(node.name)
            for port, output_type in enumerate(output_types):
                if output_type is not None:
                    self.types[tensor_name(node.name, port)] = output_type
        if node.op == "Const":
            self.constants[node.output(0)] = np.asarray(node.attr("value"))
            if self.typed:
                value = np.asarray(node.attr("value"))
                self.types[node.output(0)] = TensorType(tuple(int(d) for d in value.shape), value.dtype.name)

    def add_constant(self, base: str, value: np.ndarray, before: str) -> str:
        """A new ``Const`` node named after ``base``; returns its output tensor."""
        node = const_node(self.fresh_name(base), value)
        self.set_node(node, before=before)
        return node.output(0)

    def replace_with_constant(self, node: Node, value: np.ndarray) -> None:
        """``node`` (one output) becomes a ``Const`` of the same name."""
        self.set_node(const_node(node.name, value, node.control_inputs), output_types=[])

    def rewire(self, mapping: Mapping[str, str], controls: Mapping[str, str] | None = None) -> None:
        """Every data input ``old`` becomes ``mapping[old]`` and every control input ``^old``
        becomes ``^controls[old]`` (graph outputs are names and stay)."""
        controls = controls or {}
        if not mapping and not controls:
            return
        for name, node in list(self.nodes.items()):
            if any(t in mapping for t in node.inputs) or any(c in controls for c in node.control_inputs):
                inputs = tuple(mapping.get(t, t) for t in node.inputs)
                control_inputs = tuple(dict.fromkeys(controls.get(c, c) for c in node.control_inputs))
                self.nodes[name] = Node(node.name, node.op, inputs, control_inputs, node.attrs)
        self._consumers = None

    def forward(self, name: str, tensor: str) -> None:
        """Node ``name`` (output 0) now stands for ``tensor``: consumers read ``tensor``; the
        node is removed, or becomes ``Identity(tensor)`` when it produces a graph output."""
        node = self.nodes[name]
        self.rewire({node.output(0): tensor})
        if node.output(0) in self.outputs:
            output_type = self.types.get(node.output(0))
            attrs = {"T": output_type.dtype} if output_type is not None else {}
            self.set_node(Node(name, "Identity", (tensor,), node.control_inputs, attrs), output_types=[output_type])
        else:
            self.remove(name)

    def rename(self, old: str, new: str) -> None:
        """Give node ``old`` the free name ``new``; every reader (data ``old:k`` and control
        ``^old``) follows, and so do its types and constants."""
        if new in self.nodes:
            raise GraphError(f"cannot rename node '{old}' to '{new}': the name is in use")
        node = self.nodes.pop(old)
        self._order[new] = self._order[old]
        self.nodes[new] = Node(new, node.op, node.inputs, node.control_inputs, node.attrs)
        for table in (self.types, self.constants):
            for tensor in [t for t in table if split_tensor_name(t)[0] == old]:
                table[tensor_name(new, split_tensor_name(tensor)[1])] = table.pop(tensor)
        for name, reader in list(self.nodes.items()):
            reads = any(split_tensor_name(t)[0] == old for t in reader.inputs)
            if reads or old in reader.control_inputs:
                inputs = tuple(
                    tensor_name(new, split_tensor_name(t)[1]) if split_tensor_name(t)[0] == old else t for t in reader.inputs
                )
                controls = tuple(new if c == old else c for c in reader.control_inputs)
                self.nodes[name] = Node(reader.name, reader.op, inputs, controls, reader.attrs)
        self._consumers = None

    def remove(self, name: str) -> None:
        """Delete node ``name`` (its readers must have been rewired)."""
        self.nodes.pop(name)
        self._drop_tensors(name)
        self._consumers = None

    def _drop_tensors(self, name: str) -> None:
        prefix = name + ":"
        for table in (self.types, self.constants):
            for tensor in [t for t in table if t.startswith(prefix) and t[len(prefix) :].isdigit()]:
                del table[tensor]

    # --- result --------------------------------------------------------------------------

    def finish(self, pass_name: str, detail: str = "") -> tuple[Graph, PassReport]:
        """The edited graph (topologically sorted, nodes no output needs removed, placeholders
        kept) and the pass's report.

        Raises:
            GraphError: an edit left an input naming a missing node, or a cycle (a bug in
                the pass; the message names the pass).
        """
        order = self._topological_order(pass_name)
        graph = self.graph.with_changes(nodes={name: self.nodes[name] for name in order}, outputs=self.outputs)
        keep = live_nodes(graph)
        nodes = {name: node for name, node in graph.nodes.items() if name in keep}
        types = {t: v for t, v in self.types.items() if split_tensor_name(t)[0] in nodes}
        constants = {t: v for t, v in self.constants.items() if split_tensor_name(t)[0] in nodes}
        result = graph.with_changes(nodes=nodes, types=types, constants=constants)
        return result, PassReport.between(pass_name, self.graph, result, self.rewrites, detail)

    def _topological_order(self, pass_name: str) -> list[str]:
        users: dict[str, list[str]] = {name: [] for name in self.nodes}
        missing: dict[str, int] = {}
        for name, node in self.nodes.items():
            producers = {split_tensor_name(t)[0] for t in node.inputs} | set(node.control_inputs)
            for producer in producers:
                if producer not in self.nodes:
                    raise GraphError(f"graph pass '{pass_name}' left node '{name}' reading missing node '{producer}'")
                users[producer].append(name)
            missing[name] = len(producers)
        ready = [(self._order[name], name) for name, count in missing.items() if count == 0]
        heapq.heapify(ready)
        order: list[str] = []
        while ready:
            _, name = heapq.heappop(ready)
            order.append(name)
            for user in users[name]:
                missing[user] -= 1
                if missing[user] == 0:
                    heapq.heappush(ready, (self._order[user], user))
        if len(order) != len(self.nodes):
            stuck = sorted(set(self.nodes) - set(order))[:5]
            raise GraphError(f"graph pass '{pass_name}' created a cycle through {stuck}")
        for tensor in self.outputs:
            if split_tensor_name(tensor)[0] not in self.nodes:
                raise GraphError(f"graph pass '{pass_name}' removed the producer of graph output '{tensor}'")
        return order
