"""Batch-norm folding: an inference-mode batch normalization after a convolution (or a
MatMul) becomes part of the convolution's weights and a bias.

Sources: the op definitions ``FusedBatchNorm``/``FusedBatchNormV2``/``FusedBatchNormV3``
(tensorflow/core/ops/nn_ops.cc; inference: ``y = (x - mean) * scale / sqrt(variance +
epsilon) + offset``), Grappler's remapper (``FuseConv2DWithBatchNorm`` in
tensorflow/core/grappler/optimizers/remapper.cc) and TensorFlow's
``fold_batch_norms`` graph transform (tensorflow/tools/graph_transforms/fold_batch_norms.cc).

A batch norm is ``y = x * s + t`` with per-channel constants ``s`` and ``t``. Keras 3 freezes
it as that arithmetic (``Rsqrt(var + eps) * gamma = s``, ``Mul(x, s)``,
``Sub(beta, mean * s) = t``, ``AddV2(x * s, t)``); once constant folding has evaluated
``s`` and ``t``, three rewrites finish the job, in this order:

1. ``FusedBatchNorm*(x, scale, offset, mean, variance)`` with ``is_training=False``, NHWC
   and constant parameters -> ``AddV2(Mul(x, s), t)`` with ``s = scale / sqrt(variance +
   epsilon)``, ``t = offset - mean * s`` (only when nothing reads its other outputs);
2. ``Mul(conv(x, W), s)`` -> ``conv(x, W * s)``; ``Mul(BiasAdd(conv(x, W), b), s)`` (or with
   ``AddV2``) -> ``BiasAdd(conv(x, W * s), b * s)``, when ``s`` is per output channel and the
   convolution (and bias) output has no other reader;
3. ``AddV2(conv(x, W), t)`` -> ``BiasAdd(conv(x, W), t)`` and ``AddV2(BiasAdd(y, b), t)``
   -> ``BiasAdd(y, b + t)`` for a per-channel ``t`` (``BiasAdd`` fuses into the
   convolution's kernel; see :mod:`polytf.passes.fusion`).

The rewrites read op traits: a batch norm is an op with an affine form
(``OpDefinition.affine``); ``Mul`` and ``AddV2``/``Add`` are ops whose algebra is a
multiplication or an addition; ``BiasAdd`` adds a channel bias (``channel_bias``); a
convolution is an op with a weight layout (``weight_layout``): ``Conv2D`` (filter ``[KH, KW,
C, O]``, output channel ``o``), ``DepthwiseConv2dNative`` (filter ``[KH, KW, C, M]``, output
channel ``c * M + m``) and ``MatMul`` (``b: [K, N]``, or ``[N, K]`` with ``transpose_b``), NHWC,
with a constant filter. "Per channel" means a constant whose shape broadcasts against the
output without changing it and varies only along the last axis: ``[]``, ``[1]``, ``[O]``,
``[1, 1, 1, O]``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from polytf.graph import Graph, Node, split_tensor_name
from polytf.graph.tensor_names import producer_name
from polytf.ops import Operation, WeightLayout, lookup
from polytf.ops.attributes import is_channels_last
from polytf.ops.definition import AffineFunction
from polytf.ops.elementwise import ADD_V2, MUL, bias_add_node, binary_node
from polytf.passes.editor import GraphEditor
from polytf.passes.report import PassReport


def fold_batch_norms(graph: Graph) -> tuple[Graph, PassReport]:
    """Apply the three rewrites of the module docstring. Works on typed and untyped graphs.

    Returns:
        The new graph and its report (``rewrites``: rewrites applied; ``detail``: per kind).
    """
    editor = GraphEditor(graph)
    applied: Counter[str] = Counter()
    for name in list(editor.nodes):
        node = editor.nodes.get(name)
        if node is not None and _affine(node) is not None and _expand_fused_batch_norm(editor, node):
            applied["FusedBatchNorm -> Mul + AddV2"] += 1
    for name in list(editor.nodes):
        node = editor.nodes.get(name)
        if node is not None and _is(node, Operation.MULTIPLY) and _fold_scale(editor, node):
            applied["Mul folded into filter"] += 1
    for name in list(editor.nodes):
        node = editor.nodes.get(name)
        if node is not None and _is(node, Operation.ADD):
            rule = _fold_shift(editor, node)
            if rule:
                applied[rule] += 1
    editor.rewrites = sum(applied.values())
    detail = ", ".join(f"{count} x {rule}" for rule, count in sorted(applied.items()))
    return editor.finish("batch norm folding", detail)


def _is(node: Node, operation: Operation) -> bool:
    """Whether ``node``'s op computes ``operation`` (``Mul``: MULTIPLY; ``Add``/``AddV2``: ADD)."""
    definition = lookup(node.op)
    return definition is not None and definition.algebra is not None and definition.algebra.operation is operation


