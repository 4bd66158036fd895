"""Pad and PadV2: constant padding of a tensor of any rank.

Sources: TensorFlow op definitions ``Pad`` and ``PadV2`` (tensorflow/core/ops/array_ops.cc):

* ``Pad(input, paddings)``: ``paddings`` is an int32/int64 ``[R, 2]`` tensor, row ``k``
  holding how many cells to add before and after dimension ``k`` of the rank-``R``
  input; the new cells hold 0. ``PadV2(input, paddings, constant_values)`` fills them
  with the scalar ``constant_values`` instead.
* input ``[S0, ..., S{R-1}]`` -> output ``[S0 + b0 + a0, ..., ]``.

polytf needs ``paddings`` (and ``constant_values``) to be compile-time constants, and
the paddings to be non-negative (TensorFlow's negative paddings are an error too).

Lowering ("halo + copy", like the zero-padding of :mod:`polytf.schedules.data_layout`),
both statements over the output iterators ``d0..d{R-1}``, so they share the whole
outer band and their writes are disjoint:

1. ``O[d] = value`` on the halo (``d_k < b_k or d_k >= b_k + S_k`` for some ``k``);
2. ``O[d] = I[d0 - b0, ..., d{R-1} - b{R-1}]`` on the interior (``b_k <= d_k < b_k + S_k``).
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.constant_inputs import constant_input
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Constant, Load
from polytf.poly.statement import Statement


def paddings_of(node, input_type: TensorType, paddings_value) -> tuple[tuple[int, int], ...]:
    """``((before, after), ...)`` per input dimension.

    Raises:
        ShapeError: ``paddings`` not constant, of the wrong shape or dtype, or negative.
    """
    if paddings_value is None:
        source = node.inputs[1] if len(node.inputs) > 1 else "?"
        raise ShapeError(
            f"{node.op} node '{node.name}': its paddings input ('{source}') must be a compile-time constant; "
            "polytf does not support data-dependent shapes"
        )
    paddings_value = np.asarray(paddings_value)
    if paddings_value.dtype.kind not in "iu":
        raise ShapeError(f"{node.op} node '{node.name}': paddings must be int32 or int64, got {paddings_value.dtype.name}")
    if paddings_value.shape != (input_type.rank, 2):
        raise ShapeError(
            f"{node.op} node '{node.name}': paddings must have shape [{input_type.rank}, 2] for the input {input_type}, "
            f"got {list(paddings_value.shape)}"
        )
    pairs = tuple((int(before), int(after)) for before, after in paddings_value)
    if any(before < 0 or after < 0 for before, after in pairs):
        raise ShapeError(f"{node.op} node '{node.name}': paddings must be non-negative, got {[list(p) for p in pairs]}")
    return pairs


def constant_value_of(node, inputs_constants) -> float:
    """The fill value: 0 for Pad, the scalar ``constant_values`` for PadV2.

    Raises:
        ShapeError: PadV2's ``constant_values`` is not a compile-time scalar.
    """
    if node.op != "PadV2":
        return 0.0
    value = inputs_constants[2] if len(inputs_constants) > 2 else None
    if value is None:
        raise ShapeError(f"PadV2 node '{node.name}': constant_values must be a compile-time constant scalar")
    value = np.asarray(value)
    if value.size != 1 or value.ndim != 0:
        raise ShapeError(f"PadV2 node '{node.name}': constant_values must be a scalar, got shape {list(value.shape)}")
    return float(value)


def _check_input_count(node, count: int) -> None:
    expected = 3 if node.op == "PadV2" else 2
    if count != expected:
        names = "(input, paddings, constant_values)" if node.op == "PadV2" else "(input, paddings)"
        raise ShapeError(f"{node.op} takes {expected} inputs {names}, got {count}")


def infer(node, input_types, input_constants):
    _check_input_count(node, len(input_types))
    x = input_types[0]
    pairs = paddings_of(node, x, input_constants[1])
    constant_value_of(node, input_constants)
    shape = tuple(None if d is None else d + before + after for d, (before, after) in zip(x.shape, pairs))
    return (TensorType(shape, x.dtype),)


def reference(node, inputs):
    _check_input_count(node, len(inputs))
    x = np.asarray(inputs[0], dtype=np.float32)
    pairs = paddings_of(node, TensorType(x.shape), inputs[1])
    value = constant_value_of(node, inputs)
    return (np.pad(x, pairs, mode="constant", constant_values=np.float32(value)),)


def lower(node, inputs, outputs, context):
    """``S_halo[d]: O[d] = value`` (on the halo) and ``S_copy[d]: O[d] = I[d - before]``
    (on the interior), both over the output iterators; ``paddings`` and
    ``constant_values`` come from ``context.constants``."""
    (x,) = inputs
    (y,) = outputs
    paddings = paddings_of(node, x.type, constant_input(node, context, 1, "paddings"))
    value = constant_value_of(node, [None, None, constant_input(node, context, 2, "constant_values")] if node.op == "PadV2" else [])
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    out = Access.of(y.name, *iterators)
    statements = []
    halo = [f"{it} < {before} or {it} >= {before + size}" for it, (before, after), size in zip(iterators, paddings, x.shape) if before or after]
    if halo:
        # An empty input leaves nothing but halo (and an empty interior).
        constraints = (f"({' or '.join(halo)})",) if all(x.shape) else ()
        statements.append(Statement(context.statement_name(), iterators, y.shape, out, Constant(value), constraints, node.name, node.op))
    if all(x.shape):
        interior = tuple(f"{before} <= {it} < {before + size}" for it, (before, after), size in zip(iterators, paddings, x.shape) if before or after)
        source = Access.of(x.name, *(AffineExpr.combine((1, it), constant=-before) for it, (before, _) in zip(iterators, paddings)))
        statements.append(Statement(context.statement_name(), iterators, y.shape, out, Load(source), interior, node.name, node.op))
    return statements


PAD = OpDefinition(
    "Pad", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/array_ops.cc: Pad", dtypes=ANY_DTYPE,
    arity=Arity(2, 2), slab_copy=True,
)
PAD_V2 = OpDefinition(
    "PadV2", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/array_ops.cc: PadV2",
    arity=Arity(3, 3), slab_copy=True,
)
