"""Conv2D: 2-D convolution, NHWC input and HWIO filter.

Source: TensorFlow op definition ``Conv2D`` (tensorflow/core/ops/nn_ops.cc) and the
window geometry of tensorflow/core/framework/kernel_shape_util.cc
(``GetWindowedOutputSizeVerbose``):

* input ``[N, H, W, C]``, filter ``[KH, KW, C, O]`` -> output ``[N, OH, OW, O]``;
* attrs ``strides`` and ``dilations`` are 4-tuples in NHWC order (batch and channel
  entries must be 1), ``padding`` is ``"SAME"`` or ``"VALID"`` (``"EXPLICIT"`` is not
  supported), ``data_format`` must be ``"NHWC"``;
* VALID: ``out = ceil((in - (k-1)*d) / s)``, no padding;
  SAME: ``out = ceil(in / s)``, ``pad_total = max((out-1)*s + (k-1)*d + 1 - in, 0)``,
  ``pad_before = pad_total // 2`` (the extra cell goes after);
* ``out[n, oh, ow, o] = sum_{kh, kw, c} in[n, oh*sh + kh*dh - pad_top, ow*sw + kw*dw - pad_left, c] * filter[kh, kw, c, o]``
  with padded cells reading zero.

The lowering never reads out of bounds: the padding becomes affine constraints of the
update statement's domain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import REQUIRED, attr_ints, attr_string, is_channels_last
from polytf.ops.definition import CONTRACTION, Arity, OpDefinition
from polytf.ops.traits import WeightLayout
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.statement import Statement

#: TensorFlow's padding schemes polytf compiles (EXPLICIT only for DepthwiseConv2dNative)
PADDINGS = ("SAME", "VALID")


@dataclass(frozen=True)
class Window:
    """Geometry of a sliding window along one spatial dimension."""

    size: int  # input size
    kernel: int
    stride: int
    dilation: int
    output: int
    pad_before: int
    pad_after: int

    def input_index(self, out_iterator: str, kernel_iterator: str) -> AffineExpr:
        """``stride*out + dilation*k - pad_before``."""
        return AffineExpr.combine((self.stride, out_iterator), (self.dilation, kernel_iterator), constant=-self.pad_before)

    def constraints(self, out_iterator: str, kernel_iterator: str) -> tuple[str, ...]:
        """Domain constraints keeping the input index in ``[0, size)``; none when it always is."""
        index = self.input_index(out_iterator, kernel_iterator)
        lowest = -self.pad_before
        highest = (self.output - 1) * self.stride + (self.kernel - 1) * self.dilation - self.pad_before
        if lowest >= 0 and highest < self.size:
            return ()
        return (f"0 <= {index.to_isl()} < {self.size}",)


def window(size: int, kernel: int, stride: int, dilation: int, padding: str, what: str) -> Window:
    """Output size and padding exactly as TensorFlow computes them.

    Raises:
        ShapeError: unsupported padding, non-positive parameters or an empty output.
    """
    if kernel < 1 or stride < 1 or dilation < 1:
        raise ShapeError(f"{what}: kernel size, stride and dilation must be >= 1, got {kernel}, {stride}, {dilation}")
    effective = (kernel - 1) * dilation + 1
    if padding == "VALID":
        output = (size - effective + stride) // stride  # ceil((size - (k-1)*d) / s)
        pad_before = pad_after = 0
    elif padding == "SAME":
        output = (size + stride - 1) // stride
        pad_total = max((output - 1) * stride + effective - size, 0)
        pad_before = pad_total // 2
        pad_after = pad_total - pad_before
    elif padding == "EXPLICIT":
        raise ShapeError(f"{what}: padding 'EXPLICIT' is unsupported; polytf supports 'SAME' and 'VALID'")
    else:
        raise ShapeError(f"{what}: unknown padding {padding!r}; polytf supports 'SAME' and 'VALID'")
    if output < 1:
        raise ShapeError(
            f"{what}: window of size {effective} (kernel {kernel}, dilation {dilation}) does not fit in an input of size {size} with VALID padding"
        )
    return Window(size, kernel, stride, dilation, output, pad_before, pad_after)


def nhwc_4tuple(node, key: str, default=REQUIRED) -> tuple[int, int, int, int]:
    """A 4-tuple attr in NHWC order whose batch and channel entries must be 1 (required
    unless ``default`` is given).

    Raises:
        ShapeError: missing, not 4 integers, or batch/channel entries other than 1.
    """
    value = attr_ints(node, key, default, length=4)
    if value[0] != 1 or value[3] != 1:
        raise ShapeError(f"{node.op} attr '{key}' = {value}: batch and channel entries must be 1")
    return value


def check_nhwc(node) -> None:
    data_format = attr_string(node, "data_format", "NHWC")
    if data_format != "NHWC":
        raise ShapeError(f"{node.op} with data_format {data_format!r} is unsupported: polytf supports NHWC only")


@dataclass(frozen=True)
class ConvGeometry:
    batch: int
    channels: int
    filters: int
    height: Window
    width: Window


def geometry(node, input_type: TensorType, filter_type: TensorType) -> ConvGeometry:
    check_nhwc(node)
    if input_type.rank != 4:
        raise ShapeError(f"Conv2D needs a rank-4 NHWC input, got {input_type}")
    if filter_type.rank != 4:
        raise ShapeError(f"Conv2D needs a rank-4 HWIO filter, got {filter_type}")
    strides = nhwc_4tuple(node, "strides")
    dilations = nhwc_4tuple(node, "dilations", (1, 1, 1, 1))
    padding = attr_string(node, "padding", allowed=(*PADDINGS, "EXPLICIT"))  # EXPLICIT: refused by window()
    n, h, w, c = input_type.shape
    kh, kw, fc, o = filter_type.shape
    if not input_type.is_static or not filter_type.is_static:
        raise ShapeError(f"Conv2D needs static shapes, got input {input_type} and filter {filter_type}")
    if c != fc:
        raise ShapeError(
            f"Conv2D input {input_type} has {c} channels but the filter {filter_type} expects {fc} (grouped convolution is unsupported)"
        )
    height = window(h, kh, strides[1], dilations[1], padding, "Conv2D height")
    width = window(w, kw, strides[2], dilations[2], padding, "Conv2D width")
    return ConvGeometry(n, c, o, height, width)


def infer(node, input_types, input_constants):
    if len(input_types) != 2:
        raise ShapeError(f"Conv2D takes 2 inputs (input, filter), got {len(input_types)}")
    x, f = input_types
    g = geometry(node, x, f)
    return (TensorType((g.batch, g.height.output, g.width.output, g.filters), x.dtype),)


def reference(node, inputs):
    x, f = (np.asarray(v, dtype=np.float32) for v in inputs)
    g = geometry(node, TensorType(x.shape), TensorType(f.shape))
    hh, ww = g.height, g.width
    padded = np.pad(x.astype(np.float64), ((0, 0), (hh.pad_before, hh.pad_after), (ww.pad_before, ww.pad_after), (0, 0)))
    out = np.zeros((g.batch, hh.output, ww.output, g.filters), dtype=np.float64)
    for kh in range(hh.kernel):
        for kw in range(ww.kernel):
            rows = slice(kh * hh.dilation, kh * hh.dilation + (hh.output - 1) * hh.stride + 1, hh.stride)
            cols = slice(kw * ww.dilation, kw * ww.dilation + (ww.output - 1) * ww.stride + 1, ww.stride)
            out += np.tensordot(padded[:, rows, cols, :], f[kh, kw].astype(np.float64), axes=([3], [0]))
    return (out.astype(np.float32),)


def lower(node, inputs, outputs, context):
    """``S_init[d0..d3]: O[d] = 0``;
    ``S_update[d0, d1, d2, d3, r0, r1, r2]: O[d] += I[d0, sh*d1 + dh*r0 - pt, sw*d2 + dw*r1 - pl, r2] * F[r0, r1, r2, d3]``
    with padding as domain constraints."""
    x, f = inputs
    (y,) = outputs
    g = geometry(node, x.type, f.type)
    out = Access.of(y.name, "d0", "d1", "d2", "d3")
    init = Statement(context.statement_name(), ("d0", "d1", "d2", "d3"), y.shape, out, Constant(0.0), node=node.name, op=node.op)
    x_access = Access.of(x.name, "d0", g.height.input_index("d1", "r0"), g.width.input_index("d2", "r1"), "r2")
    f_access = Access.of(f.name, "r0", "r1", "r2", "d3")
    update = Statement(
        context.statement_name(),
        ("d0", "d1", "d2", "d3", "r0", "r1", "r2"),
        y.shape + (g.height.kernel, g.width.kernel, g.channels),
        out,
        Binary("add", Load(out), Binary("mul", Load(x_access), Load(f_access))),
        constraints=g.height.constraints("d1", "r0") + g.width.constraints("d2", "r1"),
        node=node.name,
        op=node.op,
    )
    return [init, update]


#: filter ``[KH, KW, C, O]``: output channel ``o`` is axis 3; every output sums over ``KH, KW, C``.
FILTER_LAYOUT = WeightLayout(
    input=1, rank=4, output_rank=4, window_axes=(0, 1), channel_axes=lambda node: (3,) if is_channels_last(node) else None
)
CONV2D = OpDefinition("Conv2D", CONTRACTION, infer, reference, lower, source="tensorflow/core/ops/nn_ops.cc: Conv2D", arity=Arity(2, 2), weight_layout=FILTER_LAYOUT)
