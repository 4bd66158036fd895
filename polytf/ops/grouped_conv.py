"""GroupedConv2D: a grouped 2-D convolution of an input viewed as ``[N, H, W, G, C/G]``.

polytf's own op: what the expansion pass makes of a TensorFlow ``Conv2D`` whose filter has
fewer input channels than its input (:func:`polytf.ops.conv.expand_groups`; Keras'
``Conv2D(groups=G)``: RegNet's and ResNeXt's grouped 3x3, ConvNeXt's 7x7 depthwise written
as ``groups=C``). Semantics are Conv2D's (tensorflow/core/ops/nn_ops.cc: ``Conv2D``;
tensorflow/core/kernels/conv_ops_impl.h), with the input's channel axis split in two:

* input ``[N, H, W, G, Cg]`` (a ``Reshape`` view of the Conv2D's ``[N, H, W, G*Cg]``
  input, no copy), filter ``[KH, KW, Cg, O]`` with ``O = G * Og`` -> output
  ``[N, OH, OW, O]``;
* attrs ``strides``, ``dilations``, ``padding`` (SAME or VALID) and ``data_format``
  (NHWC) as Conv2D's;
* ``out[n, oh, ow, o] = sum_{kh, kw, c < Cg} in[n, oh*sh + kh*dh - pad_top, ow*sw + kw*dw - pad_left, floor(o/Og), c] * filter[kh, kw, c, o]``.

Lowering (:func:`polytf.ops.conv.convolution_statements`): the output channel ``d3`` stays
one flat iterator, so the element-wise epilogue fused after the convolution (bias, batch
norm, activation; over ``d0..d3``) shares its loops, and the micro-kernel vectorises
``d3``: a vector of output channels inside one group reads one input element (a broadcast).
The group is the index ``floor(d3/Og)`` of the view's own axis (``d3`` when ``Og = 1``) and
the channel reduction ``r2`` runs over ``Cg`` (no ``r2`` when ``Cg = 1``: a depthwise
convolution sums over its window only, as :mod:`polytf.ops.depthwise_conv` does).
The index is affine inside a register tile of whole groups, which the search space and the
analytic recipe prefer (:func:`polytf.schedules.analytic_recipe.register_column_multiple`:
24 columns for 24 outputs per group); groups smaller than a vector (``Og < L`` lanes) read a
gather of ``L / Og`` distinct elements. Splitting ``d3`` into a group and a channel-in-group
iterator would give the same micro-kernel (the group stays constant across a vector either
way) but a statement whose output iterators differ from its epilogue's, which then no longer
shares their band.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import is_channels_last
from polytf.ops.conv import (
    GROUPED_OP,
    ConvGeometry,
    check_nhwc,
    convolution_statements,
    grouped_reference,
    windows,
)
from polytf.ops.definition import CONTRACTION, Arity, OpDefinition
from polytf.ops.traits import WeightLayout
from polytf.poly.affine import AffineExpr, FloorDiv


def geometry(node, input_type: TensorType, filter_type: TensorType) -> ConvGeometry:
    """Sizes, groups and windows of ``node``.

    Raises:
        ShapeError: not NHWC, an input other than rank 5 or a filter other than rank 4,
            dynamic shapes, filter in-channels other than the view's last axis, output
            channels that the groups do not divide, or bad strides/dilations/padding.
    """
    check_nhwc(node)
    if input_type.rank != 5:
        raise ShapeError(f"{GROUPED_OP} node '{node.name}' needs a rank-5 [N, H, W, G, C/G] input, got {input_type}")
    if filter_type.rank != 4:
        raise ShapeError(f"{GROUPED_OP} node '{node.name}' needs a rank-4 [KH, KW, C/G, O] filter, got {filter_type}")
    if not input_type.is_static or not filter_type.is_static:
        raise ShapeError(f"{GROUPED_OP} node '{node.name}' needs static shapes, got input {input_type} and filter {filter_type}")
    n, h, w, groups, group_channels = input_type.shape
    kh, kw, fc, o = filter_type.shape
    if fc != group_channels or groups < 1:
        raise ShapeError(
            f"{GROUPED_OP} node '{node.name}': input {input_type} has {group_channels} channels per group but the filter {filter_type} expects {fc}"
        )
    if o % groups:
        raise ShapeError(
            f"{GROUPED_OP} node '{node.name}': {groups} groups do not divide the filter {filter_type}'s {o} output channels"
        )
    height, width = windows(node, kh, kw, h, w)
    return ConvGeometry(n, groups * group_channels, o, height, width, groups)


def infer(node, input_types, input_constants):
    if len(input_types) != 2:
        raise ShapeError(f"{GROUPED_OP} takes 2 inputs (input, filter), got {len(input_types)}")
    x, f = input_types
    return (TensorType(geometry(node, x, f).output_shape, x.dtype),)


def reference(node, inputs):
    x, f = (np.asarray(v, dtype=np.float32) for v in inputs)
    g = geometry(node, TensorType(x.shape), TensorType(f.shape))
    return (grouped_reference(x.reshape(x.shape[:3] + (-1,)), f, g),)


def group_index(group_filters: int) -> AffineExpr | FloorDiv:
    """The group of output channel ``d3``: ``floor(d3 / Og)``, or ``d3`` itself when every
    group has one output channel."""
    return AffineExpr.of("d3") if group_filters == 1 else FloorDiv(AffineExpr.of("d3"), group_filters)


def lower(node, inputs, outputs, context):
    """``S_init[d0..d3]: O[d] = 0``;
    ``S_update[d0, d1, d2, d3, r0, r1, r2]: O[d] += I[d0, sh*d1 + dh*r0 - pt, sw*d2 + dw*r1 - pl, floor(d3/Og), r2] * F[r0, r1, r2, d3]``
    (no ``r2``, index 0, when ``Cg = 1``), padding as domain constraints."""
    x, f = inputs
    (y,) = outputs
    g = geometry(node, x.type, f.type)
    channel = AffineExpr.of("r2") if g.group_channels > 1 else AffineExpr.of(0)
    filter_index = (AffineExpr.of("r0"), AffineExpr.of("r1"), channel, AffineExpr.of("d3"))
    reduction = g.group_channels if g.group_channels > 1 else 0
    return convolution_statements(
        node, y, (x.name, (group_index(g.group_filters), channel)), (f.name, filter_index), g.spatial, reduction, context
    )


#: filter ``[KH, KW, C/G, O]`` as Conv2D's: output channel ``o`` is axis 3. Not dilatable: the
#: dilation folding runs before the expansion (its input is a ``[N, H, W, G, C/G]`` view).
FILTER_LAYOUT = WeightLayout(
    input=1, rank=4, output_rank=4, window_axes=(0, 1), channel_axes=lambda node: (3,) if is_channels_last(node) else None
)
GROUPED_CONV2D = OpDefinition(
    GROUPED_OP,
    CONTRACTION,
    infer,
    reference,
    lower,
    source="tensorflow/core/ops/nn_ops.cc: Conv2D with groups (polytf-internal: input viewed as [N, H, W, G, C/G])",
    arity=Arity(2, 2),
    weight_layout=FILTER_LAYOUT,
)
