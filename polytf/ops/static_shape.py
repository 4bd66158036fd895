"""Shape computations on static shapes: ``Shape``, ``StridedSlice`` and ``Pack``.

Frozen graphs compute a Reshape's ``shape`` input as ``Shape -> StridedSlice -> Pack``;
with static shapes these are compile-time constants, evaluated during shape inference
(``Shape`` from its input's type, the others by their numpy reference when their
inputs are constants). On run-time float32 tensors ``StridedSlice`` and ``Pack``
lower to affine copies.

Sources: TensorFlow op definitions ``Shape``, ``StridedSlice`` and ``Pack``
(tensorflow/core/ops/array_ops.cc); the StridedSlice mask semantics follow
``ValidateStridedSliceOp`` (tensorflow/core/util/strided_slice_op.cc).

* ``Shape(input)``: attr ``out_type`` int32 (default) or int64 -> [rank].
* ``StridedSlice(input, begin, end, strides)``: ``begin``, ``end``, ``strides`` are
  compile-time constant 1-D int tensors of one length; attrs ``begin_mask``,
  ``end_mask`` (ignore begin/end of that entry), ``ellipsis_mask`` (at most one bit:
  that entry stands for all the dimensions not named), ``new_axis_mask`` (insert a
  size-1 dimension), ``shrink_axis_mask`` (take the single element ``begin`` and
  drop the dimension). Negative ``begin``/``end`` count from the end and are clamped
  as in Python slicing; strides may be negative, not zero (and not negative on a
  shrunk index, as in TensorFlow).
* ``Pack(values...)``: attrs ``N`` and ``axis`` (in ``[-(R+1), R]`` for inputs of rank
  ``R``): stacks ``N`` tensors of one shape along a new dimension ``axis``.

Lowering (float32 data): ``StridedSlice`` is one statement
``Y[d...] = X[begin_0 + stride_0 * d_{p0}, ..., begin_s (shrunk), ...]`` (a new axis
has its own size-1 iterator and no input index); ``Pack`` is one statement per input
``k``, ``Y[d...] = X_k[d without d_axis]`` restricted to ``d_axis = k``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_int
from polytf.ops.constant_inputs import constant_input
from polytf.ops.definition import REDUCTION, SOURCE, Arity, OpDefinition
from polytf.ops.traits import Stacking
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Load
from polytf.poly.statement import Statement

INDEX_DTYPES = ("int32", "int64")

# --- Shape ---------------------------------------------------------------------------


def _shape_dtype(node) -> str:
    dtype = node.attr("out_type", "int32")
    if dtype not in INDEX_DTYPES:
        raise ShapeError(f"Shape node '{node.name}' has out_type {dtype}; TensorFlow allows int32 or int64")
    return dtype


def infer_shape(node, input_types, input_constants):
    if len(input_types) != 1:
        raise ShapeError(f"Shape takes 1 input, got {len(input_types)}")
    return (TensorType((input_types[0].rank,), _shape_dtype(node)),)


def static_shape(node, input_types):
    (x,) = input_types
    if not x.is_static:
        raise ShapeError(f"Shape node '{node.name}' reads a tensor of unknown shape {x}; fix the placeholder shapes")
    return (np.array(x.shape, dtype=_shape_dtype(node)),)


def reference_shape(node, inputs):
    return (np.array(np.shape(inputs[0]), dtype=_shape_dtype(node)),)


# --- StridedSlice --------------------------------------------------------------------


@dataclass(frozen=True)
class SliceDimension:
    """What one input dimension contributes: ``begin + stride * i`` for ``i < size``,
    or the single index ``begin`` when ``shrink`` (no output dimension)."""

    begin: int
    stride: int
    size: int
    shrink: bool


@dataclass(frozen=True)
class SlicePlan:
    """A StridedSlice resolved against a static input shape.

    Attributes:
        dimensions: one entry per input dimension.
        layout: the output dimensions in order: an input dimension number, or None
            for a new size-1 axis (shrunk dimensions do not appear).
    """

    dimensions: tuple[SliceDimension, ...]
    layout: tuple[int | None, ...]

    @property
    def output_shape(self) -> tuple[int, ...]:
        return tuple(1 if axis is None else self.dimensions[axis].size for axis in self.layout)


def _constant_vector(node, inputs, position: int, what: str) -> list[int]:
    value = inputs[position]
    if value is None:
        raise ShapeError(f"StridedSlice node '{node.name}': {what} ('{node.inputs[position]}') must be a compile-time constant")
    value = np.asarray(value)
    if value.ndim != 1 or value.dtype.kind not in "iu":
        raise ShapeError(f"StridedSlice node '{node.name}': {what} must be a 1-D int32/int64 tensor, got {value.dtype.name}{list(value.shape)}")
    return [int(v) for v in value]


def _bit(mask: int, index: int) -> bool:
    return bool((mask >> index) & 1)


def slice_plan(node, shape: tuple[int, ...], begin: list[int], end: list[int], strides: list[int]) -> SlicePlan:
    """Resolve the masks and clamp the bounds (TensorFlow's ``ValidateStridedSliceOp``).

    Raises:
        ShapeError: lengths differ, a zero stride, several ellipses, more indices than
            the input has dimensions, or a shrunk index out of range.
    """
    name = f"StridedSlice node '{node.name}'"
    if not len(begin) == len(end) == len(strides):
        raise ShapeError(f"{name}: begin, end and strides have different lengths ({len(begin)}, {len(end)}, {len(strides)})")
    begin_mask, end_mask = attr_int(node, "begin_mask", 0), attr_int(node, "end_mask", 0)
    ellipsis_mask, new_axis_mask = attr_int(node, "ellipsis_mask", 0), attr_int(node, "new_axis_mask", 0)
    shrink_mask = attr_int(node, "shrink_axis_mask", 0)
    if ellipsis_mask & (ellipsis_mask - 1):
        raise ShapeError(f"{name}: ellipsis_mask {ellipsis_mask} has more than one bit set (multiple ellipses)")
    sparse_count = len(begin)
    if not ellipsis_mask or ellipsis_mask >> sparse_count:
        ellipsis_mask, sparse_count = 1 << sparse_count, sparse_count + 1  # an implicit ellipsis at the end
    ellipsis_at = ellipsis_mask.bit_length() - 1
    new_axes_after_ellipsis = sum(_bit(new_axis_mask, i) for i in range(ellipsis_at + 1, sparse_count))

    rank = len(shape)
    # Dense spec: one (sparse index or None for an ellipsis dimension) per input dimension.
    dense: list[int | None] = []
    layout: list[int | None] = []
    for i in range(sparse_count):
        if i == ellipsis_at:
            stop = min(rank - (sparse_count - i) + 1 + new_axes_after_ellipsis, rank)
            while len(dense) < stop:
                layout.append(len(dense))
                dense.append(None)
        elif _bit(new_axis_mask, i):
            layout.append(None)
        else:
            if len(dense) == rank:
                raise ShapeError(f"{name}: the slice has more indices than the input {list(shape)} has dimensions")
            if not _bit(shrink_mask, i):
                layout.append(len(dense))
            dense.append(i)
    if len(dense) != rank:
        raise ShapeError(f"{name}: the slice covers {len(dense)} of the {rank} input dimensions")

    dimensions = []
    for axis, (size, i) in enumerate(zip(shape, dense)):
        if i is None:
            dimensions.append(SliceDimension(0, 1, size, False))
            continue
        stride = strides[i]
        if stride == 0:
            raise ShapeError(f"{name}: strides[{i}] is 0")
        if _bit(shrink_mask, i):
            if stride < 0:
                raise ShapeError(f"{name}: strides[{i}] is {stride}; only a positive stride is allowed on a shrunk (non-range) index")
            index = begin[i] + size if begin[i] < 0 else begin[i]
            if not 0 <= index < size:
                raise ShapeError(f"{name}: index {begin[i]} of dimension {axis} is out of bounds for size {size}")
            dimensions.append(SliceDimension(index, 1, 1, True))
            continue
        low, high = (0, size) if stride > 0 else (-1, size - 1)

        def canonical(value: int, masked: bool, is_end: bool, low=low, high=high, stride=stride) -> int:
            if masked:
                return (high if is_end else low) if stride > 0 else (low if is_end else high)
            value = value + size if value < 0 else value
            return min(max(value, low), high)

        first = canonical(begin[i], _bit(begin_mask, i), False)
        last = canonical(end[i], _bit(end_mask, i), True)
        length = last - first
        count = 0 if length == 0 or (length < 0) != (stride < 0) else -(-abs(length) // abs(stride))
        dimensions.append(SliceDimension(first, stride, count, False))
    return SlicePlan(tuple(dimensions), tuple(layout))


def _plan_from_inputs(node, input_shape, inputs) -> SlicePlan:
    if len(inputs) != 4:
        raise ShapeError(f"StridedSlice takes 4 inputs (input, begin, end, strides), got {len(inputs)}")
    begin = _constant_vector(node, inputs, 1, "begin")
    end = _constant_vector(node, inputs, 2, "end")
    strides = _constant_vector(node, inputs, 3, "strides")
    return slice_plan(node, tuple(input_shape), begin, end, strides)


def infer_strided_slice(node, input_types, input_constants):
    x = input_types[0]
    if not x.is_static:
        raise ShapeError(f"StridedSlice node '{node.name}' reads a tensor of unknown shape {x}; fix the placeholder shapes")
    plan = _plan_from_inputs(node, x.shape, input_constants)
    return (TensorType(plan.output_shape, x.dtype),)


def reference_strided_slice(node, inputs):
    x = np.asarray(inputs[0])
    plan = _plan_from_inputs(node, x.shape, inputs)
    index = []
    for axis in range(x.ndim):
        dimension = plan.dimensions[axis]
        if dimension.shrink:
            index.append(dimension.begin)
        else:
            index.append(np.arange(dimension.size) * dimension.stride + dimension.begin)
    # Gather with open-mesh indices, then drop shrunk axes and insert new ones.
    kept = np.ix_(*[np.atleast_1d(i) for i in index]) if x.ndim else ()
    values = x[kept] if x.ndim else x
    values = values.reshape(tuple(d.size for d in plan.dimensions))
    return (np.asarray(values.reshape(plan.output_shape), dtype=x.dtype),)


def lower_strided_slice(node, inputs, outputs, context):
    """``Y[d...] = X[begin + stride * d_p (or begin when shrunk), ...]``."""
    (x,) = inputs
    (y,) = outputs
    constants = [None] + [constant_input(node, context, position, what) for position, what in ((1, "begin"), (2, "end"), (3, "strides"))]
    plan = _plan_from_inputs(node, x.shape, constants)
    iterators = tuple(f"d{p}" for p in range(len(y.shape)))
    output_position = {axis: p for p, axis in enumerate(plan.layout) if axis is not None}
    index = []
    for axis, dimension in enumerate(plan.dimensions):
        if dimension.shrink:
            index.append(dimension.begin)
        else:
            index.append(AffineExpr.combine((dimension.stride, iterators[output_position[axis]]), constant=dimension.begin))
    value = Load(Access.of(x.name, *index))
    return [Statement(context.statement_name(), iterators, y.shape, Access.of(y.name, *iterators), value, node=node.name, op=node.op)]


# --- Pack ----------------------------------------------------------------------------


def _pack_axis(node, rank: int) -> int:
    axis = attr_int(node, "axis", 0)
    if not -(rank + 1) <= axis <= rank:
        raise ShapeError(f"Pack node '{node.name}': axis {axis} is out of range for inputs of rank {rank} (allowed: [{-(rank + 1)}, {rank}])")
    return axis % (rank + 1)


def infer_pack(node, input_types, input_constants):
    if not input_types:
        raise ShapeError(f"Pack node '{node.name}' has no inputs")
    count = attr_int(node, "N", len(input_types))
    if count != len(input_types):
        raise ShapeError(f"Pack node '{node.name}' has attr N={count} but {len(input_types)} inputs")
    first = input_types[0]
    for other in input_types[1:]:
        if other != first:
            raise ShapeError(f"Pack node '{node.name}' needs inputs of one shape and dtype, got {first} and {other}")
    axis = _pack_axis(node, first.rank)
    return (TensorType(first.shape[:axis] + (len(input_types),) + first.shape[axis:], first.dtype),)


def reference_pack(node, inputs):
    values = [np.asarray(v) for v in inputs]
    return (np.stack(values, axis=_pack_axis(node, values[0].ndim)),)


def lower_pack(node, inputs, outputs, context):
    """For each input ``k``: ``Y[d...] = X_k[d without d_axis]`` where ``d_axis = k``."""
    (y,) = outputs
    axis = _pack_axis(node, len(y.shape) - 1)
    iterators = tuple(f"d{p}" for p in range(len(y.shape)))
    source = iterators[:axis] + iterators[axis + 1:]
    return [
        Statement(
            context.statement_name(),
            iterators,
            y.shape,
            Access.of(y.name, *iterators),
            Load(Access.of(x.name, *source)),
            constraints=(f"{iterators[axis]} = {k}",),
            node=node.name,
            op=node.op,
        )
        for k, x in enumerate(inputs)
    ]


def picked_index(node, input_constants, input_shape) -> tuple[int, int] | None:
    """``(axis, index)`` when the node takes index ``index`` of its input along one shrunk
    ``axis`` and every other axis whole (``x[t]``, ``x[:, t]``), else None (the
    :class:`~polytf.ops.traits.Stacking` trait)."""
    try:
        plan = _plan_from_inputs(node, tuple(input_shape), list(input_constants))
    except ShapeError:
        return None
    shrunk = [axis for axis, dimension in enumerate(plan.dimensions) if dimension.shrink]
    whole = all(d.shrink or (d.begin == 0 and d.stride == 1 and d.size == size) for d, size in zip(plan.dimensions, input_shape))
    if len(shrunk) != 1 or not whole or None in plan.layout:
        return None
    return shrunk[0], plan.dimensions[shrunk[0]].begin


#: not element-wise: a copy that anchors its own group
STRIDED_SLICE = OpDefinition(
    "StridedSlice", REDUCTION, infer_strided_slice, reference_strided_slice, lower_strided_slice, data_inputs=(0,),
    source="tensorflow/core/ops/array_ops.cc: StridedSlice; tensorflow/core/util/strided_slice_op.cc",
    dtypes=("float32", "int32", "int64", "bool"), foldable=True, arity=Arity(4, 4), stacking=Stacking(picked=picked_index),
)
#: not element-wise: copies that anchor their own group
PACK = OpDefinition(
    "Pack", REDUCTION, infer_pack, reference_pack, lower_pack, source="tensorflow/core/ops/array_ops.cc: Pack",
    dtypes=("float32", "int32", "int64", "bool"), foldable=True, arity=Arity(1, None), stacking=Stacking(stacked=_pack_axis),
)
SHAPE = OpDefinition(
    "Shape", SOURCE, infer_shape, reference_shape, None, data_inputs=(), source="tensorflow/core/ops/array_ops.cc: Shape",
    dtypes=("float32", "int32", "int64"), static_value=static_shape, arity=Arity(1, 1),
)
