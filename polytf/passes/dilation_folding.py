"""Dilation folding: ``SpaceToBatchND -> convolution -> BatchToSpaceND`` becomes one
convolution with ``dilations``.

Sources: TensorFlow writes a dilated convolution (Keras ``Conv1D``/``Conv2D``/
``DepthwiseConv2D`` with ``dilation_rate > 1``, ``tf.nn.atrous_conv2d``, ``tf.nn.convolution``)
as ``SpaceToBatchND(x, block, paddings) -> conv (VALID, stride 1, dilations 1) ->
BatchToSpaceND(y, block, crops)`` (tensorflow/python/ops/nn_ops.py, ``with_space_to_batch``
and ``array_ops.required_space_to_batch_paddings``); TFLite's converter folds it back
(tensorflow/compiler/mlir/lite/transforms/dilated_conv.h, ``ConvertTFDilatedConvOp``: the
optional ``ExpandDims``/``Squeeze`` of a ``Conv1D`` and a ``BiasAdd`` before the
``BatchToSpaceND``), and so does this pass, with an exact check of the padding.

Why it is exact (one spatial dimension; each dimension is independent). With block ``d``,
paddings ``(p, p')``, crops ``(c, c')``, a filter of ``K`` taps and ``P`` the input padded by
``(p, p')`` (its size ``L`` divisible by ``d``): the space-to-batch row of offset ``r`` is
``S_r[i] = P[i*d + r]``, the VALID convolution gives ``Y_r[j] = sum_k S_r[j + k] f[k] =
sum_k P[(j + k)*d + r] f[k]`` for ``j < L/d - K + 1``, and the batch-to-space interleaves the
rows back, ``Z[j*d + r] = Y_r[j]``: ``Z[u] = sum_k P[u + k*d] f[k]``, the dilated VALID
convolution of ``P``, all ``L - (K-1)*d`` of it. The crop keeps ``Z[c : len - c']``, which is
the dilated convolution of ``x`` padded by ``(p - c, p' - c')``. That is TensorFlow's SAME
padding of a stride-1 convolution with dilation ``d`` when ``(p - c, p' - c') = (s // 2, s -
s // 2)`` with ``s = (K-1)*d``, and VALID when it is ``(0, 0)``: TensorFlow's own paddings are
``p = s // 2`` (SAME; 0 for VALID) and ``p' = s - s // 2 + e`` with crops ``(0, e)``, ``e``
rounding the padded size up to a multiple of ``d``. Any other amounts (Keras' ``causal``
padding is an explicit ``Pad`` before a VALID space-to-batch, so it folds as VALID) are not
folded: the two ops then run on their own (:mod:`polytf.ops.space_batch`).

The pattern, read through op traits: a node that moves space to batch
(``OpDefinition.space_batch``) whose output only feeds, optionally through one view
(``VIEW`` category: ``ExpandDims`` of a ``Conv1D``), a dilatable convolution
(``WeightLayout.dilatable``) with stride 1, dilations 1, VALID padding, NHWC; whose output
only feeds, through at most one view (``Squeeze``) and one channel bias (``channel_bias``:
``BiasAdd``, which commutes with moving spatial positions), a node that moves batch to space
with the same block. The views may only add (input side) and remove (output side) one unit
spatial axis, checked on the types; the convolution, the views and the bias keep their names
and read the full-resolution tensors, the space-to-batch node is dropped and the
batch-to-space node is forwarded to the last node of the chain. Typed graphs only (the check
needs the shapes); an untyped graph is returned unchanged.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from polytf.errors import ShapeError
from polytf.graph import Graph, Node, TensorType
from polytf.ops import VIEW, lookup
from polytf.ops.attributes import attr_ints, attr_string, is_channels_last
from polytf.passes.editor import GraphEditor
from polytf.passes.report import PassReport

#: TensorFlow's paddings of a stride-1 window, by name
VALID, SAME = "VALID", "SAME"


@dataclass(frozen=True)
class DilatedConvolution:
    """One matched ``space to batch -> convolution -> batch to space`` pattern.

    Attributes:
        to_batch: the node that moves space to batch.
        input_view: the view between it and the convolution (a ``Conv1D``'s unit axis), if any.
        convolution: the VALID, stride-1 convolution.
        output_chain: the views and channel biases between the convolution and ``to_space``,
            in data-flow order.
        to_space: the node that moves batch to space.
        dilations: the folded convolution's ``dilations`` (NHWC).
        padding: its padding, ``"SAME"`` or ``"VALID"``.
    """

    to_batch: Node
    input_view: Node | None
    convolution: Node
    output_chain: tuple[Node, ...]
    to_space: Node
    dilations: tuple[int, int, int, int]
    padding: str


def fold_dilations(graph: Graph) -> tuple[Graph, PassReport]:
    """Fold every exactly matching pattern of the module docstring.

    Returns:
        The new graph and its report (``rewrites``: folded patterns; ``detail``: per
        convolution op).
    """
    editor = GraphEditor(graph)
    applied: Counter[str] = Counter()
    if editor.typed:
        for name in list(editor.nodes):
            node = editor.nodes.get(name)
            if node is None or not _moves(node, to_batch=False):
                continue
            match = _match(editor, node)
            if match is not None and _fold(editor, match):
                applied[match.convolution.op] += 1
    editor.rewrites = sum(applied.values())
    detail = ", ".join(f"{count} x {op} with dilations from a space-to-batch pair" for op, count in sorted(applied.items()))
    return editor.finish("dilation folding", detail)


# --- matching ------------------------------------------------------------------------------


def _moves(node: Node | None, to_batch: bool) -> bool:
    """Whether ``node``'s op moves space to batch (``to_batch``) or batch to space."""
    definition = lookup(node.op) if node is not None else None
    return definition is not None and definition.space_batch is not None and definition.space_batch.to_batch == to_batch


def _block_and_amounts(editor: GraphEditor, node: Node) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]] | None:
    """``(block_shape, paddings or crops)`` of a space/batch node when both are constant and
    well formed, else None."""
    trait = lookup(node.op).space_batch
    if len(node.inputs) <= max(trait.block_shape_input, trait.amounts_input):
        return None
    block = editor.constant_value(node.inputs[trait.block_shape_input])
    amounts = editor.constant_value(node.inputs[trait.amounts_input])
    if block is None or amounts is None or block.dtype.kind not in "iu" or amounts.dtype.kind not in "iu":
        return None
    if block.ndim != 1 or amounts.shape != (block.shape[0], 2):
        return None
    return tuple(int(b) for b in block), tuple((int(before), int(after)) for before, after in amounts)


