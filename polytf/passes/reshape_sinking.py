"""Moves element-wise nodes above the views (row-major reshapes) that separate them from their
producer, so that they fuse into the producer's kernel.

Source: XLA's ``ReshapeMover`` (xla/service/reshape_mover.cc) moves reshapes across
element-wise instructions so that element-wise chains meet their producers; Grappler's
arithmetic optimizer hoists unary chains the same way.

Keras freezes a ``Dense`` layer on a ``[B, T, C]`` input as ``MatMul`` on ``[B*T, C]``, a
``Reshape`` back to ``[B, T, N]``, then ``BiasAdd`` and the activation (exact GELU:
``Mul``/``Neg``/``Erfc``); ``MultiHeadAttention``'s projections as ``BatchMatMulV2`` to
``[B, T, H*D]``, a ``Reshape`` to ``[B, T, H, D]`` and an ``AddV2`` of a ``[H, D]`` bias.
The partition fuses an element-wise node into its producer's kernel only at the producer's
shape, so each of those chains became a kernel of its own. This pass rewrites::

    t = producer(...)          [T0, ..., Tm]   (a contraction or element-wise node)
    v = view(t)                [S0, ..., Sn]   (Reshape, Squeeze, ExpandDims, Identity)
    y = f(v, c)                [S0, ..., Sn]   (element-wise, c broadcast over a suffix)
  into
    y' = f(t, c')              [T0, ..., Tm]
    y  = Reshape(y', [S...])   [S0, ..., Sn]   (a view: no code; y keeps its name)

Every view is a row-major reshape (its output aliases its input), so element ``k`` of ``v``
in row-major order is element ``k`` of ``t``: ``f`` computes the same value at the same
position. An operand ``c`` that is not such a view must be one element (a scalar), or vary
only along a suffix ``S[p:]`` of the output's axes that it covers whole, with ``prod(S[p:]) ==
prod(T[q:])`` for a suffix of ``t``'s axes: then ``c' = reshape(c, T[q:])`` broadcasts against
``t`` exactly as ``c`` against ``v`` (a constant is reshaped at compile time, another tensor
through a new ``Reshape`` view). The node keeps its name as the ``Reshape``, so its consumers and
the graph's outputs need no rewiring; the node's own computation gets the name
``<node>/in_source_shape``.

Only float32 element-wise nodes with one output whose every input is a data input are moved
(not ``Fill``/``BroadcastTo``, whose shape is an input, nor the multi-output batch
normalizations), and only views of tensors computed by a contraction or an element-wise node
(moving a node above a view of a model input gains nothing), and only to a source of lower
rank than the output (``[B*T, N]`` below ``[B, T, N]``): each move lowers the rank a node
computes at, so the pass cannot undo its own move when a moved node reads another tensor
through a new view, and the pipeline reaches a fixed point. An operand computed from the
view's source (LayerNorm's ``x * rsqrt(var(x))``) keeps the node where it is: its kernel comes
after the source's, so the moved node could not fuse there. A node with a channel bias
(``BiasAdd``) keeps a rank >= 2 value and a 1-D bias. The op's own shape rule confirms the new
node's type; when it refuses, the node stays.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import Graph, Node, TensorType, split_tensor_name
from polytf.graph.reachability import live_node_names
from polytf.graph.tensor_names import producer_name
from polytf.ops import CONTRACTION, ELEMENTWISE, VIEW, lookup, reshape_node
from polytf.passes.editor import GraphEditor
from polytf.passes.report import PassReport

#: the producers whose element-wise consumers are worth moving above a view: those that start
#: or extend a fusion group
_FUSING_PRODUCERS = (CONTRACTION, ELEMENTWISE)


@dataclass(frozen=True)
class _Operand:
    """How one data input of the moved node is read in the source shape.

    Attributes:
        tensor: the tensor the new node reads (a view's source, or the operand itself).
        shape: the shape it must have there; None: read as it is.
    """

    tensor: str
    shape: tuple[int, ...] | None = None


def sink_reshapes(graph: Graph) -> tuple[Graph, PassReport]:
    """Move every element-wise node that qualifies (module docstring) above its views, in
    program order, so a chain ``view -> f1 -> f2 -> ...`` moves in one pass.

    Args:
        graph: typed (an untyped graph is returned unchanged: the rewrite needs shapes).

    Returns:
        The new graph and its report (``rewrites``: moved nodes; ``detail``: per op).
    """
    editor = GraphEditor(graph)
    moved: Counter[str] = Counter()
    if editor.typed:
        for name in list(editor.nodes):
            node = editor.nodes.get(name)
            if node is not None and _sink(editor, node):
                moved[node.op] += 1
    editor.rewrites = sum(moved.values())
    detail = ", ".join(f"{count} x {op}" for op, count in sorted(moved.items()))
    return editor.finish("reshape sinking", f"moved above a reshape: {detail}" if detail else "")


def _sink(editor: GraphEditor, node: Node) -> bool:
    """Rewrite ``node`` (module docstring); False (nothing edited) when it does not qualify."""
    definition = lookup(node.op)
    if definition is None or definition.category != ELEMENTWISE or definition.stateful or definition.affine is not None:
        return False
    if len(definition.data_input_indices(len(node.inputs))) != len(node.inputs) or editor.output_count(node) != 1:
        return False
    output_type = editor.type_of(node.output(0))
    input_types = [editor.type_of(t) for t in node.inputs]
    if output_type is None or output_type.dtype != "float32" or not _static(output_type):
        return False
    if any(t is None or t.dtype != "float32" or not _static(t) for t in input_types):
        return False
    output_shape = tuple(int(d) for d in output_type.shape)
    sources = [_view_source(editor, tensor, output_shape) for tensor in node.inputs]
    source_shapes = {tuple(int(d) for d in editor.type_of(s).shape) for s in sources if s is not None}
    if len(source_shapes) != 1:
        return False
    (source_shape,) = source_shapes
    if len(source_shape) >= len(output_shape) or (definition.channel_bias and len(source_shape) < 2):
        return False
    operands = []
    for tensor, tensor_type, source in zip(node.inputs, input_types, sources, strict=True):
        if source is not None:
            operands.append(_Operand(source))
            continue
        operand = _broadcast_operand(tensor, tuple(int(d) for d in tensor_type.shape), output_shape, source_shape)
        if operand is not None and _depends_on(editor, tensor, {producer_name(s) for s in sources if s is not None}):
            return False
        if operand is None or (definition.channel_bias and operand.shape is not None and len(operand.shape) != 1):
            return False
        operands.append(operand)
    return _rewrite(editor, node, operands, output_shape, source_shape)


def _view_source(editor: GraphEditor, tensor: str, output_shape: tuple[int, ...]) -> str | None:
    """The tensor that ``tensor`` views (through a chain of views), when ``tensor`` has the
    node's output shape and the source is computed by a node that fuses; else None."""
    if tuple(editor.type_of(tensor).shape) != output_shape:
        return None
    source = tensor
    while True:
        producer = editor.producer(source)
        definition = lookup(producer.op) if producer is not None else None
        if definition is None or definition.category != VIEW or not producer.inputs:
            break
        if split_tensor_name(source)[1] != 0:  # IdentityN's output k: not a reshape of input 0
            return None
        source = producer.inputs[definition.data_input_indices(len(producer.inputs))[0]]
    if source == tensor or editor.constant_value(source) is not None:
        return None
    producer = editor.producer(source)
    definition = lookup(producer.op) if producer is not None else None
    source_type = editor.type_of(source)
    if definition is None or definition.category not in _FUSING_PRODUCERS or source_type is None or not _static(source_type):
        return None
    return source


def _depends_on(editor: GraphEditor, tensor: str, node_names: set[str]) -> bool:
    """Whether ``tensor`` is computed from an output of one of ``node_names``: a moved node
    reading it would join the sources' kernel, which must precede the kernel computing it, so
    the move could not fuse (a LayerNorm's ``x * rsqrt(var(x))``, ``x`` a view)."""
    if editor.constant_value(tensor) is not None:
        return False
    return not node_names.isdisjoint(live_node_names(editor.nodes, (tensor,)))


def _broadcast_operand(
    tensor: str, shape: tuple[int, ...], output_shape: tuple[int, ...], source_shape: tuple[int, ...]
) -> _Operand | None:
    """How an operand that is not a view of the source reads in the source shape: as it is
    (one element, of rank <= the source's), or reshaped to a suffix of the source shape (it
    varies only along a suffix of the output's axes, which it covers whole); None otherwise."""
    if len(shape) > len(output_shape):
        return None
    if int(np.prod(shape, dtype=np.int64)) == 1:
        return _Operand(tensor) if len(shape) <= len(source_shape) else _Operand(tensor, (1,) * len(source_shape))
    aligned = (1,) * (len(output_shape) - len(shape)) + shape
    first = next(axis for axis, size in enumerate(aligned) if size != 1)
    if aligned[first:] != output_shape[first:]:
        return None
    elements = int(np.prod(output_shape[first:], dtype=np.int64))
    for axis in range(len(source_shape) - 1, -1, -1):
        suffix = source_shape[axis:]
        count = int(np.prod(suffix, dtype=np.int64))
        if count == elements:
            return _Operand(tensor) if shape == suffix else _Operand(tensor, suffix)
        if count > elements:
            return None
    return None


def _rewrite(
    editor: GraphEditor, node: Node, operands: list[_Operand], output_shape: tuple[int, ...], source_shape: tuple[int, ...]
) -> bool:
    """Edit the graph for a qualifying ``node``; False, with nothing edited, when the op's shape
    rule refuses the operands in the source shape or gives another shape."""
    types, values = [], []
    for operand in operands:
        operand_type = editor.type_of(operand.tensor)
        value = editor.constant_value(operand.tensor)
        if operand.shape is not None:
            operand_type = TensorType(operand.shape, "float32")
            value = None if value is None else np.asarray(value).reshape(operand.shape)
        types.append(operand_type)
        values.append(value)
    computed_name = editor.fresh_name(f"{node.name}/in_source_shape")
    try:
        probe = Node(computed_name, node.op, tuple(o.tensor for o in operands), node.control_inputs, node.attrs)
        (computed_type, *_) = lookup(node.op).infer(probe, types, values)
    except ShapeError:
        return False
    if tuple(computed_type.shape) != source_shape or computed_type.dtype != "float32":
        return False
    inputs = []
    for index, (operand, value) in enumerate(zip(operands, values, strict=True)):
        if operand.shape is None:
            inputs.append(operand.tensor)
        elif value is not None:
            inputs.append(editor.add_constant(f"{computed_name}/operand_{index}", value, before=node.name))
        else:
            shape_tensor = editor.add_constant(
                f"{computed_name}/operand_{index}_shape", np.asarray(operand.shape, dtype=np.int32), before=node.name
            )
            view = reshape_node(editor.fresh_name(f"{computed_name}/operand_{index}"), operand.tensor, shape_tensor, "float32")
            editor.set_node(view, output_types=[TensorType(operand.shape, "float32")], before=node.name)
            inputs.append(view.output(0))
    computed = Node(computed_name, node.op, tuple(inputs), node.control_inputs, node.attrs)
    editor.set_node(computed, output_types=[computed_type], before=node.name)
    shape_tensor = editor.add_constant(f"{node.name}/output_shape", np.asarray(output_shape, dtype=np.int32), before=node.name)
    editor.set_node(
        reshape_node(node.name, computed.output(0), shape_tensor, "float32"), output_types=[TensorType(output_shape, "float32")]
    )
    return True


def _static(tensor_type: TensorType) -> bool:
    return all(d is not None for d in tensor_type.shape)


__all__ = ["sink_reshapes"]
