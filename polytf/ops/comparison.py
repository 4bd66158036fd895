"""Comparisons: ``Equal``, ``NotEqual``, ``Less``, ``LessEqual``, ``Greater``,
``GreaterEqual`` (numpy/TensorFlow broadcasting, bool output).

Sources: TensorFlow op definitions (tensorflow/core/ops/math_ops.cc: ``Equal``,
``NotEqual`` (attr ``incompatible_shape_error``: only ``true``, the default, is
supported), ``Less``, ``LessEqual``, ``Greater``, ``GreaterEqual``):
``x: [A...], y: [B...]`` of one dtype (float32, int32 or int64) ->
bool ``broadcast([A...], [B...])``. NaN compares unequal to everything: every ordering
and ``Equal`` are false, ``NotEqual`` is true.

Lowering: one point-wise statement ``Z[d...] = op(X[bcast(d)], Y[bcast(d)])``
(:class:`~polytf.poly.expression.Compare`); category ELEMENTWISE, so a mask fuses with
its producer and its consumer (e.g. ``SelectV2``). Compile-time constants fold through
the reference (a causal mask built from constants is a constant).
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.definition import ELEMENTWISE, Arity, OpDefinition
from polytf.ops.elementwise import broadcast_access, broadcast_shapes, pointwise
from polytf.poly.expression import COMPARE_OPS, Compare, Load

#: TensorFlow op -> comparison operator of :data:`~polytf.poly.expression.COMPARE_OPS`
COMPARISONS = {
    "Equal": "equal",
    "NotEqual": "not_equal",
    "Less": "less",
    "LessEqual": "less_equal",
    "Greater": "greater",
    "GreaterEqual": "greater_equal",
}


def infer(node, input_types, input_constants):
    """``x, y`` (one dtype) -> bool of the broadcast shape.

    Raises:
        ShapeError: not two inputs, different dtypes, shapes that do not broadcast, or
            ``incompatible_shape_error=false``.
    """
    if len(input_types) != 2:
        raise ShapeError(f"{node.op} takes 2 inputs, got {len(input_types)}")
    a, b = input_types
    if a.dtype != b.dtype:
        raise ShapeError(f"{node.op} node '{node.name}': inputs have different dtypes: {a} and {b}")
    if node.attr("incompatible_shape_error", True) is False:
        raise ShapeError(f"{node.op} node '{node.name}': incompatible_shape_error=false is not supported")
    return (TensorType(broadcast_shapes(a.shape, b.shape), "bool"),)


def reference(node, inputs):
    x, y = (np.asarray(v) for v in inputs)
    with np.errstate(invalid="ignore"):
        return (np.asarray(COMPARE_OPS[COMPARISONS[node.op]](x, y), dtype=bool),)


def lower(node, inputs, outputs, context):
    """``S[d...]: Z[d...] = op(X[bcast(d)], Y[bcast(d)])``."""
    a, b = inputs
    (c,) = outputs
    value = Compare(
        COMPARISONS[node.op],
        Load(broadcast_access(a.name, a.shape, c.shape)),
        Load(broadcast_access(b.name, b.shape, c.shape)),
    )
    return pointwise(node, c, value, context)


DEFINITIONS = {
    op: OpDefinition(op, ELEMENTWISE, infer, reference, lower, source=f"tensorflow/core/ops/math_ops.cc: {op}", dtypes=("float32", "int32", "int64"), foldable=True, arity=Arity(2, 2))
    for op in COMPARISONS
}