def _single_producer(editor: GraphEditor, tensor: str) -> Node | None:
    """The producer of ``tensor`` when it is the producer's output 0 and ``tensor`` has one
    reader, which reads nothing else of it (no other data or control reader)."""
    producer = editor.producer(tensor)
    if producer is None or tensor != producer.output(0) or not editor.has_single_use(tensor):
        return None
    return producer if len(editor.readers(producer.name)) == 1 else None


def _is_view(node: Node) -> bool:
    definition = lookup(node.op)
    return definition is not None and definition.category == VIEW


def _adds_channel_bias(node: Node) -> bool:
    definition = lookup(node.op)
    return definition is not None and definition.channel_bias and is_channels_last(node)


def _is_dilatable(node: Node) -> bool:
    definition = lookup(node.op)
    return definition is not None and definition.weight_layout is not None and definition.weight_layout.dilatable


def _match(editor: GraphEditor, to_space: Node) -> DilatedConvolution | None:
    """The pattern ending at ``to_space``, checked exactly (module docstring), or None."""
    moved = _block_and_amounts(editor, to_space)
    if moved is None or len(to_space.inputs) < 1:
        return None
    block, crops = moved
    # up from the batch-to-space node: at most one view and one channel bias, then the convolution
    chain: list[Node] = []
    tensor = to_space.inputs[0]
    while True:
        producer = _single_producer(editor, tensor)
        if producer is None or not producer.inputs:
            return None
        if _is_dilatable(producer):
            convolution = producer
            break
        views = sum(map(_is_view, chain))
        if _is_view(producer) and views == 0 or _adds_channel_bias(producer) and len(chain) == views:
            chain.insert(0, producer)
            tensor = producer.inputs[0]
            continue
        return None
    if not _is_plain_valid_convolution(convolution):
        return None
    # up from the convolution: at most one view, then the space-to-batch node
    input_view = None
    to_batch = _single_producer(editor, convolution.inputs[0])
    if to_batch is not None and _is_view(to_batch):
        input_view, to_batch = to_batch, _single_producer(editor, to_batch.inputs[0]) if to_batch.inputs else None
    if not _moves(to_batch, to_batch=True):
        return None
    moved = _block_and_amounts(editor, to_batch)
    if moved is None or moved[0] != block:
        return None
    paddings = moved[1]
    axes = _spatial_axes(editor, to_batch, input_view, convolution, chain, len(block))
    if axes is None or len(axes) != len(block):
        return None
    layout = lookup(convolution.op).weight_layout
    filter_type = editor.type_of(convolution.inputs[layout.input]) if len(convolution.inputs) > layout.input else None
    if filter_type is None or filter_type.rank != layout.rank or not filter_type.is_static:
        return None
    kernel = tuple(filter_type.shape[axis] for axis in layout.window_axes)
    dilations = [1, 1]
    # (before, after) of the folded convolution per conv spatial axis; axes no block covers are unpadded
    amounts = [(0, 0), (0, 0)]
    for axis, b, (p, p_after), (c, c_after) in zip(axes, block, paddings, crops):
        dilations[axis] = b
        amounts[axis] = (p - c, p_after - c_after)
    padding = _padding_of(kernel, dilations, amounts)
    if padding is None:
        return None
    return DilatedConvolution(
        to_batch, input_view, convolution, tuple(chain), to_space, (1, dilations[0], dilations[1], 1), padding
    )


