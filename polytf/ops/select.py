"""``Select`` and ``SelectV2``: pick elements of ``t`` or ``e`` by a bool condition.

Sources: TensorFlow op definitions (tensorflow/core/ops/math_ops.cc: ``Select``,
``SelectV2``):

* ``SelectV2(condition, t, e)``: the three shapes broadcast together (numpy rules) ->
  ``condition ? t : e`` elementwise (``tf.where`` with three arguments).
* ``Select(condition, t, e)`` (TF1): ``t`` and ``e`` of one shape; ``condition`` of that
  shape, or rank 1 with the size of their first dimension (it then picks whole rows), or a
  scalar.

``t`` and ``e`` have one dtype (float32, int32, int64 or bool); the output has it.

Lowering: one point-wise statement ``Y[d...] = select(C[..], T[..], E[..])``
(:class:`~polytf.poly.expression.Select`); category ELEMENTWISE, so a causal mask's
``SelectV2`` fuses with the attention scores before the softmax.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.definition import ELEMENTWISE, Arity, OpDefinition
from polytf.ops.elementwise import broadcast_access, broadcast_shapes, pointwise
from polytf.poly.expression import Access, Load, Select


def _row_condition(node, condition: TensorType, value: TensorType) -> bool:
    """Whether a TF1 ``Select`` picks whole rows (rank-1 condition over rank > 1 values)."""
    return node.op == "Select" and condition.rank == 1 and value.rank > 1


def infer(node, input_types, input_constants):
    """``condition, t, e`` -> ``t``'s dtype over the broadcast (``Select``: ``t``'s) shape.

    Raises:
        ShapeError: not three inputs, a condition that is not bool, ``t`` and ``e`` of
            different dtypes, or shapes that do not fit the op's rules.
    """
    if len(input_types) != 3:
        raise ShapeError(f"{node.op} takes 3 inputs (condition, t, e), got {len(input_types)}")
    condition, then, otherwise = input_types
    if condition.dtype != "bool":
        raise ShapeError(f"{node.op} node '{node.name}': the condition '{node.inputs[0]}' must be bool, not {condition.dtype}")
    if then.dtype != otherwise.dtype:
        raise ShapeError(f"{node.op} node '{node.name}': t and e have different dtypes: {then} and {otherwise}")
    if node.op == "SelectV2":
        return (TensorType(broadcast_shapes(condition.shape, then.shape, otherwise.shape), then.dtype),)
    if tuple(then.shape) != tuple(otherwise.shape):
        raise ShapeError(f"Select node '{node.name}': t {then} and e {otherwise} must have one shape (use SelectV2 to broadcast)")
    if condition.rank and tuple(condition.shape) != tuple(then.shape) and not (
        _row_condition(node, condition, then) and condition.shape[0] == then.shape[0]
    ):
        raise ShapeError(f"Select node '{node.name}': condition {condition} must be a scalar, of t's shape {then}, or rank 1 over its rows")
    return (TensorType(then.shape, then.dtype),)


def reference(node, inputs):
    condition, then, otherwise = (np.asarray(v) for v in inputs)
    if node.op == "Select" and condition.ndim == 1 and then.ndim > 1:
        condition = condition.reshape(condition.shape + (1,) * (then.ndim - 1))
    return (np.asarray(np.where(condition.astype(bool), then, otherwise), dtype=then.dtype),)


def lower(node, inputs, outputs, context):
    """``S[d...]: Y[d...] = select(C[..], T[bcast(d)], E[bcast(d)])``."""
    condition, then, otherwise = inputs
    (y,) = outputs
    if _row_condition(node, condition.type, then.type):
        condition_access = Access.of(condition.name, "d0")
    else:
        condition_access = broadcast_access(condition.name, condition.shape, y.shape)
    value = Select(
        Load(condition_access),
        Load(broadcast_access(then.name, then.shape, y.shape)),
        Load(broadcast_access(otherwise.name, otherwise.shape, y.shape)),
    )
    return pointwise(node, y, value, context)


DEFINITIONS = {
    op: OpDefinition(op, ELEMENTWISE, infer, reference, lower, source=f"tensorflow/core/ops/math_ops.cc: {op}", dtypes=("bool", "float32", "int32", "int64"), foldable=True, arity=Arity(3, 3))
    for op in ("Select", "SelectV2")
}
