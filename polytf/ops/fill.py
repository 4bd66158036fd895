"""Tensors made from a shape and a value: ``Fill``, ``ZerosLike``, ``OnesLike``, ``BroadcastTo``.

Sources: TensorFlow op definitions (tensorflow/core/ops/array_ops.cc):

* ``Fill(dims, value)``: ``dims`` an int32/int64 vector ``[R]`` (a compile-time constant
  here), ``value`` a scalar -> ``[dims...]`` filled with ``value``;
* ``ZerosLike(x)`` / ``OnesLike(x)``: ``x: [S...] -> [S...]`` of zeros / ones, same dtype;
* ``BroadcastTo(input, shape)``: ``input: [S...]`` broadcast (numpy rules, aligned on the
  right) to the constant ``shape``; a size-1 input dimension is repeated.

``ZerosLike`` and ``OnesLike`` depend on ``x``'s shape only, so shape inference gives their
value from the input type (``static_value``): they become compile-time constants and never
reach code generation. ``Fill`` and ``BroadcastTo`` fold when their inputs are constants.

Lowering (ELEMENTWISE, over the output iterators ``d0..d{R-1}``):

* ``Fill``: ``Y[d] = V[]`` (the scalar value, read from its buffer);
* ``ZerosLike`` / ``OnesLike``: ``Y[d] = 0`` / ``1``;
* ``BroadcastTo``: ``Y[d] = X[b(d)]`` with ``b`` the broadcast index (0 on repeated axes).
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.constant_inputs import constant_input
from polytf.ops.definition import ANY_DTYPE, ELEMENTWISE, Arity, OpDefinition
from polytf.ops.elementwise import broadcast_access
from polytf.poly.expression import Access, Constant, Load
from polytf.poly.statement import Statement


def shape_of(node, value, what: str) -> tuple[int, ...]:
    """A constant int vector of non-negative sizes (Fill's ``dims``, BroadcastTo's ``shape``).

    Raises:
        ShapeError: the value is not known at compile time, not an int vector, or negative.
    """
    if value is None:
        raise ShapeError(
            f"{node.op} node '{node.name}': its {what} input must be a compile-time constant; "
            "polytf does not support data-dependent shapes"
        )
    value = np.asarray(value)
    if value.dtype.kind not in "iu" or value.ndim != 1:
        raise ShapeError(f"{node.op} node '{node.name}': {what} must be an int32/int64 vector, got {value.dtype.name} of shape {list(value.shape)}")
    sizes = tuple(int(v) for v in value)
    if any(s < 0 for s in sizes):
        raise ShapeError(f"{node.op} node '{node.name}': {what} {list(sizes)} has a negative size")
    return sizes


def _check_count(node, count: int, expected: int, names: str) -> None:
    if count != expected:
        raise ShapeError(f"{node.op} node '{node.name}' takes {expected} input{'s' if expected > 1 else ''} {names}, got {count}")


# --- Fill ----------------------------------------------------------------------------


def infer_fill(node, input_types, input_constants):
    """``dims: [R] (constant), value: [] -> [dims...]``, value's dtype.

    Raises:
        ShapeError: ``dims`` not constant, ``value`` not a scalar.
    """
    _check_count(node, len(input_types), 2, "(dims, value)")
    dims = shape_of(node, input_constants[0], "dims")
    if input_types[1].rank != 0:
        raise ShapeError(f"Fill node '{node.name}': value must be a scalar, got {input_types[1]}")
    return (TensorType(dims, input_types[1].dtype),)


def reference_fill(node, inputs):
    dims = shape_of(node, inputs[0], "dims")
    value = np.asarray(inputs[1])
    return (np.full(dims, value, dtype=value.dtype),)


def lower_fill(node, inputs, outputs, context):
    """``S[d]: Y[d] = V[]``."""
    (value,) = inputs
    (y,) = outputs
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    return [Statement(context.statement_name(), iterators, y.shape, Access.of(y.name, *iterators), Load(Access.of(value.name)), node=node.name, op=node.op)]


# --- ZerosLike, OnesLike -------------------------------------------------------------


def infer_like(node, input_types, input_constants):
    """``x: [S...] -> [S...]``, same dtype."""
    _check_count(node, len(input_types), 1, "(x)")
    return (TensorType(input_types[0].shape, input_types[0].dtype),)


def _fill_value(node) -> int:
    return 1 if node.op == "OnesLike" else 0


def reference_like(node, inputs):
    x = np.asarray(inputs[0])
    return (np.full(x.shape, _fill_value(node), dtype=x.dtype),)


def static_like(node, input_types):
    """The value from the input type alone.

    Raises:
        ShapeError: the input shape is not fully known.
    """
    (x,) = input_types
    if not x.is_static:
        raise ShapeError(f"{node.op} node '{node.name}': the input shape {x} must be known at compile time")
    return (np.full(x.shape, _fill_value(node), dtype=np.dtype(x.dtype)),)


def lower_like(node, inputs, outputs, context):
    """``S[d]: Y[d] = 0`` (or 1)."""
    (y,) = outputs
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    value = Constant(float(_fill_value(node)))
    return [Statement(context.statement_name(), iterators, y.shape, Access.of(y.name, *iterators), value, node=node.name, op=node.op)]


# --- BroadcastTo ---------------------------------------------------------------------


def broadcast_shape(node, input_shape, target) -> tuple[int, ...]:
    """``target`` when ``input_shape`` broadcasts to it (numpy rules, TF's BroadcastTo also
    lets the result take the larger of both sizes).

    Raises:
        ShapeError: a dimension neither 1 nor equal to the target's.
    """
    rank = max(len(input_shape), len(target))
    padded_input = (1,) * (rank - len(input_shape)) + tuple(input_shape)
    padded_target = (1,) * (rank - len(target)) + tuple(target)
    result = []
    for axis, (a, b) in enumerate(zip(padded_input, padded_target)):
        if a is None:
            result.append(b)
        elif a == b or a == 1:
            result.append(b)
        elif b == 1:
            result.append(a)
        else:
            raise ShapeError(f"BroadcastTo node '{node.name}': input shape {list(input_shape)} does not broadcast to {list(target)} (dimension {axis})")
    return tuple(result)


def infer_broadcast_to(node, input_types, input_constants):
    """``input: [S...], shape: [R] (constant) -> [shape...]``, input's dtype.

    Raises:
        ShapeError: ``shape`` not constant, or the input does not broadcast to it.
    """
    _check_count(node, len(input_types), 2, "(input, shape)")
    target = shape_of(node, input_constants[1], "shape")
    return (TensorType(broadcast_shape(node, input_types[0].shape, target), input_types[0].dtype),)


def reference_broadcast_to(node, inputs):
    x = np.asarray(inputs[0])
    target = broadcast_shape(node, x.shape, shape_of(node, inputs[1], "shape"))
    return (np.array(np.broadcast_to(x, target)),)


def lower_broadcast_to(node, inputs, outputs, context):
    """``S[d]: Y[d] = X[b(d)]`` (index 0 on the axes the input repeats)."""
    (x,) = inputs
    (y,) = outputs
    constant_input(node, context, 1, "shape")
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    source = broadcast_access(x.name, x.shape, y.shape)
    return [Statement(context.statement_name(), iterators, y.shape, Access.of(y.name, *iterators), Load(source), node=node.name, op=node.op)]


_DTYPES = ANY_DTYPE

FILL = OpDefinition(
    "Fill", ELEMENTWISE, infer_fill, reference_fill, lower_fill, data_inputs=(1,),
    source="tensorflow/core/ops/array_ops.cc: Fill", dtypes=_DTYPES, foldable=True, arity=Arity(2, 2),
)
ZEROS_LIKE = OpDefinition(
    "ZerosLike", ELEMENTWISE, infer_like, reference_like, lower_like, data_inputs=(),
    source="tensorflow/core/ops/array_ops.cc: ZerosLike", dtypes=_DTYPES, static_value=static_like, arity=Arity(1, 1),
)
ONES_LIKE = OpDefinition(
    "OnesLike", ELEMENTWISE, infer_like, reference_like, lower_like, data_inputs=(),
    source="tensorflow/core/ops/array_ops.cc: OnesLike", dtypes=_DTYPES, static_value=static_like, arity=Arity(1, 1),
)
BROADCAST_TO = OpDefinition(
    "BroadcastTo", ELEMENTWISE, infer_broadcast_to, reference_broadcast_to, lower_broadcast_to, data_inputs=(0,),
    source="tensorflow/core/ops/array_ops.cc: BroadcastTo", dtypes=_DTYPES, foldable=True, arity=Arity(2, 2),
)