def _adds_channel_bias(node: Node) -> bool:
    """Whether ``node``'s op adds a per-channel bias (``BiasAdd``)."""
    definition = lookup(node.op)
    return definition is not None and definition.channel_bias


def _affine(node: Node) -> AffineFunction | None:
    definition = lookup(node.op)
    return definition.affine if definition is not None else None


def _layout(node: Node | None) -> WeightLayout | None:
    definition = lookup(node.op) if node is not None else None
    return definition.weight_layout if definition is not None else None


# --- 1. FusedBatchNorm -> Mul + AddV2 ---------------------------------------------------


def _expand_fused_batch_norm(editor: GraphEditor, node: Node) -> bool:
    if any(port != 0 for port in _ports_read(editor, node)):
        return False
    affine = _affine(node)(node, [editor.constant_value(t) for t in node.inputs])
    if affine is None:
        return False
    scale, shift = affine
    x = node.inputs[0]
    x_type = editor.type_of(x)
    scale_tensor = editor.add_constant(f"{node.name}/scale", scale.astype(np.float32), before=node.name)
    shift_tensor = editor.add_constant(f"{node.name}/shift", shift.astype(np.float32), before=node.name)
    multiply = binary_node(MUL, editor.fresh_name(f"{node.name}/mul"), x, scale_tensor, node.control_inputs)
    editor.set_node(multiply, output_types=[x_type] if x_type else None, before=node.name)
    editor.set_node(binary_node(ADD_V2, node.name, multiply.output(0), shift_tensor), output_types=[x_type] if x_type else [])
    return True


def _ports_read(editor: GraphEditor, node: Node) -> set[int]:
    """The output ports of ``node`` that a node reads or that are graph outputs."""
    ports = {split_tensor_name(t)[1] for t in editor.outputs if producer_name(t) == node.name}
    for reader in editor.readers(node.name):
        ports.update(split_tensor_name(t)[1] for t in editor.nodes[reader].inputs if producer_name(t) == node.name)
    return ports


# --- 2. Mul(conv, s) -> conv with scaled filter -------------------------------------------


def _fold_scale(editor: GraphEditor, node: Node) -> bool:
    if len(node.inputs) != 2:
        return False
    for position in (0, 1):
        y, s_tensor = node.inputs[position], node.inputs[1 - position]
        scale = editor.constant_value(s_tensor)
        if scale is None or editor.constant_value(y) is not None:
            continue
        producer = editor.producer(y)
        if producer is None or y != producer.output(0):
            continue
        adds_bias = _adds_channel_bias(producer) or _is(producer, Operation.ADD)
        if _layout(producer) is None and not adds_bias:
            continue  # nothing to fold into (decided before the costlier use count)
        if not editor.has_single_use(y):
            continue
        bias_node, bias = None, None
        convolution = producer
        if adds_bias:
            bias_node = producer
            conv_tensor, bias = _convolution_and_constant(editor, producer)
            if conv_tensor is None or not editor.has_single_use(conv_tensor):
                continue
            convolution = editor.producer(conv_tensor)
        channels = _output_channels(editor, convolution)
        if channels is None:
            continue
        output_rank = _layout(convolution).output_rank
        s = _per_channel(scale, channels, output_rank)
        b = None if bias_node is None else _per_channel(bias, channels, output_rank)
        if s is None or (bias_node is not None and b is None):
            continue
        _scale_filter(editor, convolution, s)
        if bias_node is None:
            editor.forward(node.name, convolution.output(0))
        else:
            bias_tensor = editor.add_constant(f"{bias_node.name}/folded_bias", (b * s).astype(np.float32), before=bias_node.name)
            editor.set_node(bias_add_node(bias_node.name, convolution.output(0), bias_tensor, bias_node.control_inputs))
            editor.forward(node.name, bias_node.output(0))
        return True
    return False


