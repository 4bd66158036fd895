"""Logical ops on bool tensors: ``LogicalAnd``, ``LogicalOr`` (broadcasting) and ``LogicalNot``.

Sources: TensorFlow op definitions (tensorflow/core/ops/math_ops.cc: ``LogicalAnd``,
``LogicalOr``, ``LogicalNot``): bool ``x: [A...]`` (and ``y: [B...]``) -> bool of the
broadcast shape.

Lowering: one point-wise statement with a :class:`~polytf.poly.expression.Logical`
body; category ELEMENTWISE (a causal mask ``And`` a padding mask fuses into one kernel).
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.definition import ELEMENTWISE, Arity, OpDefinition
from polytf.ops.elementwise import broadcast_access, broadcast_shapes, pointwise
from polytf.poly.expression import Load, Logical

_OPERATORS = {"LogicalAnd": "and", "LogicalOr": "or", "LogicalNot": "not"}


def infer(node, input_types, input_constants):
    """bool inputs -> bool of the broadcast shape.

    Raises:
        ShapeError: the wrong number of inputs, or an input that is not bool.
    """
    count = 1 if node.op == "LogicalNot" else 2
    if len(input_types) != count:
        raise ShapeError(f"{node.op} takes {count} input{'s' if count > 1 else ''}, got {len(input_types)}")
    for tensor, t in zip(node.inputs, input_types):
        if t.dtype != "bool":
            raise ShapeError(f"{node.op} node '{node.name}' takes bool inputs; '{tensor}' is {t.dtype}")
    return (TensorType(broadcast_shapes(*(t.shape for t in input_types)), "bool"),)


def reference(node, inputs):
    values = [np.asarray(v, dtype=bool) for v in inputs]
    function = {"LogicalAnd": np.logical_and, "LogicalOr": np.logical_or, "LogicalNot": np.logical_not}[node.op]
    return (np.asarray(function(*values), dtype=bool),)


def lower(node, inputs, outputs, context):
    """``S[d...]: Z[d...] = X[bcast(d)] and/or Y[bcast(d)]`` (``not X[d...]``)."""
    (c,) = outputs
    loads = [Load(broadcast_access(x.name, x.shape, c.shape)) for x in inputs]
    value = Logical(_OPERATORS[node.op], *loads)
    return pointwise(node, c, value, context)


DEFINITIONS = {
    op: OpDefinition(op, ELEMENTWISE, infer, reference, lower, source=f"tensorflow/core/ops/math_ops.cc: {op}", dtypes=("bool",), foldable=True, arity=Arity(1, 1) if op == "LogicalNot" else Arity(2, 2))
    for op in _OPERATORS
}
