"""ConcatV2 and Concat: join tensors along one axis.

Sources: TensorFlow op definitions ``ConcatV2`` and ``Concat``
(tensorflow/core/ops/array_ops.cc):

* ``ConcatV2(values_0, ..., values_{N-1}, axis)`` and ``Concat(concat_dim, values_0, ...)``;
  every value has the same rank ``R >= 1`` and the same sizes except along ``axis``;
  ``axis`` is a scalar int32/int64 in ``[-R, R)`` (negative counts from the end) that
  polytf needs as a compile-time constant;
* output size along ``axis`` is the sum of the inputs' sizes; input ``k`` lands at
  offset ``o_k = sum_{j<k} size_j``.

Lowering: one copy statement per non-empty input, each over the *output* iterators
``d0..d{R-1}`` restricted to its slab ``o_k <= d_axis < o_k + size_k``:
``Y[d] = X_k[..., d_axis - o_k, ...]``. The writes are disjoint and every statement
shares the whole outer band, so consumers fuse element by element. Concat is a
REDUCTION-category op (it anchors its own group): as an ELEMENTWISE op it would join a
producer group whose output has its shape and read that output at other indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.constant_inputs import constant_input, constant_scalar
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Load
from polytf.poly.statement import Statement


@dataclass(frozen=True)
class ConcatDefinition(OpDefinition):
    """An OpDefinition whose data inputs are all but the axis input (first or last)."""

    axis_first: bool = False

    def axis_index(self, input_count: int) -> int:
        return 0 if self.axis_first else input_count - 1

    def data_input_indices(self, input_count: int) -> tuple[int, ...]:
        axis = self.axis_index(input_count)
        return tuple(i for i in range(input_count) if i != axis)


def _definition(node) -> ConcatDefinition:
    return CONCAT if node.op == "Concat" else CONCAT_V2


def normalized_axis(node, rank: int, axis_value) -> int:
    """``axis`` in ``[0, rank)``.

    Raises:
        ShapeError: ``axis`` is not a compile-time int scalar in ``[-rank, rank)``.
    """
    axis = constant_scalar(node, axis_value)
    if rank < 1:
        raise ShapeError(f"{node.op} node '{node.name}': cannot concatenate scalars")
    if not -rank <= axis < rank:
        raise ShapeError(f"{node.op} node '{node.name}': axis {axis} is out of range for inputs of rank {rank} (allowed: [{-rank}, {rank}))")
    return axis % rank


def _split(node, items):
    """``(axis item, value items)`` of a list in input order."""
    axis_index = _definition(node).axis_index(len(items))
    return items[axis_index], [v for i, v in enumerate(items) if i != axis_index]


def output_shape(node, value_types, axis: int) -> tuple[int | None, ...]:
    """The joined shape.

    Raises:
        ShapeError: ranks differ, or sizes differ off the axis.
    """
    first = value_types[0]
    shape = list(first.shape)
    for k, value in enumerate(value_types[1:], start=1):
        if value.rank != first.rank:
            raise ShapeError(f"{node.op} node '{node.name}': input {k} {value} has rank {value.rank}, input 0 {first} has rank {first.rank}")
        for d, (a, b) in enumerate(zip(first.shape, value.shape)):
            if d != axis and a is not None and b is not None and a != b:
                raise ShapeError(f"{node.op} node '{node.name}': input {k} {value} differs from input 0 {first} in dimension {d} (axis is {axis})")
    sizes = [v.shape[axis] for v in value_types]
    shape[axis] = None if any(s is None for s in sizes) else sum(sizes)
    return tuple(shape)


def infer(node, input_types, input_constants):
    if len(input_types) < 2:
        raise ShapeError(f"{node.op} takes at least 2 inputs (values and axis), got {len(input_types)}")
    axis_value, _ = _split(node, list(input_constants))
    _, value_types = _split(node, list(input_types))
    axis = normalized_axis(node, value_types[0].rank, axis_value)
    dtypes = {v.dtype for v in value_types}
    if len(dtypes) > 1:
        raise ShapeError(f"{node.op} node '{node.name}': inputs have different dtypes {sorted(dtypes)}")
    return (TensorType(output_shape(node, value_types, axis), value_types[0].dtype),)


def reference(node, inputs):
    axis_value, values = _split(node, list(inputs))
    values = [np.asarray(v) for v in values]
    axis = normalized_axis(node, values[0].ndim, axis_value)
    output_shape(node, [TensorType(v.shape, v.dtype.name) for v in values], axis)
    return (np.concatenate(values, axis=axis),)


def lower(node, inputs, outputs, context):
    """``S_k[d0..d{R-1}]: Y[d] = X_k[..., d_axis - o_k, ...]`` on ``o_k <= d_axis < o_k + size_k``."""
    (y,) = outputs
    axis_index = _definition(node).axis_index(len(node.inputs))
    axis = normalized_axis(node, len(y.shape), constant_input(node, context, axis_index, "axis"))
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    out = Access.of(y.name, *iterators)
    statements = []
    offset = 0
    for x in inputs:
        size = x.shape[axis]
        if size == 0:
            continue
        index = list(iterators)
        index[axis] = AffineExpr.combine((1, iterators[axis]), constant=-offset)
        constraints = () if size == y.shape[axis] else (f"{offset} <= {iterators[axis]} < {offset + size}",)
        statements.append(Statement(context.statement_name(), iterators, y.shape, out, Load(Access.of(x.name, *index)), constraints, node.name, node.op))
        offset += size
    return statements


CONCAT_V2 = ConcatDefinition(
    "ConcatV2", REDUCTION, infer, reference, lower, source="tensorflow/core/ops/array_ops.cc: ConcatV2", dtypes=ANY_DTYPE,
    foldable=True, arity=Arity(2, None), slab_copy=True,
)
CONCAT = ConcatDefinition(
    "Concat", REDUCTION, infer, reference, lower, source="tensorflow/core/ops/array_ops.cc: Concat", axis_first=True,
    dtypes=ANY_DTYPE, foldable=True, arity=Arity(2, None), slab_copy=True,
)
