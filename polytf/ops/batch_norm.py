"""FusedBatchNorm, FusedBatchNormV2 and FusedBatchNormV3 in inference mode.

Source: TensorFlow op definitions ``FusedBatchNorm``, ``FusedBatchNormV2`` and
``FusedBatchNormV3`` (tensorflow/core/ops/nn_ops.cc) and the CPU kernel
(tensorflow/core/kernels/fused_batch_norm_op.cc, ``is_training=False`` branch):

* inputs ``x [N, H, W, C]`` (NHWC), ``scale``, ``offset``, ``mean``, ``variance``, each
  ``[C]``; attrs ``epsilon`` (default 1e-4), ``is_training`` (TensorFlow's default is
  True: polytf supports only False, the frozen-inference case), ``data_format`` (NHWC);
* ``y = (x - mean) * scale / sqrt(variance + epsilon) + offset`` over the last axis;
* side outputs (inference mode): ``batch_mean = mean``, ``batch_variance = variance``,
  ``reserve_space_1 = mean``, ``reserve_space_2 = variance`` (as the op documentation
  says; TensorFlow's CPU kernel leaves the last two uninitialised) and, for V3 only,
  ``reserve_space_3``, a dummy scalar.

Lowering: ``y`` only, one element-wise statement
``Y[d] = (X[d] - M[d3]) * (G[d3] / sqrt(V[d3] + eps)) + B[d3]``; the op is ELEMENTWISE, so
it fuses into the Conv2D or DepthwiseConv2dNative that produces ``x``. The side outputs
have a reference but no lowering (nothing reads them in an inference graph).
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_bool, attr_float, attr_string, is_channels_last
from polytf.ops.definition import ELEMENTWISE, Arity, OpDefinition
from polytf.poly.expression import Access, Binary, Constant, Load, Unary
from polytf.poly.statement import Statement

#: TensorFlow's default ``epsilon`` attr.
DEFAULT_EPSILON = 1e-4
PARAMETERS = ("scale", "offset", "mean", "variance")


def _check(node, input_types) -> None:
    """Raises ShapeError for training mode, non-NHWC layouts, a non-numeric epsilon and mismatched shapes."""
    if len(input_types) != 5:
        raise ShapeError(f"{node.op} takes 5 inputs (x, {', '.join(PARAMETERS)}), got {len(input_types)}")
    if attr_bool(node, "is_training", True):
        raise ShapeError(
            f"{node.op} node '{node.name}' has is_training=True (TensorFlow's default); polytf compiles inference "
            "graphs only: freeze the model in inference mode (is_training=False)"
        )
    data_format = attr_string(node, "data_format", "NHWC")
    if data_format != "NHWC":
        raise ShapeError(f"{node.op} with data_format {data_format!r} is unsupported: polytf supports NHWC only")
    _epsilon(node)
    x = input_types[0]
    if x.rank != 4:
        raise ShapeError(f"{node.op} needs a rank-4 NHWC input x, got {x}")
    channels = x.shape[3]
    for name, parameter in zip(PARAMETERS, input_types[1:]):
        if parameter.rank != 1 or (channels is not None and parameter.shape[0] not in (None, channels)):
            raise ShapeError(f"{node.op} input {name} must have shape [{channels}] (the channels of x {x}), got {parameter}")


def _epsilon(node) -> float:
    """The ``epsilon`` attr (``Attr("epsilon: float = 0.0001")``).

    Raises:
        ShapeError: it is not a number.
    """
    return attr_float(node, "epsilon", DEFAULT_EPSILON)


def infer(node, input_types, input_constants):
    _check(node, input_types)
    x = input_types[0]
    channel_type = TensorType((x.shape[3],), input_types[3].dtype)
    side = (channel_type,) * 4 + ((TensorType((), channel_type.dtype),) if node.op == "FusedBatchNormV3" else ())
    return (x, *side)


def reference(node, inputs):
    x, scale, offset, mean, variance = (np.asarray(v, dtype=np.float32) for v in inputs)
    _check(node, [TensorType(v.shape) for v in (x, scale, offset, mean, variance)])
    factor = scale.astype(np.float64) / np.sqrt(variance.astype(np.float64) + _epsilon(node))
    y = ((x.astype(np.float64) - mean) * factor + offset).astype(np.float32)
    side = (mean.copy(), variance.copy(), mean.copy(), variance.copy())
    if node.op == "FusedBatchNormV3":
        side += (np.zeros((), np.float32),)
    return (y, *side)


def lower(node, inputs, outputs, context):
    """``S[d0..d3]: Y[d] = (X[d] - M[d3]) * (G[d3] / sqrt(V[d3] + eps)) + B[d3]`` (``y`` only)."""
    x, scale, offset, mean, variance = inputs
    y = outputs[0]
    iterators = ("d0", "d1", "d2", "d3")

    def channel(array):
        return Load(Access.of(array.name, "d3"))

    factor = Binary("div", channel(scale), Unary("sqrt", Binary("add", channel(variance), Constant(_epsilon(node)))))
    value = Binary("add", Binary("mul", Binary("sub", Load(Access.of(x.name, *iterators)), channel(mean)), factor), channel(offset))
    return [Statement(context.statement_name(), iterators, y.shape, Access.of(y.name, *iterators), value, node=node.name, op=node.op)]


def inference_affine(node, input_constants):
    """The node as ``y = x * scale + shift`` per channel, for graph rewrites: ``scale = gamma /
    sqrt(variance + epsilon)``, ``shift = offset - mean * scale`` (float64, one entry per
    channel); None unless ``is_training`` is False, the layout NHWC and the four parameters
    known at compile time. Never raises on a malformed node (shape inference reports it).

    Args:
        input_constants: the compile-time values of the node's inputs (None where unknown).
    """
    if node.attr("is_training", True) or not is_channels_last(node) or len(node.inputs) < 5:
        return None
    parameters = list(input_constants[1:5])
    if any(p is None for p in parameters):
        return None
    gamma, beta, mean, variance = (np.asarray(p, dtype=np.float64).reshape(-1) for p in parameters)
    scale = gamma / np.sqrt(variance + float(node.attr("epsilon", DEFAULT_EPSILON)))
    return scale, beta - mean * scale


def _define(op: str) -> OpDefinition:
    return OpDefinition(op, ELEMENTWISE, infer, reference, lower, source=f"tensorflow/core/ops/nn_ops.cc: {op}", arity=Arity(5, 5), affine=inference_affine)


FUSED_BATCH_NORM = _define("FusedBatchNorm")
FUSED_BATCH_NORM_V2 = _define("FusedBatchNormV2")
FUSED_BATCH_NORM_V3 = _define("FusedBatchNormV3")
