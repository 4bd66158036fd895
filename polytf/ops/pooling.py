"""MaxPool and AvgPool: 2-D pooling over NHWC tensors; MaxPool3D and AvgPool3D the same
over NDHWC tensors with a depth window too (one definition: the window iterators and
constraints come from the spatial windows, whatever their number).

Source: TensorFlow op definitions ``MaxPool`` and ``AvgPool`` (tensorflow/core/ops/nn_ops.cc),
window geometry as in tensorflow/core/framework/kernel_shape_util.cc:

* input ``[N, H, W, C]`` -> output ``[N, OH, OW, C]``;
* attrs ``ksize`` and ``strides`` are 4-tuples in NHWC order whose batch and channel
  entries must be 1; ``padding`` is ``"SAME"`` or ``"VALID"`` (output size and padding
  as for Conv2D); ``data_format`` must be ``"NHWC"``;
* ``out[n, oh, ow, c] = max_{kh, kw} in[n, oh*sh + kh - pad_top, ow*sw + kw - pad_left, c]``
  where padded cells are ignored (TensorFlow's SAME max pooling never returns a pad value).
  NaN cells are ignored too, and the maximum starts from the lowest float, ``-FLT_MAX``:
  a window of NaN and ``-inf`` only gives ``-FLT_MAX``, as TensorFlow's CPU kernel (oneDNN's
  pooling, which starts from ``numeric_limits<float>::lowest()`` and takes a cell only
  when it is larger; checked against TensorFlow 2.21 in ``tests/e2e/test_float_semantics.py``).

* AvgPool: ``out[n, oh, ow, c] = sum_{kh, kw} in[...] / count`` where the sum and
  ``count`` run over the window cells inside the input only (TensorFlow's SAME average
  pooling divides by the number of valid cells, tensorflow/core/kernels/avgpooling_op.cc).

MaxPool lowering: ``out = -FLT_MAX``, then ``out = in[...] > out ? in[...] : out`` over the
window (a NaN cell is never larger: one ``maxss``/``maxps`` on x86, where ``llvm.maxnum``
without fast-math flags takes three instructions), the padding expressed as domain
constraints.

AvgPool lowering, with a kernel-local sum ``T`` (full output shape) and, when some
window reaches into the padding, a count ``K`` of shape ``[N, OH, OW]``:

1. ``K[d0, d1, d2] = 0``; ``K[d0, d1, d2] += 1`` over the guarded window (iterators
   ``d0, d1, d2, r0, r1``; omitted for VALID, where the count is ``KH*KW``);
2. ``T[d] = 0``; ``T[d] += I[window]`` over the guarded window;
3. ``O[d] = T[d] / K[d0, d1, d2]`` (or ``T[d] / (KH*KW)``).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_string
from polytf.ops.conv import CHANNELS_LAST, PADDINGS, SPATIAL_AXES, Window, channels_last_tuple, check_nhwc, window
from polytf.ops.definition import REDUCTION, Arity, OpDefinition
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Binary, Compare, Constant, Load, Select
from polytf.poly.statement import Statement

#: the ops over 3 spatial axes (``NDHWC``); the others have 2 (``NHWC``)
THREE_D = ("MaxPool3D", "AvgPool3D")


def geometry(node, input_type: TensorType) -> tuple[Window, ...]:
    """The windows of a pooling node over its spatial axes, outermost first (``(height,
    width)``; ``(depth, height, width)`` for the 3-D ops).

    Raises:
        ShapeError: not channels-last, a rank other than 4 (5 for the 3-D ops), a dynamic
            shape, or bad ``ksize``/``strides``/``padding``.
    """
    rank = 5 if node.op in THREE_D else 4
    check_nhwc(node, rank)
    if input_type.rank != rank:
        raise ShapeError(f"{node.op} needs a rank-{rank} {CHANNELS_LAST[rank]} input, got {input_type}")
    if not input_type.is_static:
        raise ShapeError(f"{node.op} needs a static input shape, got {input_type}")
    ksize = channels_last_tuple(node, "ksize", rank)
    strides = channels_last_tuple(node, "strides", rank)
    padding = attr_string(node, "padding", allowed=(*PADDINGS, "EXPLICIT"))  # EXPLICIT: refused by window()
    names = SPATIAL_AXES[-(rank - 2):]
    sizes = input_type.shape[1:-1]
    return tuple(window(size, ksize[k + 1], strides[k + 1], 1, padding, f"{node.op} {names[k]}") for k, size in enumerate(sizes))


def infer(node, input_types, input_constants):
    if len(input_types) != 1:
        raise ShapeError(f"{node.op} takes 1 input, got {len(input_types)}")
    (x,) = input_types
    spatial = geometry(node, x)
    return (TensorType((x.shape[0], *(axis.output for axis in spatial), x.shape[-1]), x.dtype),)


#: Where a window maximum starts: the lowest float32 (``numeric_limits<float>::lowest()``).
LOWEST = float(np.finfo(np.float32).min)


def _window_cells(padded: np.ndarray, spatial: tuple[Window, ...]):
    """Each tap of the window: the ``[N, *outputs, C]`` cells of ``padded`` it reads."""
    for tap in itertools.product(*(range(axis.kernel) for axis in spatial)):
        cells = tuple(slice(k, k + (axis.output - 1) * axis.stride + 1, axis.stride) for k, axis in zip(tap, spatial))
        yield padded[(slice(None), *cells)]


def _pads(spatial: tuple[Window, ...]) -> tuple[tuple[int, int], ...]:
    return ((0, 0), *((axis.pad_before, axis.pad_after) for axis in spatial), (0, 0))


def reference(node, inputs):
    """Window maxima from ``-FLT_MAX``, a cell taken when it is larger (NaN and padded cells never are)."""
    x = np.asarray(inputs[0], dtype=np.float32)
    spatial = geometry(node, TensorType(x.shape))
    padded = np.pad(x, _pads(spatial), constant_values=np.nan)
    out = np.full((x.shape[0], *(axis.output for axis in spatial), x.shape[-1]), LOWEST, dtype=np.float32)
    for cells in _window_cells(padded, spatial):
        with np.errstate(invalid="ignore"):
            out = np.where(cells > out, cells, out)
    return (out,)


def _iterators(spatial: tuple[Window, ...]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The output iterators ``d0..d{S+1}``, the window iterators ``r0..r{S-1}`` and the
    padding constraints of ``S`` spatial windows."""
    outputs = tuple(f"d{k}" for k in range(len(spatial) + 2))
    taps = tuple(f"r{k}" for k in range(len(spatial)))
    constraints = tuple(constraint for k, axis in enumerate(spatial) for constraint in axis.constraints(outputs[k + 1], taps[k]))
    return outputs, taps, constraints


