"""Shape inference as far as it goes: type every node of a graph that can be typed, and say
why each other node cannot.

:func:`polytf.lowering.shape_inference.infer_types` stops at the first node it rejects, as a
compiler must; ``polytf ops --model`` (:mod:`polytf.compiler.op_coverage`) wants every node
analysed that can be. :func:`type_what_can_be_typed`:

1. a node whose op is not in the op table stands in as a placeholder of the same name (dtype
   from its ``T``/``dtype``/``out_type`` attribute, else float32; shape from its
   ``_output_shapes`` attribute, or from ``input_shapes`` under its name, i.e.
   ``--input NAME:SHAPE``), so the nodes after it are analysed when that shape is known, even
   when a node before it is rejected; a node that reads its output ``k > 0`` (a placeholder
   has one) is cut out, with every node that depends on it;
2. shape inference checks nodes in topological order, and a prefix of that order reads only
   its own nodes, so the node it rejects is the last node of the shortest rejected prefix
   (found by bisection, ``log2(nodes)`` runs); that node and every node that depends on it are
   cut out and the rest is typed again, until shape inference accepts the graph.

A cut keeps the tensors the removed nodes read (but constants and inputs) as graph outputs, so
the graph passes do not prune the nodes before a cut.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from polytf.errors import GraphError, UnsupportedOpError
from polytf.graph import Graph, Node, split_tensor_name
from polytf.lowering.shape_inference import infer_types
from polytf.ops import SOURCE, lookup
from polytf.ops.sources import PLACEHOLDER

__all__ = ["NOT_IN_OP_TABLE", "PartialTyping", "type_what_can_be_typed"]

#: Why a node whose op is not in the op table is rejected.
NOT_IN_OP_TABLE = "polytf does not support this op"


@dataclass(frozen=True)
class PartialTyping:
    """The nodes of a graph shape inference accepts, and why the others are left out.

    Attributes:
        graph: the typed graph of the accepted nodes (an unsupported node as its placeholder
            stand-in; the tensors that left-out nodes read as extra outputs); None when shape
            inference failed on no node in particular (e.g. an input shape given for a name
            that is no placeholder: see ``errors``).
        input_shapes: the input shapes ``graph`` was typed with (those of cut-out placeholders
            dropped), for typing it again after the graph passes.
        rejected: node -> why it is rejected: :data:`NOT_IN_OP_TABLE`, or shape inference's
            error message (it names the node).
        not_reached: node -> the rejected node it depends on, in words.
        errors: one message per problem, each naming its node, in the order found.
    """

    graph: Graph | None
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    rejected: Mapping[str, str] = field(default_factory=dict)
    not_reached: Mapping[str, str] = field(default_factory=dict)
    errors: tuple[str, ...] = ()


def type_what_can_be_typed(graph: Graph, input_shapes: Mapping[str, Sequence[int]] | None = None) -> PartialTyping:
    """Type every node of ``graph`` that can be typed (module docstring).

    Args:
        graph: untyped, nodes in topological order (:func:`polytf.frontend.load_graph`).
        input_shapes: placeholder (or unsupported node) name -> static shape.

    Returns:
        The typed part of the graph, and every other node with the reason.
    """
    ops = {name: node.op for name, node in graph.nodes.items()}
    unknown = [node for node in graph.nodes.values() if lookup(node.op) is None]
    rejected = dict.fromkeys((node.name for node in unknown), NOT_IN_OP_TABLE)
    not_reached: dict[str, str] = {}
    errors = [str(UnsupportedOpError([(node.name, node.op) for node in unknown]))] if unknown else []
    shapes = {name: tuple(shape) for name, shape in (input_shapes or {}).items()}
    graph, port_readers = _with_stand_ins(graph, unknown)
    for reader, (name, port) in port_readers.items():
        if reader in graph.nodes:  # else it depends on an earlier reader and is cut out already
            reason = f"depends on output {port} of the unsupported node '{name}' ({ops[name]})"
            graph, dependents = _cut(graph, reader)
            shapes = _without(shapes, {reader, *dependents})
            not_reached.update(dict.fromkeys((node for node in (reader, *dependents) if node not in rejected), reason))
    while True:
        try:
            return PartialTyping(infer_types(graph, shapes), shapes, rejected, not_reached, tuple(errors))
        except GraphError as error:
            found = _first_rejected_node(graph, shapes)
            if found is None:
                errors.append(str(error))
                not_reached.update(
                    dict.fromkeys(
                        (name for name in graph.nodes if name not in rejected), "shape inference failed (see the error)"
                    )
                )
                return PartialTyping(None, shapes, rejected, not_reached, tuple(errors))
        name, rejection = found
        graph, dependents = _cut(graph, name)
        shapes = _without(shapes, {name, *dependents})
        if name in rejected:  # an unsupported node's stand-in: its output shape is unknown
            reason = f"depends on the unsupported node '{name}' ({ops[name]}), whose output shape polytf does not know"
            if dependents:
                errors.append(
                    f"the nodes after the unsupported node '{name}' ({ops[name]}) were not analysed: give its output shape with --input {name}:D0,D1,..."
                )
        else:
            rejected[name] = str(rejection)
            errors.append(str(rejection))
            reason = f"depends on node '{name}' ({ops[name]}), which shape inference rejected"
        not_reached.update(dict.fromkeys((node for node in dependents if node not in rejected), reason))


def _without(shapes: Mapping[str, tuple[int, ...]], removed: set[str]) -> dict[str, tuple[int, ...]]:
    """``shapes`` but those of the nodes cut out (a shape for a name that is no node stays: shape
    inference says it is wrong)."""
    return {key: shape for key, shape in shapes.items() if split_tensor_name(key)[0] not in removed}


def _with_stand_ins(graph: Graph, unknown: Sequence[Node]) -> tuple[Graph, dict[str, tuple[str, int]]]:
    """``graph`` with a placeholder in place of each node of ``unknown`` (module docstring); the
    tensors those nodes read become graph outputs. Also returns each node that reads an output
    ``k > 0`` of an unknown node, with that node and ``k``."""
    if not unknown:
        return graph, {}
    names = {node.name for node in unknown}
    nodes = dict(graph.nodes)
    for node in unknown:
        dtype = next((value for key in ("T", "dtype", "out_type") if isinstance(value := node.attr(key), str)), "float32")
        attrs = {"dtype": dtype}
        shapes = node.attr("_output_shapes")
        if isinstance(shapes, tuple) and shapes and isinstance(shapes[0], tuple):
            attrs["shape"] = shapes[0]
        nodes[node.name] = Node(node.name, PLACEHOLDER.op, attrs=attrs)
    port_readers: dict[str, tuple[str, int]] = {}
    for node in graph.nodes.values():
        for tensor in node.inputs:
            producer, port = split_tensor_name(tensor)
            if producer in names and port > 0:
                port_readers.setdefault(node.name, (producer, port))
    reads = [tensor for node in unknown for tensor in node.inputs]
    return graph.with_changes(nodes=nodes, outputs=_outputs(graph, nodes, reads)), port_readers


def _outputs(graph: Graph, nodes: Mapping[str, Node], reads: Sequence[str]) -> tuple[str, ...]:
    """The outputs of ``graph`` still produced in ``nodes``, then the tensors of ``reads`` whose
    producer is in ``nodes`` and computed (a constant or an input is kept without it)."""

    def producer(tensor: str) -> Node | None:
        return nodes.get(split_tensor_name(tensor)[0])

    computed = [tensor for tensor in reads if (node := producer(tensor)) is not None and lookup(node.op).category != SOURCE]
    return tuple(dict.fromkeys([*(tensor for tensor in graph.outputs if producer(tensor) is not None), *computed]))


def _cut(graph: Graph, root: str) -> tuple[Graph, tuple[str, ...]]:
    """``graph`` without ``root`` and every node that depends on it (control inputs onto them
    dropped; the tensors they read kept as outputs), and the names of those dependents."""
    removed = {root}
    dependents = []
    for name, node in graph.nodes.items():
        if name not in removed and any(split_tensor_name(tensor)[0] in removed for tensor in node.inputs):
            removed.add(name)
            dependents.append(name)
    nodes = {
        name: Node(name, node.op, node.inputs, tuple(c for c in node.control_inputs if c not in removed), node.attrs)
        for name, node in graph.nodes.items()
        if name not in removed
    }
    reads = [tensor for name in removed for tensor in graph.nodes[name].inputs]
    return graph.with_changes(nodes=nodes, outputs=_outputs(graph, nodes, reads)), tuple(dependents)


def _first_rejected_node(graph: Graph, shapes: Mapping[str, tuple[int, ...]]) -> tuple[str, GraphError] | None:
    """The first node, in topological order, that shape inference rejects, and its error; None
    when every prefix of the graph is accepted (the error concerns no node)."""
    names = list(graph.nodes)

    def rejection(count: int) -> GraphError | None:
        prefix = set(names[:count])
        nodes = {name: graph.nodes[name] for name in names[:count]}
        outputs = tuple(tensor for tensor in graph.outputs if split_tensor_name(tensor)[0] in prefix)
        try:
            infer_types(
                graph.with_changes(nodes=nodes, outputs=outputs),
                {k: v for k, v in shapes.items() if split_tensor_name(k)[0] in prefix},
            )
        except GraphError as error:
            return error
        return None

    low, high, error = 0, len(names), rejection(len(names))
    if error is None:
        return None
    while high - low > 1:  # prefix `low` is accepted, prefix `high` rejected with `error`
        middle = (low + high) // 2
        found = rejection(middle)
        if found is None:
            low = middle
        else:
            high, error = middle, found
    return names[high - 1], error
