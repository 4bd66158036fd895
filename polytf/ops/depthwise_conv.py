"""DepthwiseConv2dNative: depthwise 2-D convolution, NHWC input and [KH, KW, C, M] filter.

Source: TensorFlow op definition ``DepthwiseConv2dNative`` (tensorflow/core/ops/nn_ops.cc)
and its kernel (tensorflow/core/kernels/depthwise_conv_op.cc); window geometry as for
Conv2D (tensorflow/core/framework/kernel_shape_util.cc):

* input ``[N, H, W, C]``, filter ``[KH, KW, C, M]`` (M: channel multiplier)
  -> output ``[N, OH, OW, C*M]``;
* attrs ``strides`` and ``dilations`` are 4-tuples in NHWC order (batch and channel
  entries must be 1); ``padding`` is ``"SAME"``, ``"VALID"`` or ``"EXPLICIT"`` (then
  ``explicit_paddings`` holds 8 ints, ``[before, after]`` per NHWC dimension, batch and
  channel entries 0); ``data_format`` must be ``"NHWC"``;
* ``out[n, oh, ow, c*M + m] = sum_{kh, kw} in[n, oh*sh + kh*dh - pad_top, ow*sw + kw*dw - pad_left, c] * filter[kh, kw, c, m]``
  with padded cells reading zero.

A depthwise convolution is the grouped convolution with ``G = C`` groups of one input
channel and ``M`` output channels (:mod:`polytf.ops.conv`): its reference and its
statements are the grouped convolution's (:func:`~polytf.ops.conv.grouped_reference`,
:func:`~polytf.ops.conv.convolution_statements`). Lowering: ``O = 0`` then a reduction over
``kh, kw`` only (``r0, r1``); the output channel ``d3`` reads input channel ``d3`` when
``M == 1`` (MobileNet's case, so the channel dimension stays a plain, contiguous,
vectorisable index) and ``floor(d3 / M)``, filter entry ``d3 mod M`` otherwise. Padding
becomes affine constraints of the update's domain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_ints, attr_string, is_channels_last
from polytf.ops.conv import (
    PADDINGS,
    ConvGeometry,
    Window,
    check_nhwc,
    convolution_statements,
    grouped_reference,
    nhwc_4tuple,
    window,
)
from polytf.ops.definition import CONTRACTION, Arity, OpDefinition
from polytf.ops.traits import WeightLayout
from polytf.poly.affine import AffineExpr, FloorDiv, Modulo

OP = "DepthwiseConv2dNative"


@dataclass(frozen=True)
class DepthwiseGeometry:
    """Sizes of one depthwise convolution."""

    batch: int
    channels: int
    multiplier: int
    height: Window
    width: Window

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.height.output, self.width.output, self.channels * self.multiplier)

    @property
    def grouped(self) -> ConvGeometry:
        """The same convolution as ``C`` groups of one input and ``M`` output channels."""
        return ConvGeometry(self.batch, self.channels, self.channels * self.multiplier, self.height, self.width, groups=self.channels)


def explicit_window(size: int, kernel: int, stride: int, dilation: int, pad_before: int, pad_after: int, what: str) -> Window:
    """Window geometry for ``padding="EXPLICIT"``: ``out = (size + before + after - (k-1)*d - 1) // s + 1``.

    Raises:
        ShapeError: a negative padding, non-positive parameters or an empty output.
    """
    if kernel < 1 or stride < 1 or dilation < 1:
        raise ShapeError(f"{what}: kernel size, stride and dilation must be >= 1, got {kernel}, {stride}, {dilation}")
    if pad_before < 0 or pad_after < 0:
        raise ShapeError(f"{what}: explicit paddings must be >= 0, got {pad_before}, {pad_after}")
    effective = (kernel - 1) * dilation + 1
    padded = size + pad_before + pad_after
    if padded < effective:
        raise ShapeError(f"{what}: window of size {effective} does not fit in the padded input of size {padded}")
    output = (padded - effective) // stride + 1
    return Window(size, kernel, stride, dilation, output, pad_before, pad_after)


def _explicit_paddings(node) -> tuple[tuple[int, int], ...]:
    value = attr_ints(node, "explicit_paddings", ())
    if len(value) != 8:
        raise ShapeError(f"{OP} node '{node.name}' with padding EXPLICIT needs 8 explicit_paddings (NHWC before/after), got {value}")
    pairs = tuple((value[2 * k], value[2 * k + 1]) for k in range(4))
    if pairs[0] != (0, 0) or pairs[3] != (0, 0):
        raise ShapeError(f"{OP} node '{node.name}': explicit_paddings {value} pad the batch or channel dimension; only H and W may be padded")
    return pairs


def geometry(node, input_type: TensorType, filter_type: TensorType) -> DepthwiseGeometry:
    """Sizes and window geometry of ``node``.

    Raises:
        ShapeError: not NHWC, ranks other than 4, dynamic shapes, mismatched channels,
            bad strides/dilations/padding, or a window that does not fit.
    """
    check_nhwc(node)
    if input_type.rank != 4:
        raise ShapeError(f"{OP} needs a rank-4 NHWC input, got {input_type}")
    if filter_type.rank != 4:
        raise ShapeError(f"{OP} needs a rank-4 [KH, KW, C, M] filter, got {filter_type}")
    if not input_type.is_static or not filter_type.is_static:
        raise ShapeError(f"{OP} needs static shapes, got input {input_type} and filter {filter_type}")
    strides = nhwc_4tuple(node, "strides")
    dilations = nhwc_4tuple(node, "dilations", (1, 1, 1, 1))
    padding = attr_string(node, "padding", allowed=(*PADDINGS, "EXPLICIT"))
    n, h, w, c = input_type.shape
    kh, kw, fc, m = filter_type.shape
    if c != fc:
        raise ShapeError(f"{OP} input {input_type} has {c} channels but the filter {filter_type} expects {fc}")
    if m < 1:
        raise ShapeError(f"{OP} filter {filter_type} has channel multiplier {m}; it must be >= 1")
    if padding == "EXPLICIT":
        pads = _explicit_paddings(node)
        height = explicit_window(h, kh, strides[1], dilations[1], *pads[1], f"{OP} height")
        width = explicit_window(w, kw, strides[2], dilations[2], *pads[2], f"{OP} width")
    else:
        height = window(h, kh, strides[1], dilations[1], padding, f"{OP} height")
        width = window(w, kw, strides[2], dilations[2], padding, f"{OP} width")
    return DepthwiseGeometry(n, c, m, height, width)


def infer(node, input_types, input_constants):
    if len(input_types) != 2:
        raise ShapeError(f"{OP} takes 2 inputs (input, filter), got {len(input_types)}")
    x, f = input_types
    return (TensorType(geometry(node, x, f).output_shape, x.dtype),)


def reference(node, inputs):
    """The grouped convolution's reference with the filter ``[KH, KW, C, M]`` read as
    ``[KH, KW, 1, C*M]`` (the same elements in the same order)."""
    x, f = (np.asarray(v, dtype=np.float32) for v in inputs)
    g = geometry(node, TensorType(x.shape), TensorType(f.shape))
    return (grouped_reference(x, f.reshape(f.shape[0], f.shape[1], 1, -1), g.grouped),)


def lower(node, inputs, outputs, context):
    """``S_init[d0..d3]: O[d] = 0``;
    ``S_update[d0, d1, d2, d3, r0, r1]: O[d] += I[d0, sh*d1 + dh*r0 - pt, sw*d2 + dw*r1 - pl, c] * F[r0, r1, c, m]``
    with ``c = d3, m = 0`` when the multiplier is 1, else ``c = floor(d3/M), m = d3 mod M``."""
    x, f = inputs
    (y,) = outputs
    g = geometry(node, x.type, f.type)
    if g.multiplier == 1:
        channel, entry = AffineExpr.of("d3"), AffineExpr.of(0)
    else:
        channel, entry = FloorDiv(AffineExpr.of("d3"), g.multiplier), Modulo(AffineExpr.of("d3"), g.multiplier)
    filter_index = (AffineExpr.of("r0"), AffineExpr.of("r1"), channel, entry)
    return convolution_statements(node, y, (x.name, (channel,)), (f.name, filter_index), (g.height, g.width), 0, context)


#: filter ``[KH, KW, C, M]``: output channel ``c * M + m`` is axes 2 and 3; every output sums
#: over ``KH, KW`` only.
FILTER_LAYOUT = WeightLayout(
    input=1, rank=4, output_rank=4, window_axes=(0, 1), channel_axes=lambda node: (2, 3) if is_channels_last(node) else None,
    depthwise=True, dilatable=True, independent_rows=is_channels_last,
)
DEPTHWISE_CONV2D = OpDefinition(
    OP, CONTRACTION, infer, reference, lower, source="tensorflow/core/ops/nn_ops.cc: DepthwiseConv2dNative", arity=Arity(2, 2), weight_layout=FILTER_LAYOUT
)
