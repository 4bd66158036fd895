"""Identity removal: drop identity-like nodes (``Identity``, ``IdentityN``, ``StopGradient``,
``Snapshot``: ``OpDefinition.forwards``), ``NoOp`` nodes (no outputs) and the control edges
that order nothing.

Sources: Grappler's dependency optimizer and arithmetic optimizer
(tensorflow/core/grappler/optimizers/dependency_optimizer.cc,
``RemoveIdentityTranspose``/``RemoveRedundant...`` in arithmetic_optimizer.cc); the op
definitions ``Identity``, ``IdentityN``, ``StopGradient``, ``Snapshot``
(tensorflow/core/ops/array_ops.cc: all return their inputs at inference time) and ``NoOp``
(no_op.cc).

Rewrites:

* an identity-like node ``I = Identity(t)`` whose output is no graph output: its readers
  read ``t`` (chains collapse); likewise ``IdentityN(t0, ..., tN-1)`` (Keras' swish with
  its custom gradient freezes to one): readers of ``I:k`` read ``tk``;
* ``NoOp`` (an op without outputs) with no data input: removed; a ``^NoOp`` control input is
  replaced by the NoOp's own control inputs;
* a control input onto a node without side effects (every op polytf supports but stateful
  ones) orders nothing at inference time and is dropped; control inputs onto unknown or
  stateful ops are kept;
* a graph output ``I:0 = Identity(P:0)`` keeps its name, which the caller sees (e.g.
  ``"Identity"`` in ``model(...)["Identity"]``): the producer ``P`` is renamed ``I`` when
  that changes no other visible name (``P`` is no placeholder and produces no other graph
  output); otherwise the Identity stays (a view: no run-time cost).
"""

from __future__ import annotations

from collections import Counter

from polytf.graph import Graph, Node, split_tensor_name
from polytf.ops import NO_OUTPUT, Forwarding, OpDefinition, lookup
from polytf.passes.editor import GraphEditor
from polytf.passes.report import PassReport


def has_side_effects(op: str) -> bool:
    """False for ops known to be pure (every op polytf supports but stateful ones: all are
    functions of their inputs); True for unknown ops."""
    definition = lookup(op)
    return definition is None or definition.stateful


def remove_identities(graph: Graph) -> tuple[Graph, PassReport]:
    """Remove identity-like nodes, NoOps and control edges that order nothing (see the
    module docstring). Works on typed and untyped graphs.

    Returns:
        The new graph and its report (``rewrites``: nodes removed or renamed plus control
        edges dropped).
    """
    editor = GraphEditor(graph)
    removed: Counter[str] = Counter()
    forwarded: dict[str, str] = {}  # tensor of a removed identity -> the tensor it stands for
    released: dict[str, tuple[str, ...]] = {}  # removed node -> control inputs its readers inherit

    def resolve(tensor: str) -> str:
        while tensor in forwarded:
            tensor = forwarded[tensor]
        return tensor

    def kept_controls(controls: tuple[str, ...]) -> tuple[str, ...]:
        result: list[str] = []
        for control in controls:
            if control in released:
                result.extend(released[control])
            elif control in editor.nodes and has_side_effects(editor.nodes[control].op):
                result.append(control)
        return tuple(dict.fromkeys(result))

    dropped_edges = 0
    for name in list(editor.nodes):
        original = editor.nodes[name]
        inputs = tuple(resolve(t) for t in original.inputs) if forwarded else original.inputs
        controls = kept_controls(original.control_inputs) if original.control_inputs else ()
        dropped_edges += len(original.control_inputs) - len(controls)
        node = original
        if inputs != original.inputs or controls != original.control_inputs:
            node = Node(original.name, original.op, inputs, controls, original.attrs)
        definition = lookup(node.op)
        forwards = _forwarding(node, definition) if name not in editor.output_nodes else None
        if (definition is not None and definition.category == NO_OUTPUT and not node.inputs) or forwards is not None:
            for port in range(forwards.output_count(len(node.inputs)) if forwards else 0):
                forwarded[node.output(port)] = node.inputs[forwards.input_of(port)]
            released[name] = controls
            editor.remove(name)
            removed[node.op] += 1
        elif node is not original:
            editor.set_node(node)

    renamed = 0
    placeholders = frozenset(node.name for node in graph.placeholders)
    for output in editor.outputs:
        name, port = split_tensor_name(output)
        node = editor.nodes.get(name)
        if node is None or _forwarding(node, lookup(node.op)) is not Forwarding.FIRST_INPUT or port != 0 or node.control_inputs:
            continue
        source, source_port = split_tensor_name(node.inputs[0])
        if source_port != 0 or source in placeholders or source in editor.output_nodes:
            continue
        editor.remove(name)
        editor.rename(source, name)
        renamed += 1
        removed[node.op] += 1

    editor.rewrites = sum(removed.values()) + dropped_edges
    parts = [f"{count} {op}" for op, count in sorted(removed.items())]
    detail = (", ".join(parts) + " removed") if parts else ""
    if renamed:
        detail += f" ({renamed} output name{'s' if renamed > 1 else ''} moved to the producer)"
    if dropped_edges:
        detail += ("; " if detail else "") + f"{dropped_edges} control edges dropped"
    return editor.finish("identity removal", detail)


def _forwarding(node: Node, definition: OpDefinition | None) -> Forwarding | None:
    """How ``node``'s outputs forward its inputs, when it is identity-like and has an input
    count its op takes; else None."""
    if definition is None or definition.forwards is None or not definition.arity.accepts(len(node.inputs)):
        return None
    return definition.forwards