def _window_read(x, spatial: tuple[Window, ...], outputs: tuple[str, ...], taps: tuple[str, ...]) -> Access:
    """``I[d0, s*d1 + r0 - p, .., d{S+1}]``."""
    return Access(x.name, (AffineExpr.of("d0"), *(axis.input_index(outputs[k + 1], taps[k]) for k, axis in enumerate(spatial)), AffineExpr.of(outputs[-1])))


def lower(node, inputs, outputs, context):
    """``S_init[d]: O[d] = -FLT_MAX``;
    ``S_update[d, r0..r{S-1}]: O[d] = select(I[..] > O[d], I[..], O[d])`` with
    ``I[..] = I[d0, sh*d1 + r0 - pt, sw*d2 + r1 - pl, d3]`` (and a depth window for MaxPool3D)."""
    (x,) = inputs
    (y,) = outputs
    spatial = geometry(node, x.type)
    iterators, taps, constraints = _iterators(spatial)
    out = Access.of(y.name, *iterators)
    init = Statement(context.statement_name(), iterators, y.shape, out, Constant(LOWEST), node=node.name, op=node.op)
    x_access = _window_read(x, spatial, iterators, taps)
    update = Statement(
        context.statement_name(),
        (*iterators, *taps),
        y.shape + tuple(axis.kernel for axis in spatial),
        out,
        Select(Compare("greater", Load(x_access), Load(out)), Load(x_access), Load(out)),
        constraints=constraints,
        node=node.name,
        op=node.op,
    )
    return [init, update]


MAX_POOL = OpDefinition(
    "MaxPool", REDUCTION, infer, reference, lower, source="tensorflow/core/ops/nn_ops.cc: MaxPool", arity=Arity(1, 1),
)
MAX_POOL_3D = OpDefinition(
    "MaxPool3D", REDUCTION, infer, reference, lower, source="tensorflow/core/ops/nn_ops.cc: MaxPool3D", arity=Arity(1, 1),
)


# --- AvgPool ---------------------------------------------------------------------------


def reference_average(node, inputs):
    """Window sums over the zero-padded input divided by the number of valid cells."""
    x = np.asarray(inputs[0], dtype=np.float32)
    spatial = geometry(node, TensorType(x.shape))
    pads = _pads(spatial)
    outputs = tuple(axis.output for axis in spatial)
    total = np.zeros((x.shape[0], *outputs, x.shape[-1]), dtype=np.float64)
    count = np.zeros((1, *outputs, 1), dtype=np.float64)
    for cells in _window_cells(np.pad(x.astype(np.float64), pads), spatial):
        total += cells
    for cells in _window_cells(np.pad(np.ones((1, *x.shape[1:-1], 1)), pads), spatial):
        count += cells
    return ((total / count).astype(np.float32),)


def lower_average(node, inputs, outputs, context):
    """Count, sum and divide statements (see the module docstring)."""
    (x,) = inputs
    (y,) = outputs
    spatial = geometry(node, x.type)
    full, taps, constraints = _iterators(spatial)
    kernel = tuple(axis.kernel for axis in spatial)

    def statement(iterators, extents, write, value, guarded=False):
        return Statement(
            context.statement_name(), iterators, tuple(extents), write, value, constraints if guarded else (), node=node.name, op=node.op
        )

    statements = []
    if constraints:
        count = context.temporary(y.shape[:-1])
        k = Access.of(count.name, *full[:-1])
        statements += [
            statement(full[:-1], y.shape[:-1], k, Constant(0.0)),
            statement((*full[:-1], *taps), y.shape[:-1] + kernel, k, Binary("add", Load(k), Constant(1.0)), guarded=True),
        ]
        divisor = Load(k)
    else:
        divisor = Constant(float(math.prod(kernel)))
    total = context.temporary(y.shape)
    t = Access.of(total.name, *full)
    statements += [
        statement(full, y.shape, t, Constant(0.0)),
        statement(full + taps, y.shape + kernel, t, Binary("add", Load(t), Load(_window_read(x, spatial, full, taps))), guarded=True),
        statement(full, y.shape, Access.of(y.name, *full), Binary("div", Load(t), divisor)),
    ]
    return statements


AVG_POOL = OpDefinition(
    "AvgPool", REDUCTION, infer, reference_average, lower_average, source="tensorflow/core/ops/nn_ops.cc: AvgPool",
    arity=Arity(1, 1),
)
AVG_POOL_3D = OpDefinition(
    "AvgPool3D", REDUCTION, infer, reference_average, lower_average, source="tensorflow/core/ops/nn_ops.cc: AvgPool3D",
    arity=Arity(1, 1),
)
