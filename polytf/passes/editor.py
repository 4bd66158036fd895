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
from polytf.graph.reachability import live_node_names
from polytf.graph.tensor_names import producer_name
from polytf.ops import const_node, const_value, identity_node
from polytf.passes.pruning import is_pruned, mark_pruned
from polytf.passes.report import PassReport


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
        self.output_nodes: frozenset[str] = frozenset(map(producer_name, graph.outputs))
        self._output_set: frozenset[str] = frozenset(graph.outputs)
        self.typed = bool(graph.types)
        self.rewrites = 0
        #: True once an edit changed the working copy (:meth:`finish` returns the input
        #: graph itself when nothing was edited and nothing is dead)
        self.edited = False
        self._fresh = itertools.count(1)
        # Indexes built on first use (a pass that edits nothing builds none of them) and
        # then kept up to date by every edit, so that no edit scans the graph:
        #: node name -> (position in the input graph, offset of a node added before it)
        self._order_table: dict[str, tuple[float, float]] | None = None
        #: node name -> names of the nodes that read one of its outputs or depend on it by
        #: a control edge
        self._readers_table: dict[str, set[str]] | None = None
        #: node name -> its tensors in ``types`` or ``constants``
        self._tensors_table: dict[str, set[str]] | None = None

    @property
    def _order(self) -> dict[str, tuple[float, float]]:
        if self._order_table is None:
            self._order_table = {name: (float(i), 0.0) for i, name in enumerate(self.graph.nodes)}
        return self._order_table

    @property
    def _readers(self) -> dict[str, set[str]]:
        if self._readers_table is None:
            self._readers_table = {}
            for node in self.nodes.values():
                self._index(node)
        return self._readers_table

    @property
    def _tensors(self) -> dict[str, set[str]]:
        if self._tensors_table is None:
            table: dict[str, set[str]] = {}
            for tensors in (self.types, self.constants):
                for tensor in tensors:
                    table.setdefault(producer_name(tensor), set()).add(tensor)
            self._tensors_table = table
        return self._tensors_table

    def _index(self, node: Node) -> None:
        readers = self._readers_table
        for producer in {*map(producer_name, node.inputs), *node.control_inputs}:
            readers.setdefault(producer, set()).add(node.name)

    def _unindex(self, node: Node) -> None:
        for producer in {*map(producer_name, node.inputs), *node.control_inputs}:
            readers = self._readers_table.get(producer)
            if readers is not None:
                readers.discard(node.name)

    def _put(self, node: Node) -> None:
        """Store ``node`` (new or replacing the node of its name) and index its inputs."""
        self.edited = True
        old = self.nodes.get(node.name)
        self.nodes[node.name] = node
        if self._readers_table is not None:
            if old is not None:
                self._unindex(old)
            self._index(node)

    def _set_tensor(self, table: dict, tensor: str, value) -> None:
        table[tensor] = value
        if self._tensors_table is not None:
            self._tensors_table.setdefault(producer_name(tensor), set()).add(tensor)

    # --- queries -----------------------------------------------------------------------

    def producer(self, tensor: str) -> Node | None:
        return self.nodes.get(producer_name(tensor))

    def constant_value(self, tensor: str) -> np.ndarray | None:
        """The compile-time value of ``tensor``: a ``Const`` output or a value shape
        inference recorded in ``graph.constants``; None when not known."""
        if tensor in self.constants:
            return np.asarray(self.constants[tensor])
        node, port = split_tensor_name(tensor)
        producer = self.nodes.get(node)
        return const_value(producer) if producer is not None and port == 0 else None

    def type_of(self, tensor: str) -> TensorType | None:
        return self.types.get(tensor)

    def output_count(self, node: Node) -> int:
        """How many outputs of ``node`` have a recorded type (0 in an untyped graph)."""
        count = 0
        while node.output(count) in self.types:
            count += 1
        return count

    def readers(self, name: str) -> list[str]:
        """Names of the nodes that read an output of node ``name`` or have a control input
        on it, in program order."""
        return sorted(self._readers.get(name, ()), key=lambda reader: self._order[reader])

    def consumers(self, tensor: str) -> list[str]:
        """Names of the nodes that read ``tensor`` as a data input (once per node, in
        program order)."""
        return [reader for reader in self.readers(producer_name(tensor)) if tensor in self.nodes[reader].inputs]

    def is_output(self, tensor: str) -> bool:
        return tensor in self._output_set

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
        if node.name not in self._order:
            anchor = self._order.get(before or "", (float(len(self._order)), 0.0))
            self._order[node.name] = (anchor[0], anchor[1] - 1e6 + next(self._fresh))
        self._put(node)
        if output_types is not None:
            self._drop_tensors(node.name)
            for port, output_type in enumerate(output_types):
                if output_type is not None:
                    self._set_tensor(self.types, tensor_name(node.name, port), output_type)
        value = const_value(node)
        if value is not None:
            self._set_tensor(self.constants, node.output(0), value)
            if self.typed:
                self._set_tensor(self.types, node.output(0), TensorType(tuple(int(d) for d in value.shape), value.dtype.name))

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
        affected: set[str] = set()
        for producer in {*map(producer_name, mapping), *controls}:
            affected |= self._readers.get(producer, set())
        for name in affected:
            node = self.nodes[name]
            if any(t in mapping for t in node.inputs) or any(c in controls for c in node.control_inputs):
                inputs = tuple(mapping.get(t, t) for t in node.inputs)
                control_inputs = tuple(dict.fromkeys(controls.get(c, c) for c in node.control_inputs))
                self._put(Node(node.name, node.op, inputs, control_inputs, node.attrs))

    def forward(self, name: str, tensor: str) -> None:
        """Node ``name`` (output 0) now stands for ``tensor``: consumers read ``tensor``; the
        node is removed, or becomes ``Identity(tensor)`` when it produces a graph output."""
        node = self.nodes[name]
        self.rewire({node.output(0): tensor})
        if node.output(0) in self._output_set:
            output_type = self.types.get(node.output(0))
            dtype = output_type.dtype if output_type is not None else None
            self.set_node(identity_node(name, tensor, node.control_inputs, dtype), output_types=[output_type])
        else:
            self.remove(name)

    def rename(self, old: str, new: str) -> None:
        """Give node ``old`` the free name ``new``; every reader (data ``old:k`` and control
        ``^old``) follows, and so do its types and constants."""
        if new in self.nodes:
            raise GraphError(f"cannot rename node '{old}' to '{new}': the name is in use")
        readers = self._readers.pop(old, set())
        node = self.nodes.pop(old)
        self._unindex(node)
        self._order[new] = self._order[old]
        self._put(Node(new, node.op, node.inputs, node.control_inputs, node.attrs))
        for tensor in self._tensors.pop(old, set()):
            for table in (self.types, self.constants):
                if tensor in table:
                    self._set_tensor(table, tensor_name(new, split_tensor_name(tensor)[1]), table.pop(tensor))
        for name in readers:
            reader = self.nodes[name]
            inputs = tuple(tensor_name(new, split_tensor_name(t)[1]) if split_tensor_name(t)[0] == old else t for t in reader.inputs)
            controls = tuple(new if c == old else c for c in reader.control_inputs)
            self._put(Node(reader.name, reader.op, inputs, controls, reader.attrs))

    def remove(self, name: str) -> None:
        """Delete node ``name`` (its readers must have been rewired)."""
        self.edited = True
        node = self.nodes.pop(name)
        if self._readers_table is not None:
            self._unindex(node)
        self._drop_tensors(name)

    def _drop_tensors(self, name: str) -> None:
        for tensor in self._tensors.pop(name, set()):
            self.types.pop(tensor, None)
            self.constants.pop(tensor, None)

    # --- result --------------------------------------------------------------------------

    def finish(self, pass_name: str, detail: str = "") -> tuple[Graph, PassReport]:
        """The edited graph (topologically sorted, nodes no output needs removed, placeholders
        kept) and the pass's report; the input graph itself when nothing was edited and
        every node is live. Linear in the graph's size (plus sorting the ready nodes).

        Raises:
            GraphError: an edit left an input naming a missing node, or a cycle (a bug in
                the pass; the message names the pass).
        """
        if not self.edited:
            if is_pruned(self.graph):
                return self.graph, PassReport.between(pass_name, self.graph, self.graph, self.rewrites, detail)
            order = list(self.graph.nodes)  # a Graph's nodes are in topological order
        else:
            order = self._topological_order(pass_name)
        keep = live_node_names(self.nodes, self.outputs)
        nodes = {name: self.nodes[name] for name in order if name in keep}
        types, constants = self.types, self.constants
        if len(nodes) < len(self.nodes):
            types = {t: v for t, v in types.items() if producer_name(t) in nodes}
            constants = {t: v for t, v in constants.items() if producer_name(t) in nodes}
        result = mark_pruned(self.graph.with_changes(nodes=nodes, types=types, constants=constants, outputs=self.outputs))
        return result, PassReport.between(pass_name, self.graph, result, self.rewrites, detail)

    def _topological_order(self, pass_name: str) -> list[str]:
        """Node names in topological order, ties (nodes ready together) broken by program
        order (Kahn's algorithm with a heap). Program order itself when it is topological
        (the usual case: a pass puts new nodes before the node they serve), which is what
        Kahn's algorithm would return then, found in one sort and one check of every edge."""
        for tensor in self.outputs:
            if producer_name(tensor) not in self.nodes:
                raise GraphError(f"graph pass '{pass_name}' removed the producer of graph output '{tensor}'")
        position = self._order
        program_order = sorted(self.nodes, key=position.__getitem__)
        if all(
            producer in self.nodes and position[producer] < position[name]
            for name, node in self.nodes.items()
            for producer in (*map(producer_name, node.inputs), *node.control_inputs)
        ):
            return program_order
        users: dict[str, list[str]] = {name: [] for name in self.nodes}
        missing: dict[str, int] = {}
        for name, node in self.nodes.items():
            producers = {*map(producer_name, node.inputs), *node.control_inputs}
            for producer in producers:
                if producer not in users:
                    raise GraphError(f"graph pass '{pass_name}' left node '{name}' reading missing node '{producer}'")
                users[producer].append(name)
            missing[name] = len(producers)
        ready = [(position[name], name) for name, count in missing.items() if count == 0]
        heapq.heapify(ready)
        order: list[str] = []
        while ready:
            _, name = heapq.heappop(ready)
            order.append(name)
            for user in users[name]:
                missing[user] -= 1
                if missing[user] == 0:
                    heapq.heappush(ready, (position[user], user))
        if len(order) != len(self.nodes):
            stuck = sorted(set(self.nodes) - set(order))[:5]
            raise GraphError(f"graph pass '{pass_name}' created a cycle through {stuck}")
        return order