def _scale_filter(editor: GraphEditor, convolution: Node, scale: np.ndarray) -> None:
    """``convolution``'s filter becomes ``W * scale`` (``scale``: one factor per output channel)."""
    layout = _layout(convolution)
    weights = np.asarray(editor.constant_value(convolution.inputs[layout.input]), dtype=np.float32)
    scaled = layout.scale_weight(convolution, weights, scale)
    filter_tensor = editor.add_constant(f"{convolution.name}/folded_filter", scaled, before=convolution.name)
    inputs = tuple(filter_tensor if k == layout.input else t for k, t in enumerate(convolution.inputs))
    editor.set_node(Node(convolution.name, convolution.op, inputs, convolution.control_inputs, convolution.attrs))


# --- 3. AddV2(conv, t) -> BiasAdd ------------------------------------------------------------


def _fold_shift(editor: GraphEditor, node: Node) -> str | None:
    if len(node.inputs) != 2:
        return None
    conv_tensor, shift = _convolution_and_constant(editor, node)
    if conv_tensor is not None:
        convolution = editor.producer(conv_tensor)
        t = _per_channel(shift, _output_channels(editor, convolution), _layout(convolution).output_rank)
        if t is None:
            return None
        shift_tensor = editor.add_constant(f"{node.name}/bias", t.astype(np.float32), before=node.name)
        editor.set_node(bias_add_node(node.name, conv_tensor, shift_tensor, node.control_inputs))
        return "AddV2(conv, t) -> BiasAdd"
    for position in (0, 1):
        y, shift = node.inputs[position], editor.constant_value(node.inputs[1 - position])
        producer = editor.producer(y)
        if (
            shift is None
            or producer is None
            or not _adds_channel_bias(producer)
            or y != producer.output(0)
            or not editor.has_single_use(y)
        ):
            continue
        if not is_channels_last(producer):
            continue
        bias = editor.constant_value(producer.inputs[1])
        value_type = editor.type_of(producer.inputs[0])
        if bias is None or value_type is None or not value_type.is_static:
            continue
        t = _per_channel(shift, bias.shape[0], value_type.rank)
        if t is None or bias.ndim != 1:
            continue
        combined = editor.add_constant(f"{node.name}/bias", (bias + t).astype(np.float32), before=node.name)
        editor.set_node(bias_add_node(node.name, producer.inputs[0], combined, node.control_inputs))
        return "AddV2(BiasAdd(y, b), t) -> BiasAdd(y, b + t)"
    return None


# --- shared ---------------------------------------------------------------------------------


def _convolution_and_constant(editor: GraphEditor, node: Node) -> tuple[str | None, np.ndarray | None]:
    """For ``BiasAdd``/``AddV2`` of a convolution output and a constant: (that output, the constant)."""
    if _adds_channel_bias(node):
        if not is_channels_last(node):
            return None, None
        candidates = ((node.inputs[0], node.inputs[1]),)
    else:
        candidates = ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0]))
    for value_tensor, constant_tensor in candidates:
        producer = editor.producer(value_tensor)
        constant = editor.constant_value(constant_tensor)
        if (
            constant is not None
            and producer is not None
            and value_tensor == producer.output(0)
            and _output_channels(editor, producer)
        ):
            return value_tensor, constant
    return None, None


def _output_channels(editor: GraphEditor, node: Node | None) -> int | None:
    """Output channels of a convolution-like node with a constant float32 filter, else None."""
    layout = _layout(node)
    if layout is None or len(node.inputs) <= layout.input:
        return None
    weights = editor.constant_value(node.inputs[layout.input])
    if weights is None or weights.dtype != np.float32:
        return None
    return layout.output_channels(node, weights.shape)


def _per_channel(value: np.ndarray | None, channels: int | None, rank: int) -> np.ndarray | None:
    """``value`` as a float32 vector of ``channels`` entries when it is per channel for an
    output of rank ``rank`` (see the module docstring), else None."""
    if value is None or channels is None or value.dtype != np.float32 or value.ndim > rank:
        return None
    if any(d != 1 for d in value.shape[:-1]) or (value.ndim and value.shape[-1] not in (1, channels)):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float32)
