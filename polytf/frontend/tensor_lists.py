"""``TensorList`` ops resolved at compile time: a list read becomes a slice, a stacked list a ``Pack``.

TensorFlow 2 writes the per-step inputs and outputs of a ``while`` loop as ``TensorList``
values (``DT_VARIANT`` tensors; tensorflow/core/ops/list_ops.cc): Keras' RNN layers split
the sequence with ``TensorListFromTensor``, read step ``t`` with ``TensorListGetItem``, write
each step's output with ``TensorListSetItem`` into a ``TensorListReserve`` list, and stack
the list after the loop with ``TensorListStack``. Once the loop is unrolled
(:mod:`polytf.frontend.while_loops`) every index is a compile-time constant
(:class:`~polytf.frontend.static_values.StaticValues`), so each list is a known sequence of
tensors and the list ops become ordinary ones, as XLA's ``tensor_list`` lowering does for
static lists (tensorflow/compiler/tf2xla/kernels/tensor_list_ops.cc):

=========================================== ===================================================
list op                                     becomes (named like the list op)
=========================================== ===================================================
``TensorListGetItem(FromTensor(x), i)``     ``StridedSlice(x, [i], [i + 1], [1], shrink_axis_mask=1)``
``TensorListGetItem(SetItem(l, i, v), i)``  ``Identity(v)``
``TensorListStack(l)``, items ``v_0..v_n-1`` ``Pack(v_0, ..., v_n-1, axis=0)``
``TensorListStack(FromTensor(x))``          ``Identity(x)``
``TensorListLength(l)``                     ``Const`` (the length, int32)
=========================================== ===================================================

``TensorListReserve``, ``TensorListFromTensor``, ``TensorListSetItem`` (and ``Identity`` of a
list) produce list values and disappear. Any other use of a list is a
:class:`~polytf.errors.GraphError` naming the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorboard.compat.proto import types_pb2

from polytf.errors import GraphError
from polytf.frontend.static_values import StaticValues
from polytf.graph.graph import split_tensor_name, tensor_name

__all__ = ["resolve_tensor_lists", "LIST_OPS"]

#: ops that make a list value
LIST_PRODUCERS = frozenset({"TensorListReserve", "TensorListFromTensor", "TensorListSetItem"})
#: ops that read a list and give ordinary tensors
LIST_READERS = frozenset({"TensorListGetItem", "TensorListStack", "TensorListLength"})
#: data inputs of each list op (tensorflow/core/ops/list_ops.cc)
_ARITY = {
    "TensorListReserve": 2,
    "TensorListFromTensor": 2,
    "TensorListSetItem": 3,
    "TensorListGetItem": 3,
    "TensorListStack": 2,
    "TensorListLength": 1,
}
#: ops that hand a list on unchanged
LIST_FORWARDERS = frozenset({"Identity", "Snapshot", "StopGradient"})
LIST_OPS = LIST_PRODUCERS | LIST_READERS

_WHY = "polytf resolves TensorList ops at compile time, after unrolling the loops that fill and read them"


@dataclass(frozen=True)
class ListValue:
    """A list known at compile time.

    Attributes:
        node: the node that made this value (for messages).
        element_dtype: the items' ``DataType`` enum value.
        length: the number of items, when known (``TensorListReserve``).
        split: the tensor a ``TensorListFromTensor`` splits along axis 0 (item ``i`` is
            ``split[i]``), or None.
        items: items written by ``TensorListSetItem``, by index.
    """

    node: str
    element_dtype: int
    length: int | None
    split: str | None = None
    items: Mapping[int, str] = field(default_factory=dict)


def _topological_order(nodes: Mapping[str, Any]) -> list[str] | None:
    """Kahn's algorithm over data and control inputs; None when the graph has a cycle."""
    users: dict[str, list[str]] = {name: [] for name in nodes}
    missing: dict[str, int] = {}
    for name, node in nodes.items():
        producers = {item[1:] if item.startswith("^") else split_tensor_name(item)[0] for item in node.input} & nodes.keys()
        missing[name] = len(producers)
        for producer in producers:
            users[producer].append(name)
    ready = [name for name in nodes if missing[name] == 0]
    order: list[str] = []
    while ready:
        name = ready.pop()
        order.append(name)
        for user in users[name]:
            missing[user] -= 1
            if missing[user] == 0:
                ready.append(user)
    return order if len(order) == len(nodes) else None


