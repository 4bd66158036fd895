"""``Conv2DBackpropInput``: the transposed 2-D convolution (NHWC), as Keras'
``Conv2DTranspose`` freezes.

Source: TensorFlow op definition ``Conv2DBackpropInput`` (tensorflow/core/ops/nn_ops.cc),
the gradient of ``Conv2D`` with respect to its input; window geometry as in
:mod:`polytf.ops.conv`:

* inputs ``input_sizes`` (an int32 ``[4]`` constant ``[N, H, W, C]``), ``filter: [KH, KW, C, O]``
  and ``out_backprop: [N, OH, OW, O]`` -> ``[N, H, W, C]``; attrs ``strides``, ``padding``
  (SAME or VALID), ``data_format`` (NHWC), ``dilations`` (1 only here);
* ``(OH, OW)`` must be what ``Conv2D`` of an ``[N, H, W, C]`` input would produce;
* ``Y[n, h, w, c] = sum over (oh, kh) with oh*s + kh - pad_top = h (and likewise w)
  of sum_o dy[n, oh, ow, o] * filter[kh, kw, c, o]``.

Lowering: the *gather* form, a direct convolution with the spatially flipped filter over a
zero-dilated copy of ``out_backprop`` (the scatter form, ``Y[oh*s + kh - p] += ...``, would
write one element from several iterations of the output band, which neither tiles nor
parallelizes). With ``P = KH - 1 - pad_top`` and ``Q = KW - 1 - pad_left``
(both ``>= 0``), a kernel temporary ``T: [N, H + KH - 1, W + KW - 1, O]``:

1. ``T[d] = 0``;
2. ``T[d0, s*d1 + P, s*d2 + Q, d3] = dy[d0, d1, d2, d3]`` (an affine, strided write);
3. ``Y[d] = 0``;
4. ``Y[d0, d1, d2, d3] += T[d0, d1 + KH - 1 - r0, d2 + KW - 1 - r1, r2] * filter[r0, r1, d3, r2]``.

With stride 1 the dilation is the identity, yet ``T`` still supplies the zero halo, so no
domain constraint is needed. REDUCTION category (its temporary and zero fill are its own).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_string
from polytf.ops.constant_inputs import constant_input
from polytf.ops.conv import PADDINGS, Window, check_nhwc, nhwc_4tuple, window
from polytf.ops.definition import REDUCTION, Arity, OpDefinition
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.statement import Statement


@dataclass(frozen=True)
class TransposedGeometry:
    """``Y: [batch, height.size, width.size, channels]`` from ``dy: [batch, height.output,
    width.output, filters]``."""

    batch: int
    channels: int
    filters: int
    height: Window
    width: Window


def geometry(node, sizes_value, filter_type: TensorType, gradient_type: TensorType) -> TransposedGeometry:
    """The forward convolution's windows, checked against ``out_backprop``.

    Raises:
        ShapeError: ``input_sizes`` not a constant ``[4]`` vector; non-NHWC; dilations other
            than 1; shapes that do not match a Conv2D of ``input_sizes``.
    """
    check_nhwc(node)
    if sizes_value is None:
        raise ShapeError(f"Conv2DBackpropInput node '{node.name}': its input_sizes input must be a compile-time constant")
    sizes = np.asarray(sizes_value)
    if sizes.dtype.kind not in "iu" or sizes.shape != (4,):
        raise ShapeError(f"Conv2DBackpropInput node '{node.name}': input_sizes must be an int32 vector [N, H, W, C], got {sizes!r}")
    n, h, w, c = (int(v) for v in sizes)
    if filter_type.rank != 4 or gradient_type.rank != 4 or not filter_type.is_static or not gradient_type.is_static:
        raise ShapeError(f"Conv2DBackpropInput node '{node.name}': needs a static [KH, KW, C, O] filter and [N, OH, OW, O] out_backprop, got {filter_type} and {gradient_type}")
    strides = nhwc_4tuple(node, "strides")
    if nhwc_4tuple(node, "dilations", (1, 1, 1, 1)) != (1, 1, 1, 1):
        raise ShapeError(f"Conv2DBackpropInput node '{node.name}': dilations other than 1 are not supported")
    padding = attr_string(node, "padding", allowed=(*PADDINGS, "EXPLICIT"))
    kh, kw, fc, o = filter_type.shape
    height = window(h, kh, strides[1], 1, padding, f"Conv2DBackpropInput node '{node.name}' height")
    width = window(w, kw, strides[2], 1, padding, f"Conv2DBackpropInput node '{node.name}' width")
    expected = (n, height.output, width.output, o)
    if fc != c or tuple(gradient_type.shape) != expected:
        raise ShapeError(
            f"Conv2DBackpropInput node '{node.name}': filter {filter_type} and out_backprop {gradient_type} do not match a Conv2D "
            f"of an input {[n, h, w, c]} (out_backprop should be {list(expected)}, filter [.., .., {c}, ..])"
        )
    return TransposedGeometry(n, c, o, height, width)


def _check_count(node, count: int) -> None:
    if count != 3:
        raise ShapeError(f"Conv2DBackpropInput node '{node.name}' takes 3 inputs (input_sizes, filter, out_backprop), got {count}")


def infer(node, input_types, input_constants):
    """``input_sizes: [4], filter: [KH, KW, C, O], out_backprop: [N, OH, OW, O] -> [N, H, W, C]``.

    Raises:
        ShapeError: see :func:`geometry`.
    """
    _check_count(node, len(input_types))
    g = geometry(node, input_constants[0], input_types[1], input_types[2])
    return (TensorType((g.batch, g.height.size, g.width.size, g.channels), input_types[2].dtype),)


def reference(node, inputs):
    """Scatter form in float64: every ``dy`` cell adds its filter-weighted contribution."""
    _check_count(node, len(inputs))
    f = np.asarray(inputs[1], np.float64)
    dy = np.asarray(inputs[2], np.float64)
    g = geometry(node, inputs[0], TensorType(f.shape), TensorType(dy.shape))
    hh, ww = g.height, g.width
    padded = np.zeros((g.batch, hh.size + hh.pad_before + hh.pad_after, ww.size + ww.pad_before + ww.pad_after, g.channels))
    for kh in range(hh.kernel):
        for kw in range(ww.kernel):
            rows = slice(kh, kh + (hh.output - 1) * hh.stride + 1, hh.stride)
            cols = slice(kw, kw + (ww.output - 1) * ww.stride + 1, ww.stride)
            padded[:, rows, cols, :] += np.tensordot(dy, f[kh, kw], axes=([3], [1]))
    result = padded[:, hh.pad_before : hh.pad_before + hh.size, ww.pad_before : ww.pad_before + ww.size, :]
    return (np.ascontiguousarray(result).astype(np.float32),)


def lower(node, inputs, outputs, context):
    """Zero-dilate ``out_backprop`` into a temporary, then convolve with the flipped filter
    (module docstring)."""
    f, dy = inputs
    (y,) = outputs
    g = geometry(node, constant_input(node, context, 0, "input_sizes"), f.type, dy.type)
    hh, ww = g.height, g.width
    top, left = hh.kernel - 1 - hh.pad_before, ww.kernel - 1 - ww.pad_before
    dilated = context.temporary((g.batch, hh.size + hh.kernel - 1, ww.size + ww.kernel - 1, g.filters))
    d = ("d0", "d1", "d2", "d3")

    def statement(iterators, extents, write, value):
        return Statement(context.statement_name(), tuple(iterators), tuple(extents), write, value, (), node.name, node.op)

    out = Access.of(y.name, *d)
    spread = Access.of(dilated.name, "d0", AffineExpr.combine((hh.stride, "d1"), constant=top), AffineExpr.combine((ww.stride, "d2"), constant=left), "d3")
    window_read = Access.of(
        dilated.name, "d0", AffineExpr.combine((1, "d1"), (-1, "r0"), constant=hh.kernel - 1), AffineExpr.combine((1, "d2"), (-1, "r1"), constant=ww.kernel - 1), "r2"
    )
    weight = Access.of(f.name, "r0", "r1", "d3", "r2")
    return [
        statement(d, dilated.shape, Access.of(dilated.name, *d), Constant(0.0)),
        statement(d, dy.shape, spread, Load(Access.of(dy.name, *d))),
        statement(d, y.shape, out, Constant(0.0)),
        statement((*d, "r0", "r1", "r2"), (*y.shape, hh.kernel, ww.kernel, g.filters), out, Binary("add", Load(out), Binary("mul", Load(window_read), Load(weight)))),
    ]


CONV2D_BACKPROP_INPUT = OpDefinition(
    "Conv2DBackpropInput", REDUCTION, infer, reference, lower, data_inputs=(1, 2),
    source="tensorflow/core/ops/nn_ops.cc: Conv2DBackpropInput", arity=Arity(3, 3),
)
