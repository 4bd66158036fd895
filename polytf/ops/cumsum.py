"""``Cumsum``: running sums along one axis.

Source: TensorFlow op definition ``Cumsum`` (tensorflow/core/ops/math_ops.cc) and
``tf.raw_ops.Cumsum``:

* ``Cumsum(x, axis)``: ``x: [S0, ..., S{R-1}]``, ``axis`` a scalar int32/int64 in
  ``[-R, R)`` (a compile-time constant here) -> the same shape and dtype;
* ``Y[.., i, ..] = sum_{j <= i} X[.., j, ..]``; attr ``exclusive`` drops the ``j = i`` term
  (``j < i``), attr ``reverse`` sums from the other end (``j >= i``, or ``j > i``).

Lowering, over the output iterators ``d*`` and one reduction iterator ``r0`` on the axis,
a triangular domain (quadratic work in the axis length; fine for the sequence lengths and
masks of frozen models):

* ``S_init[d]: Y[d] = 0``;
* ``S_sum[d, r0]: Y[d] = Y[d] + X[.., r0, ..]`` on ``r0 <= d_axis`` (``<``, ``>=``, ``>`` for
  the other attribute combinations).

REDUCTION category.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_bool
from polytf.ops.constant_inputs import axis_of, constant_input
from polytf.ops.definition import REDUCTION, Arity, OpDefinition
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.statement import Statement


def _flags(node) -> tuple[bool, bool]:
    return attr_bool(node, "exclusive", False), attr_bool(node, "reverse", False)


def infer(node, input_types, input_constants):
    """``x: [S...], axis: [] -> [S...]``, x's dtype.

    Raises:
        ShapeError: two inputs expected; ``axis`` not a constant scalar in range; a scalar ``x``.
    """
    if len(input_types) != 2:
        raise ShapeError(f"Cumsum node '{node.name}' takes 2 inputs (x, axis), got {len(input_types)}")
    x = input_types[0]
    if x.rank < 1:
        raise ShapeError(f"Cumsum node '{node.name}': x must have rank >= 1, got {x}")
    axis_of(node, x.rank, input_constants[1])
    _flags(node)
    return (TensorType(x.shape, x.dtype),)


def reference(node, inputs):
    x = np.asarray(inputs[0])
    axis = axis_of(node, x.ndim, inputs[1])
    exclusive, reverse = _flags(node)
    work = np.flip(x, axis) if reverse else x
    accumulate = np.float64 if x.dtype == np.float32 else x.dtype
    total = np.cumsum(work.astype(accumulate), axis=axis)
    if exclusive:
        total = np.concatenate([np.zeros_like(np.take(total, [0], axis=axis)), np.delete(total, -1, axis=axis)], axis=axis) if x.shape[axis] else total
    if reverse:
        total = np.flip(total, axis)
    return (np.ascontiguousarray(total).astype(x.dtype),)


def lower(node, inputs, outputs, context):
    """``Y[d] = 0``; ``Y[d] = Y[d] + X[.., r0, ..]`` on the triangle (module docstring)."""
    (x,) = inputs
    (y,) = outputs
    axis = axis_of(node, len(x.shape), constant_input(node, context, 1, "axis"))
    exclusive, reverse = _flags(node)
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    out = Access.of(y.name, *iterators)
    source = Access.of(x.name, *(("r0" if k == axis else it) for k, it in enumerate(iterators)))
    relation = {(False, False): "<=", (True, False): "<", (False, True): ">=", (True, True): ">"}[(exclusive, reverse)]
    return [
        Statement(context.statement_name(), iterators, y.shape, out, Constant(0.0), (), node.name, node.op),
        Statement(
            context.statement_name(), (*iterators, "r0"), (*y.shape, x.shape[axis]), out, Binary("add", Load(out), Load(source)),
            (f"r0 {relation} {iterators[axis]}",), node.name, node.op,
        ),
    ]


CUMSUM = OpDefinition(
    "Cumsum", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/math_ops.cc: Cumsum",
    dtypes=("float32", "int32", "int64"), foldable=True, arity=Arity(2, 2),
)