class _ListResolver:
    """One pass over a GraphDef's nodes in topological order (:func:`resolve_tensor_lists`)."""

    def __init__(self, graph_def: Any, source: str):
        self.source = source
        self.node_class = type(graph_def.node[0])
        self.nodes = {node.name: node for node in graph_def.node}
        self.names = set(self.nodes)
        self.values = StaticValues(graph_def.node, source)
        self.lists: dict[str, ListValue | GraphError] = {}  # tensor -> its list value, or why it has none
        self.removed: set[str] = set()
        self.replacements: dict[str, list[Any]] = {}  # node -> the nodes that replace it

    def _error(self, node: Any, problem: str) -> GraphError:
        return GraphError(f"node '{node.name}' ({node.op}) in '{self.source}': {problem}; {_WHY}.")

    def _list(self, node: Any, position: int) -> ListValue:
        tensor = tensor_name(*split_tensor_name(node.input[position]))
        value = self.lists.get(tensor)
        if isinstance(value, GraphError):
            raise value
        if value is None:
            raise self._error(
                node,
                f"its input '{tensor}' is not a list polytf can follow (only TensorListReserve, TensorListFromTensor, TensorListSetItem and Identity of them)",
            )
        return value

    def _index(self, node: Any, position: int, what: str) -> int:
        tensor = node.input[position]
        value = self.values.value(tensor)
        if value is None or value.size != 1 or value.dtype.kind not in "iu":
            sources = (
                ", ".join(f"'{n}' ({op})" for n, op in self.values.unknown_sources(tensor)) or "a value known only at run time"
            )
            raise self._error(node, f"its {what} ('{tensor}') is not a compile-time integer: it depends on {sources}")
        return int(value.reshape(()))

    def _element_dtype(self, node: Any) -> int:
        return int(node.attr["element_dtype"].type) if "element_dtype" in node.attr else types_pb2.DT_FLOAT

    def visit(self, name: str) -> None:
        node = self.nodes[name]
        if node.op in _ARITY:
            count = sum(not item.startswith("^") for item in node.input)
            if count != _ARITY[node.op] or any(item.startswith("^") for item in node.input[:count]):
                raise self._error(node, f"it has {count} data inputs; {node.op} takes {_ARITY[node.op]}, control inputs last")
        if node.op in LIST_PRODUCERS:
            try:
                self.lists[tensor_name(name)] = self._produce(node)
            except GraphError as error:  # raised if the list is read: a list nobody reads does not matter
                self.lists[tensor_name(name)] = error
            self.removed.add(name)
        elif node.op in LIST_FORWARDERS and node.input and tensor_name(*split_tensor_name(node.input[0])) in self.lists:
            self.lists[tensor_name(name)] = self.lists[tensor_name(*split_tensor_name(node.input[0]))]
            self.removed.add(name)
        elif node.op in LIST_READERS:
            self.replacements[name] = self._read(node)
        else:
            for item in node.input:
                if not item.startswith("^") and tensor_name(*split_tensor_name(item)) in self.lists:
                    raise self._error(node, f"it reads the list '{item}', which polytf cannot turn into tensors for this op")

    def _produce(self, node: Any) -> ListValue:
        dtype = self._element_dtype(node)
        if node.op == "TensorListReserve":
            length = self._index(node, 1, "num_elements")
            if length < 0:
                raise self._error(node, f"num_elements is {length}; a list of unknown length cannot be resolved")
            return ListValue(node.name, dtype, length)
        if node.op == "TensorListFromTensor":
            return ListValue(node.name, dtype, None, split=tensor_name(*split_tensor_name(node.input[0])))
        value = self._list(node, 0)  # TensorListSetItem(input_handle, index, item)
        index = self._index(node, 1, "index")
        if index < 0 or (value.length is not None and index >= value.length):
            raise self._error(node, f"it sets item {index} of a list of {value.length} items")
        return ListValue(node.name, value.element_dtype, value.length, value.split, {**value.items, index: node.input[2]})

    def _read(self, node: Any) -> list[Any]:
        value = self._list(node, 0)
        controls = [item for item in node.input if item.startswith("^")]
        if node.op == "TensorListLength":
            if value.length is None:
                raise self._error(
                    node, f"the length of list '{value.node}' (a TensorListFromTensor) is not known before shape inference"
                )
            return [self._int32_constant(node.name, [value.length], scalar=True, controls=controls)]
        if node.op == "TensorListGetItem":
            index = self._index(node, 1, "index")
            if index < 0 or (value.length is not None and index >= value.length):
                raise self._error(node, f"it reads item {index} of a list of {value.length} items")
            if index in value.items:
                return [self._node(node.name, "Identity", [value.items[index], *controls], T=value.element_dtype)]
            if value.split is None:
                raise self._error(node, f"it reads item {index} of list '{value.node}', which is never set")
            constants = [
                self._int32_constant(self._fresh(f"{node.name}/{part}"), [v])
                for part, v in (("begin", index), ("end", index + 1), ("strides", 1))
            ]
            inputs = [value.split, *(tensor_name(c.name) for c in constants), *controls]
            slice_node = self._node(
                node.name, "StridedSlice", inputs, T=value.element_dtype, Index=types_pb2.DT_INT32, shrink_axis_mask=1
            )
            for mask in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask"):
                slice_node.attr[mask].i = 0
            return [*constants, slice_node]
        # TensorListStack
        if value.split is not None and not value.items:
            return [self._node(node.name, "Identity", [value.split, *controls], T=value.element_dtype)]
        if value.length is None:
            raise self._error(
                node, f"it stacks list '{value.node}', a TensorListFromTensor with items replaced, whose length is not known here"
            )
        unset = [i for i in range(value.length) if i not in value.items and value.split is None]
        if unset:
            raise self._error(
                node,
                f"it stacks list '{value.node}', whose item{'s' if len(unset) > 1 else ''} {unset[:8]} {'are' if len(unset) > 1 else 'is'} never set",
            )
        items = [value.items[i] for i in range(value.length)]
        return [self._node(node.name, "Pack", [*items, *controls], T=value.element_dtype, N=len(items), axis=0)]

    def _fresh(self, name: str) -> str:
        candidate, count = name, 1
        while candidate in self.names:
            count += 1
            candidate = f"{name}_{count}"
        self.names.add(candidate)
        return candidate

    def _node(self, name: str, op: str, inputs: list[str], **attributes: int) -> Any:
        node = self.node_class()
        node.name = name
        node.op = op
        node.input.extend(inputs)
        for key, value in attributes.items():
            if key in ("T", "Index"):
                node.attr[key].type = value
            else:
                node.attr[key].i = value
        return node

    def _int32_constant(self, name: str, values: list[int], scalar: bool = False, controls: list[str] | None = None) -> Any:
        node = self._node(name, "Const", list(controls or []))
        node.attr["dtype"].type = types_pb2.DT_INT32
        tensor = node.attr["value"].tensor
        tensor.dtype = types_pb2.DT_INT32
        if not scalar:
            tensor.tensor_shape.dim.add(size=len(values))
        tensor.int_val.extend(values)
        return node