def _is_plain_valid_convolution(node: Node) -> bool:
    """NHWC, stride 1, dilations 1, VALID padding (what ``with_space_to_batch`` writes)."""
    try:
        return (
            is_channels_last(node)
            and attr_ints(node, "strides", (1, 1, 1, 1)) == (1, 1, 1, 1)
            and attr_ints(node, "dilations", (1, 1, 1, 1)) == (1, 1, 1, 1)
            and attr_string(node, "padding", "") == VALID
        )
    except ShapeError:
        return False


def _spatial_axes(
    editor: GraphEditor, to_batch: Node, input_view: Node | None, convolution: Node, chain: list[Node], spatial: int
) -> tuple[int, ...] | None:
    """The convolution's spatial axis (0: height, 1: width) of each of the ``spatial`` block
    dimensions of the space-to-batch node, or None when the views do more than add and remove one unit spatial
    axis (or the types are unknown)."""
    moved_type = editor.type_of(to_batch.output(0))
    conv_in = editor.type_of(convolution.inputs[0])
    conv_out = editor.type_of(convolution.output(0))
    if moved_type is None or conv_in is None or conv_out is None or conv_in.rank != 4 or conv_out.rank != 4:
        return None
    if input_view is None:
        unit = None
        if moved_type.shape != conv_in.shape or spatial > 2:
            return None
    else:
        unit = next((u for u in (1, 2) if _insert_unit(moved_type.shape, u) == conv_in.shape), None)
        if unit is None or spatial != 1:
            return None
    shape = conv_out.shape
    for node in chain:
        node_in, node_out = editor.type_of(node.inputs[0]), editor.type_of(node.output(0))
        if node_in is None or node_out is None or node_in.shape != shape:
            return None
        if _is_view(node):
            if unit is None or node_out.shape != _remove_unit(shape, unit):
                return None
        elif node_out.shape != shape:
            return None
        shape = node_out.shape
    if unit is not None and shape == conv_out.shape:
        return None  # a unit axis added on the way in and not removed on the way out
    return tuple(axis for axis in (0, 1) if axis + 1 != unit)[:spatial]


