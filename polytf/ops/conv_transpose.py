"""``Conv2DBackpropInput``: the transposed 2-D convolution (NHWC), as Keras'
``Conv2DTranspose`` (and ``Conv1DTranspose``, on a ``[N, 1, W, C]`` view) freezes; and
``Conv3DBackpropInputV2``, the 3-D one (NDHWC, ``Conv3DTranspose``), by the same rules.

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

Expansion (:func:`sub_pixel_convolution`, the graph pass :mod:`polytf.passes.expansion`):
with a constant filter, equal strides ``s`` and float32 data, the node becomes a dense
convolution instead, the *sub-pixel* form (Shi et al., "Is the deconvolution layer the same
as a convolutional layer?", arXiv:1609.07009, 2016; oneDNN's deconvolution and TVM's
``conv2d_transpose`` avoid the inserted zeros the same way). Output row ``h = s*a + p``
(phase ``p`` in ``[0, s)``) only meets the filter rows ``kh = q_p + s*m`` with ``q_p = (p +
pad_top) mod s``, at ``out_backprop`` row ``a + e_p - m`` (``e_p = (p + pad_top) div s``);
so every phase is a stride-1 convolution of ``out_backprop`` with its own taps, and all
``s*s`` phases are one::

    Y = Slice(DepthToSpace(Conv2D(Pad(dy), G, VALID), s))     (no Pad, DepthToSpace or Slice
                                                               where it would do nothing)

with ``G: [MH, MW, O, s*s*C]``, ``G[jh, jw, o, (ph*s + pw)*C + c] = filter[kh, kw, c, o]`` for
the taps of phases ``ph, pw`` and 0 elsewhere (:func:`phase_taps`). A Conv2DTranspose of a
3x3 filter and stride 2 computes ``4*C*O`` products per input pixel this way (a 2x2
window, 9 of its 16 taps non-zero) against ``36*C*O`` in the zero-dilated form, and is
scheduled like any convolution (register tiles, packing, threads; a 2x2 filter of stride 2
becomes a 1x1 convolution: a matrix product).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_string
from polytf.ops.constant_inputs import constant_input
from polytf.ops.conv import CHANNELS_LAST, PADDINGS, SPATIAL_AXES, Window, channels_last_tuple, check_nhwc, window
from polytf.ops.definition import REDUCTION, Arity, OpDefinition
from polytf.ops.expansion import Expansion, GraphBuilder, NodeAdder
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.statement import Statement


@dataclass(frozen=True)
class TransposedGeometry:
    """``Y: [batch, *sizes, channels]`` from ``dy: [batch, *outputs, filters]``, one window per
    spatial axis (``spatial``: ``(height, width)``, or ``(depth, height, width)``)."""

    batch: int
    channels: int
    filters: int
    spatial: tuple[Window, ...]

    @property
    def height(self) -> Window:
        return self.spatial[-2]

    @property
    def width(self) -> Window:
        return self.spatial[-1]

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.batch, *(axis.size for axis in self.spatial), self.channels)


#: the ops of this module over 3 spatial axes (``NDHWC``); the others have 2
THREE_D = ("Conv3DBackpropInputV2",)


def geometry(node, sizes_value, filter_type: TensorType, gradient_type: TensorType) -> TransposedGeometry:
    """The forward convolution's windows, checked against ``out_backprop``.

    Raises:
        ShapeError: ``input_sizes`` not a constant ``[4]`` (``[5]``) vector; not channels-last;
            dilations other than 1; shapes that do not match a Conv2D (Conv3D) of
            ``input_sizes``.
    """
    rank = 5 if node.op in THREE_D else 4
    check_nhwc(node, rank)
    layout = CHANNELS_LAST[rank]
    if sizes_value is None:
        raise ShapeError(f"{node.op} node '{node.name}': its input_sizes input must be a compile-time constant")
    sizes = np.asarray(sizes_value)
    if sizes.dtype.kind not in "iu" or sizes.shape != (rank,):
        raise ShapeError(f"{node.op} node '{node.name}': input_sizes must be an int32 vector [{', '.join(layout)}], got {sizes!r}")
    n, *spatial_sizes, c = (int(v) for v in sizes)
    if filter_type.rank != rank or gradient_type.rank != rank or not filter_type.is_static or not gradient_type.is_static:
        raise ShapeError(f"{node.op} node '{node.name}': needs a static rank-{rank} filter [..., C, O] and out_backprop [N, ..., O], got {filter_type} and {gradient_type}")
    strides = channels_last_tuple(node, "strides", rank)
    if any(d != 1 for d in channels_last_tuple(node, "dilations", rank, (1,) * rank)):
        raise ShapeError(f"{node.op} node '{node.name}': dilations other than 1 are not supported")
    padding = attr_string(node, "padding", allowed=(*PADDINGS, "EXPLICIT"))
    *kernel_sizes, fc, o = filter_type.shape
    names = SPATIAL_AXES[-(rank - 2):]
    spatial = tuple(
        window(size, kernel, strides[k + 1], 1, padding, f"{node.op} node '{node.name}' {names[k]}") for k, (size, kernel) in enumerate(zip(spatial_sizes, kernel_sizes))
    )
    expected = (n, *(axis.output for axis in spatial), o)
    if fc != c or tuple(gradient_type.shape) != expected:
        raise ShapeError(
            f"{node.op} node '{node.name}': filter {filter_type} and out_backprop {gradient_type} do not match a {'Conv3D' if rank == 5 else 'Conv2D'} "
            f"of an input {[n, *spatial_sizes, c]} (out_backprop should be {list(expected)}, filter [.., {c}, ..])"
        )
    return TransposedGeometry(n, c, o, spatial)


def _check_count(node, count: int) -> None:
    if count != 3:
        raise ShapeError(f"{node.op} node '{node.name}' takes 3 inputs (input_sizes, filter, out_backprop), got {count}")


def infer(node, input_types, input_constants):
    """``input_sizes: [R], filter: [*window, C, O], out_backprop: [N, *outputs, O] -> [N, *sizes, C]``.

    Raises:
        ShapeError: see :func:`geometry`.
    """
    _check_count(node, len(input_types))
    g = geometry(node, input_constants[0], input_types[1], input_types[2])
    return (TensorType(g.output_shape, input_types[2].dtype),)


def reference(node, inputs):
    """Scatter form in float64: every ``dy`` cell adds its filter-weighted contribution."""
    _check_count(node, len(inputs))
    f = np.asarray(inputs[1], np.float64)
    dy = np.asarray(inputs[2], np.float64)
    g = geometry(node, inputs[0], TensorType(f.shape), TensorType(dy.shape))
    padded = np.zeros((g.batch, *(axis.size + axis.pad_before + axis.pad_after for axis in g.spatial), g.channels))
    for tap in itertools.product(*(range(axis.kernel) for axis in g.spatial)):
        cells = tuple(slice(k, k + (axis.output - 1) * axis.stride + 1, axis.stride) for k, axis in zip(tap, g.spatial))
        padded[(slice(None), *cells)] += np.tensordot(dy, f[tap], axes=([-1], [1]))
    result = padded[(slice(None), *(slice(axis.pad_before, axis.pad_before + axis.size) for axis in g.spatial))]
    return (np.ascontiguousarray(result).astype(np.float32),)


def lower(node, inputs, outputs, context):
    """Zero-dilate ``out_backprop`` into a temporary, then convolve with the flipped filter
    (module docstring); the 2-D op only.

    Raises:
        ShapeError: a Conv3DBackpropInputV2 whose filter is not a constant (its expansion
            did not apply): run it on the host.
    """
    if node.op in THREE_D:
        raise ShapeError(f"{node.op} node '{node.name}' is compiled as a Conv3D over its output phases, which needs a constant filter: run it on the host")
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


@dataclass(frozen=True)
class PhaseTaps:
    """One spatial axis of the sub-pixel form (module docstring).

    Attributes:
        window: rows ``j`` of the dense convolution's filter, ``0 <= j < window``.
        taps: per phase ``p`` in ``[0, stride)``, the pairs ``(j, k)``: row ``j`` of the dense
            filter is row ``k`` of the transposed convolution's filter.
        pad_before, pad_after: zero rows added around ``out_backprop``.
        rows: the dense convolution's output rows (``stride * rows >= size``; the rows past
            ``size`` are cut off).
    """

    window: int
    taps: tuple[tuple[tuple[int, int], ...], ...]
    pad_before: int
    pad_after: int
    rows: int


def phase_taps(axis: Window) -> PhaseTaps:
    """The sub-pixel form of one axis of a transposed convolution whose forward convolution
    has the window ``axis`` (module docstring: ``Y[s*a + p] = sum_m dy[a + e_p - m] *
    filter[q_p + s*m]``, placed at dense-filter row ``j = pad_before + e_p - m``)."""
    s, kernel = axis.stride, axis.kernel
    phases = []
    for p in range(s):
        shifted = p + axis.pad_before
        first, quotient = shifted % s, shifted // s
        phases.append((first, quotient, max(0, -(-(kernel - first) // s))))
    pad_before = max(0, *(count - 1 - quotient for _, quotient, count in phases))
    window = max(pad_before + quotient for _, quotient, count in phases if count) + 1
    taps = tuple(tuple((pad_before + quotient - m, first + s * m) for m in range(count)) for first, quotient, count in phases)
    needed = -(-axis.size // s) + window - 1  # rows of the padded input the output rows read
    pad_after = max(0, needed - pad_before - axis.output)
    return PhaseTaps(window, taps, pad_before, pad_after, axis.output + pad_before + pad_after - window + 1)


def sub_pixel_filter(filters: np.ndarray, axes: tuple[PhaseTaps, ...]) -> np.ndarray:
    """The dense convolution's filter ``G: [*windows, O, prod(strides)*C]`` from the
    transposed convolution's ``filters: [*kernel, C, O]`` (module docstring): the phase
    ``(p_1, .., p_S)`` (row-major over the axes: ``(ph*SW + pw)`` in 2-D) owns the output
    channels ``phase*C + c``; zeros where a phase has no tap."""
    channels, filters_out = filters.shape[-2:]
    strides = tuple(len(axis.taps) for axis in axes)
    dense = np.zeros((*(axis.window for axis in axes), filters_out, math.prod(strides) * channels), filters.dtype)
    for phase, phase_taps_of_axes in enumerate(itertools.product(*(axis.taps for axis in axes))):
        block = slice(phase * channels, (phase + 1) * channels)
        for pairs in itertools.product(*phase_taps_of_axes):
            dense[(*(j for j, _ in pairs), slice(None), block)] = filters[tuple(k for _, k in pairs)].T
    return dense


def sub_pixel_convolution(node, builder: GraphBuilder) -> dict[int, str] | None:
    """The node as a dense convolution over its output phases (module docstring); None
    (nothing added) unless the filter and ``input_sizes`` are constants and the types static
    and float32.

    The phases ``Z: [N, *A, prod(strides)*C]`` are interleaved into ``[N, *(s*A), C]`` by
    ``DepthToSpace`` when there are two spatial axes of equal strides, by a ``Reshape`` (a
    view) when only the last axis has a stride (Keras' ``Conv1DTranspose``), else by
    ``Reshape -> Transpose -> Reshape``; a ``Slice`` cuts off what lies past the output.

    Raises:
        ShapeError: see :func:`geometry`.
    """
    _check_count(node, len(node.inputs))
    filter_type, gradient_type = builder.type_of(node.inputs[1]), builder.type_of(node.inputs[2])
    filters, sizes = builder.constant_value(node.inputs[1]), builder.constant_value(node.inputs[0])
    if filter_type is None or gradient_type is None or filters is None or sizes is None:
        return None
    if not gradient_type.is_static or gradient_type.dtype != "float32" or filter_type.dtype != "float32":
        return None
    g = geometry(node, sizes, filter_type, gradient_type)
    axes = tuple(phase_taps(axis) for axis in g.spatial)
    strides = tuple(axis.stride for axis in g.spatial)
    rows = tuple(axis.rows for axis in axes)
    count = len(axes)
    adder = NodeAdder(builder, node)
    # (suffix, op, inputs after the previous step's value, output shape, attributes)
    steps: list[tuple[str, str, tuple[str, ...], tuple[int, ...], dict]] = []
    if any(axis.pad_before or axis.pad_after for axis in axes):
        paddings = np.asarray([[0, 0], *([axis.pad_before, axis.pad_after] for axis in axes), [0, 0]], np.int32)
        padded_shape = (g.batch, *(window.output + axis.pad_before + axis.pad_after for window, axis in zip(g.spatial, axes)), g.filters)
        steps.append(("padded", "Pad", (adder.constant("paddings", paddings),), padded_shape, {"Tpaddings": "int32"}))
    dense_filter = adder.constant("phase_filter", sub_pixel_filter(np.asarray(filters, np.float32), axes))
    phases_shape = (g.batch, *rows, math.prod(strides) * g.channels)
    convolution = {"strides": (1,) * (count + 2), "padding": "VALID", "dilations": (1,) * (count + 2), "data_format": CHANNELS_LAST[count + 2]}
    steps.append(("phases", "Conv2D" if count == 2 else "Conv3D", (dense_filter,), phases_shape, convolution))

    def reshape(suffix: str, shape: tuple[int, ...]) -> None:
        steps.append((suffix, "Reshape", (adder.constant(f"{suffix}_shape", np.asarray(shape, np.int32)),), shape, {"Tshape": "int32"}))

    spread_shape = (g.batch, *(s * a for s, a in zip(strides, rows)), g.channels)
    if count == 2 and strides[0] == strides[1] > 1:
        steps.append(("interleaved", "DepthToSpace", (), spread_shape, {"block_size": strides[0], "data_format": "NHWC"}))
    elif any(s > 1 for s in strides[:-1]):
        reshape("phase_axes", (g.batch, *rows, *strides, g.channels))
        order = [0, *(axis for k in range(count) for axis in (1 + k, 1 + count + k)), 1 + 2 * count]
        interleaved = (g.batch, *(size for k in range(count) for size in (rows[k], strides[k])), g.channels)
        steps.append(("interleaved", "Transpose", (adder.constant("phase_order", np.asarray(order, np.int32)),), interleaved, {"Tperm": "int32"}))
        reshape("spread", spread_shape)
    elif strides[-1] > 1:
        reshape("spread", spread_shape)  # [N, .., B, SW, C] is [N, .., SW*B, C] already
    if spread_shape != g.output_shape:
        begin = adder.constant("crop_begin", np.zeros(count + 2, np.int32))
        size = adder.constant("crop_size", np.asarray(g.output_shape, np.int32))
        steps.append(("cropped", "Slice", (begin, size), g.output_shape, {"Index": "int32"}))
    value = node.inputs[2]
    for position, (suffix, op, inputs, shape, attrs) in enumerate(steps):
        name = None if position == len(steps) - 1 else suffix  # the last step takes the node's name
        value = adder.op(name, op, (value, *inputs), TensorType(shape, "float32"), T="float32", **attrs)
    return {0: value}


_PHASES = Expansion(sub_pixel_convolution, "a convolution over its stride-many output phases, then interleaved (DepthToSpace), when the filter is constant")
CONV2D_BACKPROP_INPUT = OpDefinition(
    "Conv2DBackpropInput", REDUCTION, infer, reference, lower, data_inputs=(1, 2),
    source="tensorflow/core/ops/nn_ops.cc: Conv2DBackpropInput", arity=Arity(3, 3), expand=_PHASES,
)
#: ``Conv3DBackpropInputV2`` (Keras' ``Conv3DTranspose``): the same over ``NDHWC``, compiled
#: only as its expansion (a Conv3D over the output phases).
CONV3D_BACKPROP_INPUT = OpDefinition(
    "Conv3DBackpropInputV2", REDUCTION, infer, reference, lower, data_inputs=(1, 2),
    source="tensorflow/core/ops/nn_ops.cc: Conv3DBackpropInputV2", arity=Arity(3, 3), expand=_PHASES,
)