def resolve_tensor_lists(graph_def: Any, source: str = "<graphdef>") -> Any:
    """``graph_def`` with its ``TensorList`` ops replaced by ordinary ops (module docstring).

    Args:
        graph_def: an acyclic ``GraphDef`` (loops unrolled); not modified.
        source: the file, for messages.

    Returns:
        ``graph_def`` itself when it has no list op (or still has a cycle, which
        :func:`~polytf.frontend.graphdef.graph_from_graphdef` reports); otherwise a new
        ``GraphDef`` of the same class, library and versions.

    Raises:
        GraphError: a list op whose index is not a compile-time constant, reads or writes
            out of range, reads an item never set, or a list read by another op (naming the
            node and the reason).
    """
    if not any(node.op in LIST_OPS for node in graph_def.node):
        return graph_def
    resolver = _ListResolver(graph_def, source)
    order = _topological_order(resolver.nodes)
    if order is None:
        return graph_def
    for name in order:
        resolver.visit(name)
    resolved = type(graph_def)()
    resolved.versions.CopyFrom(graph_def.versions)
    resolved.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.name in resolver.removed:
            continue
        for replacement in resolver.replacements.get(node.name, [node]):
            copy = resolved.node.add()
            copy.CopyFrom(replacement)
            del copy.input[:]
            copy.input.extend(item for item in replacement.input if not (item.startswith("^") and item[1:] in resolver.removed))
    return resolved