def _insert_unit(shape: tuple, position: int) -> tuple:
    return (*shape[:position], 1, *shape[position:])


def _remove_unit(shape: tuple, position: int) -> tuple | None:
    return (*shape[:position], *shape[position + 1 :]) if len(shape) > position and shape[position] == 1 else None


def _padding_of(kernel: tuple[int, ...], dilations: list[int], amounts: list[tuple[int, int]]) -> str | None:
    """``"VALID"`` or ``"SAME"`` when the convolution padded by ``amounts`` per spatial axis
    is TensorFlow's stride-1 padding of that name for ``kernel`` and ``dilations`` on every
    axis (VALID preferred where both are: a one-tap axis), else None."""
    names = {VALID, SAME}
    for taps, dilation, (before, after) in zip(kernel, dilations, amounts):
        span = (taps - 1) * dilation
        fits = set()
        if (before, after) == (0, 0):
            fits.add(VALID)
        if (before, after) == (span // 2, span - span // 2):
            fits.add(SAME)
        names &= fits
    return VALID if VALID in names else SAME if SAME in names else None


# --- rewriting -----------------------------------------------------------------------------


def _fold(editor: GraphEditor, match: DilatedConvolution) -> bool:
    """Rewrite ``match`` (module docstring); False (nothing edited) when a node's shape rule
    does not give the full-resolution types the fold expects."""
    source = match.to_batch.inputs[0]
    new_nodes: list[tuple[Node, TensorType]] = []
    tensor, tensor_type = source, editor.type_of(source)
    if tensor_type is None:
        return False
    if match.input_view is not None:
        view = match.input_view
        view = Node(view.name, view.op, (source, *view.inputs[1:]), view.control_inputs, view.attrs)
        tensor_type = _infer(editor, view, tensor_type)
        if tensor_type is None:
            return False
        new_nodes.append((view, tensor_type))
        tensor = view.output(0)
    convolution = match.convolution
    attrs = {**convolution.attrs, "dilations": match.dilations, "padding": match.padding}
    convolution = Node(convolution.name, convolution.op, (tensor, *convolution.inputs[1:]), convolution.control_inputs, attrs)
    tensor_type = _infer(editor, convolution, tensor_type)
    if tensor_type is None:
        return False
    new_nodes.append((convolution, tensor_type))
    for node in match.output_chain:
        tensor_type = _infer(editor, node, tensor_type)
        if tensor_type is None:
            return False
        new_nodes.append((node, tensor_type))
    expected = editor.type_of(match.to_space.output(0))
    if expected is None or tensor_type.shape != expected.shape or tensor_type.dtype != expected.dtype:
        return False
    for node, node_type in new_nodes:
        editor.set_node(node, output_types=[node_type])
    editor.forward(match.to_space.name, new_nodes[-1][0].output(0))
    return True


def _infer(editor: GraphEditor, node: Node, input_type: TensorType) -> TensorType | None:
    """The type of output 0 of ``node`` when its data input 0 has ``input_type`` (its other
    inputs as recorded), by the op's own shape rule; None when the rule refuses."""
    definition = lookup(node.op)
    types = [input_type, *(editor.type_of(t) for t in node.inputs[1:])]
    if any(t is None for t in types):
        return None
    constants = [None, *(editor.constant_value(t) for t in node.inputs[1:])]
    try:
        outputs = definition.infer(node, types, constants)
    except ShapeError:
        return None
    return outputs[0] if outputs else None


__all__ = ["DilatedConvolution", "fold_dilations"]
