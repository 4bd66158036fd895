"""Roll: rotate a tensor's elements along some of its axes.

Source: TensorFlow op definition ``Roll`` (tensorflow/core/ops/manip_ops.cc) and its CPU
kernel (tensorflow/core/kernels/roll_op.cc): ``Roll(input, shift, axis)`` with ``shift`` and
``axis`` int32/int64 scalars or 1-D tensors of one length -> ``output`` of the input's shape
and dtype, the element at index ``i`` moved to ``(i + shift) mod n`` along each named axis (of
size ``n``); an axis named more than once is rolled by the sum of its shifts, and a shift may
be negative or larger than ``n``. ``tf.roll`` freezes so; a Swin Transformer's shifted
windows roll the feature map by half a window along height and width before attention and
back after it.

polytf needs ``shift`` and ``axis`` to be compile-time constants (a shift computed at run
time is a ShapeError: the node can run on the host through its numpy reference).

Lowering: with ``s_a = shift_a mod n_a`` on each rolled axis, ``Y[j] = X[.., j_a - s_a (+ n_a
when j_a < s_a), ..]``: one copy statement over the output iterators per combination of the
pieces ``j_a < s_a`` and ``j_a >= s_a`` of the rolled axes (each read index affine on its
piece; 2 statements for one axis, 4 for height and width). Every statement writes the output
at its own iterators, so they share one loop nest (and a fused consumer's). REDUCTION
category, like ReverseV2: it reads other indices than it writes.
"""

from __future__ import annotations

import itertools

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.constant_inputs import constant_input
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Load
from polytf.poly.statement import Statement


def _vector(node, value, what: str) -> list[int]:
    if value is None:
        source = node.inputs[1 if what == "shift" else 2] if len(node.inputs) > 2 else "?"
        raise ShapeError(f"Roll node '{node.name}': its {what} input ('{source}') must be a compile-time constant (a shift computed at run time runs on the host)")
    value = np.asarray(value)
    if value.dtype.kind not in "iu" or value.ndim > 1:
        raise ShapeError(f"Roll node '{node.name}': {what} must be an int32/int64 scalar or 1-D tensor, got {value!r}")
    return [int(v) for v in value.reshape(-1)]


def roll_shifts(node, shape, shift_value, axis_value) -> dict[int, int]:
    """Axis -> shift in ``[1, n)`` for every axis the node rolls by a non-zero amount (shifts of
    one axis summed, reduced modulo its size).

    Raises:
        ShapeError: ``shift`` or ``axis`` not a compile-time int scalar or vector, of different
            lengths, or an axis out of ``[-rank, rank)``.
    """
    shifts, axes = _vector(node, shift_value, "shift"), _vector(node, axis_value, "axis")
    if len(shifts) != len(axes):
        raise ShapeError(f"Roll node '{node.name}': shift {shifts} and axis {axes} must have the same length")
    rank = len(shape)
    total: dict[int, int] = {}
    for shift, axis in zip(shifts, axes):
        if not -rank <= axis < rank:
            raise ShapeError(f"Roll node '{node.name}': axis {axis} is out of range for a tensor of rank {rank} (allowed: [{-rank}, {rank}))")
        total[axis % rank] = total.get(axis % rank, 0) + shift
    return {axis: shift % shape[axis] for axis, shift in sorted(total.items()) if shape[axis] and shift % shape[axis]}


def infer(node, input_types, input_constants):
    """``input, shift, axis -> `` the input's type.

    Raises:
        ShapeError: see :func:`roll_shifts`; not 3 inputs; a dynamic input shape.
    """
    if len(input_types) != 3:
        raise ShapeError(f"Roll node '{node.name}' takes 3 inputs (input, shift, axis), got {len(input_types)}")
    x = input_types[0]
    if x.is_static:
        roll_shifts(node, x.shape, input_constants[1], input_constants[2])
    return (TensorType(x.shape, x.dtype),)


def reference(node, inputs):
    x = np.asarray(inputs[0])
    shifts = roll_shifts(node, x.shape, inputs[1], inputs[2])
    if not shifts:
        return (x.copy(),)
    return (np.roll(x, tuple(shifts.values()), axis=tuple(shifts)),)


def lower(node, inputs, outputs, context):
    """One copy statement per combination of the rolled axes' pieces (module docstring)."""
    (x,) = inputs
    (y,) = outputs
    shifts = roll_shifts(node, x.shape, constant_input(node, context, 1, "shift"), constant_input(node, context, 2, "axis"))
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    statements = []
    for wrapped in itertools.product((True, False), repeat=len(shifts)):
        source: list[AffineExpr | str] = list(iterators)
        constraints = []
        for (axis, shift), wraps in zip(shifts.items(), wrapped):
            source[axis] = AffineExpr.combine((1, iterators[axis]), constant=x.shape[axis] - shift if wraps else -shift)
            constraints.append(f"{iterators[axis]} < {shift}" if wraps else f"{iterators[axis]} >= {shift}")
        statements.append(
            Statement(context.statement_name(), iterators, y.shape, Access.of(y.name, *iterators), Load(Access.of(x.name, *source)), tuple(constraints), node.name, node.op)
        )
    return statements


ROLL = OpDefinition(
    "Roll", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/manip_ops.cc: Roll", dtypes=ANY_DTYPE, arity=Arity(3, 3),
)
