"""Conv2D: 2-D convolution, NHWC input and HWIO filter, plain or grouped.

Source: TensorFlow op definition ``Conv2D`` (tensorflow/core/ops/nn_ops.cc, whose shape
function accepts a filter with ``C / G`` input channels) and its CPU kernels
(tensorflow/core/kernels/conv_ops_impl.h: grouped convolution), with the window geometry
of tensorflow/core/framework/kernel_shape_util.cc (``GetWindowedOutputSizeVerbose``):

* input ``[N, H, W, C]``, filter ``[KH, KW, C/G, O]`` -> output ``[N, OH, OW, O]``, where
  ``G = C / filter_in_channels`` groups (``G = 1``: a plain convolution) and ``O`` is a
  multiple of ``G``;
* attrs ``strides`` and ``dilations`` are 4-tuples in NHWC order (batch and channel
  entries must be 1), ``padding`` is ``"SAME"`` or ``"VALID"`` (``"EXPLICIT"`` is not
  supported), ``data_format`` must be ``"NHWC"``;
* VALID: ``out = ceil((in - (k-1)*d) / s)``, no padding;
  SAME: ``out = ceil(in / s)``, ``pad_total = max((out-1)*s + (k-1)*d + 1 - in, 0)``,
  ``pad_before = pad_total // 2`` (the extra cell goes after);
* with ``Cg = C/G`` input and ``Og = O/G`` output channels per group, output channel ``o``
  belongs to group ``g = floor(o / Og)``:
  ``out[n, oh, ow, o] = sum_{kh, kw, c < Cg} in[n, oh*sh + kh*dh - pad_top, ow*sw + kw*dw - pad_left, Cg*g + c] * filter[kh, kw, c, o]``
  with padded cells reading zero.

The lowering never reads out of bounds: the padding becomes affine constraints of the
update statement's domain. A plain convolution is lowered here; a grouped one is first
rewritten by :func:`expand_groups` (the expansion pass) into a ``Reshape`` view of its input
as ``[N, H, W, G, Cg]`` and a ``GroupedConv2D`` (:mod:`polytf.ops.grouped_conv`), because the
input channel ``Cg*floor(o/Og) + c`` of one index is not quasi-affine in polytf's index
expressions (one floor division of an affine expression), while the view puts the group on
an index of its own: ``in5[n, ..., floor(o/Og), c]``. :func:`convolution_statements` builds
the statements of every convolution (Conv2D, GroupedConv2D, DepthwiseConv2dNative).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops.attributes import REQUIRED, attr_ints, attr_string, is_channels_last
from polytf.ops.definition import CONTRACTION, ELEMENTWISE, Arity, OpDefinition
from polytf.ops.expansion import Expansion, GraphBuilder, NodeAdder
from polytf.ops.lowering_context import ArrayRef, LoweringContext
from polytf.ops.traits import WeightLayout
from polytf.poly.affine import AffineExpr, IndexExpr
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


def channels_last_tuple(node, key: str, rank: int, default=REQUIRED) -> tuple[int, ...]:
    """A ``rank``-tuple attr in channels-last order (``NHWC``, ``NDHWC``) whose batch and
    channel entries must be 1 (required unless ``default`` is given).

    Raises:
        ShapeError: missing, not ``rank`` integers, or batch/channel entries other than 1.
    """
    value = attr_ints(node, key, default, length=rank)
    if value[0] != 1 or value[-1] != 1:
        raise ShapeError(f"{node.op} attr '{key}' = {value}: batch and channel entries must be 1")
    return value


def nhwc_4tuple(node, key: str, default=REQUIRED) -> tuple[int, int, int, int]:
    """A 4-tuple attr in NHWC order (:func:`channels_last_tuple`)."""
    return channels_last_tuple(node, key, 4, default)


#: the channels-last data format of a tensor of each rank (TensorFlow's CPU layouts)
CHANNELS_LAST = {3: "NWC", 4: "NHWC", 5: "NDHWC"}


def check_nhwc(node, rank: int = 4) -> None:
    """Refuse a ``data_format`` other than the channels-last one of ``rank`` (``NHWC`` for a
    2-D op, ``NDHWC`` for a 3-D one).

    Raises:
        ShapeError: another data format.
    """
    expected = CHANNELS_LAST[rank]
    data_format = attr_string(node, "data_format", expected)
    if data_format != expected:
        raise ShapeError(f"{node.op} with data_format {data_format!r} is unsupported: polytf supports {expected} only")


#: the op a grouped Conv2D becomes (:mod:`polytf.ops.grouped_conv`)
GROUPED_OP = "GroupedConv2D"


@dataclass(frozen=True)
class ConvGeometry:
    """Sizes of one convolution: ``channels`` (C) input channels and ``filters`` (O) output
    channels in ``groups`` (G) groups of ``C/G`` and ``O/G`` (``G = 1``: a plain convolution;
    a depthwise one is ``G = C``, ``C/G = 1``, ``O/G`` its channel multiplier); a 3-D
    convolution has a ``depth`` window too."""

    batch: int
    channels: int
    filters: int
    height: Window
    width: Window
    groups: int = 1
    depth: Window | None = None

    @property
    def spatial(self) -> tuple[Window, ...]:
        """The windows of the spatial axes, outermost first (``(height, width)``, or
        ``(depth, height, width)``)."""
        return (self.height, self.width) if self.depth is None else (self.depth, self.height, self.width)

    @property
    def group_channels(self) -> int:
        """``Cg = C / G``: input channels each output channel sums over (per window tap)."""
        return self.channels // self.groups

    @property
    def group_filters(self) -> int:
        """``Og = O / G``: output channels of one group."""
        return self.filters // self.groups

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.batch, *(window.output for window in self.spatial), self.filters)


#: the names of the spatial axes of a 1-, 2- or 3-D window, outermost first (for messages)
SPATIAL_AXES = ("depth", "height", "width")


def spatial_windows(node, kernel_sizes: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[Window, ...]:
    """The windows of a convolution- or pooling-like ``node`` over its spatial axes (attrs
    ``strides``, ``dilations``: ``len(sizes) + 2``-tuples in channels-last order; ``padding``:
    SAME or VALID).

    Raises:
        ShapeError: bad or missing attrs, EXPLICIT padding, or a window that does not fit.
    """
    rank = len(sizes) + 2
    strides = channels_last_tuple(node, "strides", rank)
    dilations = channels_last_tuple(node, "dilations", rank, (1,) * rank)
    padding = attr_string(node, "padding", allowed=(*PADDINGS, "EXPLICIT"))  # EXPLICIT: refused by window()
    names = SPATIAL_AXES[-len(sizes):]
    return tuple(
        window(size, kernel, strides[k + 1], dilations[k + 1], padding, f"{node.op} {names[k]}") for k, (kernel, size) in enumerate(zip(kernel_sizes, sizes))
    )


def windows(node, kernel_height: int, kernel_width: int, height: int, width: int) -> tuple[Window, Window]:
    """The height and width windows of a Conv2D-like ``node`` (:func:`spatial_windows`).

    Raises:
        ShapeError: bad or missing attrs, EXPLICIT padding, or a window that does not fit.
    """
    return spatial_windows(node, (kernel_height, kernel_width), (height, width))


def geometry(node, input_type: TensorType, filter_type: TensorType) -> ConvGeometry:
    """Sizes, groups and windows of a Conv2D (rank-4 input and filter) or Conv3D (rank 5)
    ``node``.

    Raises:
        ShapeError: not channels-last, ranks other than 4 (Conv2D) or 5 (Conv3D), dynamic
            shapes, filter in-channels that do not divide the input's channels, output
            channels that the groups do not divide, a grouped 3-D convolution, or bad
            strides/dilations/padding.
    """
    rank = 5 if node.op == "Conv3D" else 4
    check_nhwc(node, rank)
    if input_type.rank != rank:
        raise ShapeError(f"{node.op} needs a rank-{rank} {CHANNELS_LAST[rank]} input, got {input_type}")
    if filter_type.rank != rank:
        raise ShapeError(f"{node.op} needs a rank-{rank} {'DHWIO' if rank == 5 else 'HWIO'} filter, got {filter_type}")
    if not input_type.is_static or not filter_type.is_static:
        raise ShapeError(f"{node.op} needs static shapes, got input {input_type} and filter {filter_type}")
    n, *sizes, c = input_type.shape
    *kernel_sizes, fc, o = filter_type.shape
    if fc < 1 or c % fc:
        raise ShapeError(
            f"{node.op} node '{node.name}': input {input_type} has {c} channels, which the filter {filter_type}'s {fc} input channels do not divide "
            "(a grouped convolution needs filter in-channels = input channels / groups)"
        )
    groups = c // fc
    if o % groups:
        raise ShapeError(f"{node.op} node '{node.name}': {groups} groups ({c} input channels / {fc}) do not divide the filter {filter_type}'s {o} output channels")
    if groups > 1 and rank == 5:
        raise ShapeError(f"{node.op} node '{node.name}': a grouped 3-D convolution ({groups} groups) is not supported; run it on the host")
    spatial = spatial_windows(node, tuple(kernel_sizes), tuple(sizes))
    return ConvGeometry(n, c, o, spatial[-2], spatial[-1], groups, spatial[0] if rank == 5 else None)


#: ``NCHW -> NHWC`` and back: the axis permutations of a channels-first Conv2D's input and output
TO_CHANNELS_LAST, TO_CHANNELS_FIRST = (0, 2, 3, 1), (0, 3, 1, 2)


def is_channels_first(node) -> bool:
    """Whether ``node`` is a Conv2D over ``NCHW`` tensors (Keras' ``data_format="channels_first"``):
    shape inference and the reference compute it, the expansion rewrites it as an ``NHWC``
    convolution between transposes (:func:`expand_convolution`)."""
    return node.op == "Conv2D" and attr_string(node, "data_format", "NHWC") == "NCHW"


def channels_last_node(node):
    """The ``NHWC`` twin of a channels-first Conv2D ``node``: its ``strides`` and ``dilations``
    permuted, ``data_format`` NHWC (same name and inputs)."""
    attrs = dict(node.attrs, data_format="NHWC")
    for key in ("strides", "dilations"):
        if key in attrs:
            value = attr_ints(node, key, length=4)
            attrs[key] = tuple(value[axis] for axis in TO_CHANNELS_LAST)
    return Node(node.name, node.op, node.inputs, node.control_inputs, attrs)


def infer(node, input_types, input_constants):
    if len(input_types) != 2:
        raise ShapeError(f"{node.op} takes 2 inputs (input, filter), got {len(input_types)}")
    x, f = input_types
    if is_channels_first(node) and x.rank == 4 and x.is_static:
        shape = geometry(channels_last_node(node), TensorType(tuple(x.shape[axis] for axis in TO_CHANNELS_LAST)), f).output_shape
        return (TensorType(tuple(shape[axis] for axis in TO_CHANNELS_FIRST), x.dtype),)
    return (TensorType(geometry(node, x, f).output_shape, x.dtype),)


def grouped_reference(x: np.ndarray, f: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """The convolution of ``x: [N, *spatial, C]`` with ``f: [*window, C/G, O]`` in
    ``g.groups`` groups (module docstring), accumulated in float64 one window tap at a time;
    float32 ``[N, *spatial outputs, O]``."""
    spatial = g.spatial
    pads = ((0, 0), *((axis.pad_before, axis.pad_after) for axis in spatial), (0, 0))
    padded = np.pad(np.asarray(x, np.float64), pads)
    padded = padded.reshape(padded.shape[:-1] + (g.groups, g.group_channels))
    filters = np.asarray(f, np.float64).reshape(*(axis.kernel for axis in spatial), g.group_channels, g.groups, g.group_filters)
    out = np.zeros((g.batch, *(axis.output for axis in spatial), g.groups, g.group_filters), dtype=np.float64)
    for tap in itertools.product(*(range(axis.kernel) for axis in spatial)):
        cells = tuple(slice(k * axis.dilation, k * axis.dilation + (axis.output - 1) * axis.stride + 1, axis.stride) for k, axis in zip(tap, spatial))
        taps = padded[(slice(None), *cells)]
        if g.groups == 1:
            out[..., 0, :] += np.tensordot(taps[..., 0, :], filters[tap][:, 0], axes=([-1], [0]))
        elif g.group_channels == 1:  # depthwise: one input channel per group
            out += taps * filters[tap][0]
        else:
            out += np.einsum("nhwgc,cgo->nhwgo", taps, filters[tap])
    return out.reshape(g.output_shape).astype(np.float32)


def reference(node, inputs):
    x, f = (np.asarray(v, dtype=np.float32) for v in inputs)
    if is_channels_first(node):
        x = np.transpose(x, TO_CHANNELS_LAST)
        result = grouped_reference(x, f, geometry(channels_last_node(node), TensorType(x.shape), TensorType(f.shape)))
        return (np.ascontiguousarray(np.transpose(result, TO_CHANNELS_FIRST)),)
    return (grouped_reference(x, f, geometry(node, TensorType(x.shape), TensorType(f.shape))),)


def convolution_statements(
    node,
    output: ArrayRef,
    input_access: tuple[str, tuple[IndexExpr, ...]],
    filter_access: tuple[str, tuple[IndexExpr, ...]],
    spatial: tuple[Window, ...],
    channel_reduction: int,
    context: LoweringContext,
) -> list[Statement]:
    """The statements of a convolution writing ``output: [N, *spatial outputs, O]`` over
    ``S = len(spatial)`` spatial axes (2: ``[N, OH, OW, O]``, iterators ``d0..d3``;
    3: ``[N, OD, OH, OW, O]``, ``d0..d4``): ``S_init[d]: O[d] = 0`` and
    ``S_update[d, r0..r{S-1}(, rS)]: O[d] += I[d0, s*d1 + dl*r0 - p, .., *channel] * F[*filter]``
    (one window iterator ``r_k`` per spatial axis ``d{k+1}``), the padding as domain
    constraints.

    Args:
        node: the node lowered.
        output: the array written.
        input_access: ``(array, channel indices)``: the input's indices after the batch and the
            spatial ones (``(rS,)`` for a convolution; ``(floor(d3/Og), r2)`` for the grouped
            view).
        filter_access: ``(array, indices)`` of the filter read.
        spatial: the windows over ``d1, r0``, ``d2, r1``, ...
        channel_reduction: extent of the channel reduction iterator ``rS`` (0: none, a
            depthwise convolution sums over its window only).
        context: the lowering context (statement names).
    """
    count = len(spatial)
    outputs = tuple(f"d{k}" for k in range(count + 2))
    window_iterators = tuple(f"r{k}" for k in range(count))
    out = Access.of(output.name, *outputs)
    init = Statement(context.statement_name(), outputs, output.shape, out, Constant(0.0), node=node.name, op=node.op)
    input_name, channel = input_access
    spatial_indices = (axis.input_index(outputs[k + 1], window_iterators[k]) for k, axis in enumerate(spatial))
    x_access = Access(input_name, (AffineExpr.of("d0"), *spatial_indices, *channel))
    f_access = Access(filter_access[0], tuple(filter_access[1]))
    reductions = (*window_iterators, f"r{count}") if channel_reduction else window_iterators
    extents = tuple(axis.kernel for axis in spatial) + ((channel_reduction,) if channel_reduction else ())
    constraints = tuple(constraint for k, axis in enumerate(spatial) for constraint in axis.constraints(outputs[k + 1], window_iterators[k]))
    update = Statement(
        context.statement_name(),
        (*outputs, *reductions),
        output.shape + extents,
        out,
        Binary("add", Load(out), Binary("mul", Load(x_access), Load(f_access))),
        constraints=constraints,
        node=node.name,
        op=node.op,
    )
    return [init, update]


def lower(node, inputs, outputs, context):
    """``S_init[d0..d3]: O[d] = 0``;
    ``S_update[d0, d1, d2, d3, r0, r1, r2]: O[d] += I[d0, sh*d1 + dh*r0 - pt, sw*d2 + dw*r1 - pl, r2] * F[r0, r1, r2, d3]``
    with padding as domain constraints (:func:`convolution_statements`); a Conv3D the same
    over ``d0..d4`` and ``r0..r3``.

    Raises:
        ShapeError: a grouped convolution (the expansion pass rewrites it first).
    """
    x, f = inputs
    (y,) = outputs
    g = geometry(node, x.type, f.type)
    if g.groups > 1:
        raise ShapeError(
            f"Conv2D node '{node.name}' has {g.groups} groups and is lowered as a {GROUPED_OP} of a [N, H, W, G, C/G] view of its input: "
            "run polytf.passes.expansion.expand_ops (part of the graph optimizer) before lowering"
        )
    count = len(g.spatial)
    channel = AffineExpr.of(f"r{count}")
    filter_index = (*(AffineExpr.of(f"r{k}") for k in range(count)), channel, AffineExpr.of(f"d{count + 1}"))
    return convolution_statements(node, y, (x.name, (channel,)), (f.name, filter_index), g.spatial, g.channels, context)


def _static_types(node, builder: GraphBuilder) -> tuple[TensorType, TensorType] | None:
    """The static types of a Conv2D node's input and filter, or None (unknown, dynamic, or
    not two inputs): the precondition of both rewrite rules below."""
    if len(node.inputs) != 2:
        return None
    input_type, filter_type = (builder.type_of(tensor) for tensor in node.inputs)
    if input_type is None or filter_type is None or not input_type.is_static or not filter_type.is_static:
        return None
    return input_type, filter_type


def expand_convolution(node, builder: GraphBuilder) -> dict[int, str] | None:
    """A channels-first Conv2D as ``Transpose(Conv2D_NHWC(Transpose(input)))`` (the NHWC
    convolution is then expanded again when grouped); a grouped one as :func:`expand_groups`;
    None otherwise.

    Raises:
        ShapeError: see :func:`geometry`.
    """
    if not is_channels_first(node):
        return expand_groups(node, builder)
    types = _static_types(node, builder)
    if types is None:
        return None
    input_type, filter_type = types
    adder = NodeAdder(builder, node)
    dtype = input_type.dtype
    twin = channels_last_node(node)
    last_shape = tuple(input_type.shape[axis] for axis in TO_CHANNELS_LAST)
    to_last = adder.constant("to_channels_last", np.asarray(TO_CHANNELS_LAST, np.int32))
    value = adder.op("channels_last", "Transpose", (node.inputs[0], to_last), TensorType(last_shape, dtype), T=dtype, Tperm="int32")
    output_shape = geometry(twin, TensorType(last_shape, dtype), filter_type).output_shape
    value = adder.op("convolution", "Conv2D", (value, node.inputs[1]), TensorType(output_shape, dtype), **dict(twin.attrs, T=dtype))
    to_first = adder.constant("to_channels_first", np.asarray(TO_CHANNELS_FIRST, np.int32))
    first_shape = tuple(output_shape[axis] for axis in TO_CHANNELS_FIRST)
    return {0: adder.op(None, "Transpose", (value, to_first), TensorType(first_shape, dtype), T=dtype, Tperm="int32")}


def expand_groups(node, builder: GraphBuilder) -> dict[int, str] | None:
    """A grouped Conv2D as ``GroupedConv2D(Reshape(input, [N, H, W, G, C/G]), filter)`` (the
    reshape is a view: no copy); None for a plain convolution or unknown types (nothing
    added).

    Raises:
        ShapeError: see :func:`geometry`.
    """
    types = _static_types(node, builder)
    if types is None:
        return None
    input_type, filter_type = types
    g = geometry(node, input_type, filter_type)
    if g.groups == 1:
        return None
    adder = NodeAdder(builder, node)
    view_shape = (g.batch, g.height.size, g.width.size, g.groups, g.group_channels)
    shape = adder.constant("group_shape", np.asarray(view_shape, np.int32))
    view = adder.op("group_view", "Reshape", (node.inputs[0], shape), TensorType(view_shape, input_type.dtype), T=input_type.dtype, Tshape="int32")
    attrs = {key: node.attrs[key] for key in ("strides", "padding", "dilations", "data_format") if key in node.attrs}
    return {0: adder.op(None, GROUPED_OP, (view, node.inputs[1]), TensorType(g.output_shape, input_type.dtype), T=input_type.dtype, **attrs)}


def pointwise_as_matrix_product(node, builder: GraphBuilder) -> dict[int, str] | None:
    """A 1x1, stride-1, unpadded, ungrouped float32 Conv2D as a matrix product of row-major
    views (no copies)::

        y = Reshape(MatMul(Reshape(x, [N*H*W, C]), Reshape(f, [C, O])), [N, H, W, O])

    the same sums over the ``C`` input channels for each pixel, in the same order. As a
    matrix product the ``N*H*W`` pixels are the rows: register tiles and cache blocks span
    every pixel instead of one image row (a 7x7 layer: eight 6-row tiles and one row, not
    tiles of 4 and 3 rows per image row, whose 6 to 8 accumulators leave the FMA units
    waiting), and the reduction is blocked like a GEMM's (BLIS ``kc``). Element-wise
    consumers (bias, activation, residual add) then move above the output view
    (:mod:`polytf.passes.reshape_sinking`) and fuse into the product's kernel. oneDNN and
    XLA's CPU backend run 1x1 convolutions as GEMMs the same way.

    Returns None (nothing added) for other convolutions, unknown or dynamic types, other
    dtypes, and a convolution whose value reaches a slab-copying op (``Pad``, ``ConcatV2``:
    :func:`_feeds_a_slab_copy`).

    Raises:
        ShapeError: see :func:`geometry`.
    """
    types = _static_types(node, builder)
    if types is None:
        return None
    input_type, filter_type = types
    if input_type.dtype != "float32" or filter_type.dtype != "float32" or input_type.rank != filter_type.rank or input_type.rank not in (4, 5):
        return None
    g = geometry(node, input_type, filter_type)
    windows_are_points = all(window.kernel == 1 and window.stride == 1 and window.pad_before == 0 and window.pad_after == 0 for window in g.spatial)
    if g.groups != 1 or not windows_are_points or _feeds_a_slab_copy(builder, node.output(0)):
        return None
    adder = NodeAdder(builder, node)
    rows = g.batch * math.prod(window.size for window in g.spatial)
    dtype = input_type.dtype

    def view(suffix: str, tensor: str, shape: tuple[int, ...]) -> str:
        target = adder.constant(f"{suffix}_shape", np.asarray(shape, np.int32))
        return adder.op(suffix, "Reshape", (tensor, target), TensorType(shape, dtype), T=dtype, Tshape="int32")

    pixels = view("pixels", node.inputs[0], (rows, g.channels))
    matrix = view("matrix", node.inputs[1], (g.channels, g.filters))
    product = adder.op("product", "MatMul", (pixels, matrix), TensorType((rows, g.filters), dtype), T=dtype, transpose_a=False, transpose_b=False)
    shape = adder.constant("output_shape", np.asarray(g.output_shape, np.int32))
    return {0: adder.op(None, "Reshape", (product, shape), TensorType(g.output_shape, dtype), T=dtype, Tshape="int32")}


def _feeds_a_slab_copy(builder: GraphBuilder, tensor: str, steps: int = 4) -> bool:
    """Whether ``tensor`` reaches an op with the ``slab_copy`` trait (``Pad``, ``ConcatV2``)
    through at most ``steps`` element-wise nodes. The runtime lets the kernel that computes
    such an operand write it straight into its slab of the op's output (MobileNetV2's
    expansion layer into the zero-padded input of its strided depthwise layer, Inception's
    branches into their concatenation); the slab's pixels are not consecutive rows of a
    ``[N*H*W, O]`` matrix, so a matrix product there would cost a copy kernel (measured on
    MobileNetV2: 0.18 ms for one padded 112x112x96 layer, more than the product gains)."""
    for reader in builder.readers(tensor):
        definition = builder.definition(reader.op)
        if definition is None:
            continue
        if definition.slab_copy:
            return True
        if definition.category == ELEMENTWISE and steps > 0 and _feeds_a_slab_copy(builder, reader.output(0), steps - 1):
            return True
    return False


#: filter ``[KH, KW, C/G, O]``: output channel ``o`` is axis 3; every output sums over ``KH, KW, C/G``.
FILTER_LAYOUT = WeightLayout(
    input=1, rank=4, output_rank=4, window_axes=(0, 1), channel_axes=lambda node: (3,) if is_channels_last(node) else None, dilatable=True,
    independent_rows=is_channels_last,
)
_POINTWISE = Expansion(pointwise_as_matrix_product, "a MatMul of [N*H*W, C] and [C, O] views when 1x1, stride 1, unpadded and ungrouped")
CONV2D = OpDefinition(
    "Conv2D", CONTRACTION, infer, reference, lower, source="tensorflow/core/ops/nn_ops.cc: Conv2D", arity=Arity(2, 2), weight_layout=FILTER_LAYOUT,
    expand=Expansion(expand_convolution, f"a {GROUPED_OP} of a [N, H, W, G, C/G] view of its input when grouped; an NHWC Conv2D between transposes when NCHW"),
    matrix_product=_POINTWISE,
)
#: Conv3D: the same op over ``[N, D, H, W, C]`` and a ``[KD, KH, KW, C, O]`` filter (the
#: ``NDHWC`` layout of tensorflow/core/ops/nn_ops.cc: Conv3D), lowered by the same statement
#: builder with a third window.
CONV3D = OpDefinition(
    "Conv3D", CONTRACTION, infer, reference, lower, source="tensorflow/core/ops/nn_ops.cc: Conv3D", arity=Arity(2, 2),
    weight_layout=WeightLayout(
        input=1, rank=5, output_rank=5, window_axes=(0, 1, 2), channel_axes=lambda node: (4,) if is_channels_last(node) else None, independent_rows=is_channels_last
    ),
    matrix_product=_POINTWISE,
)
