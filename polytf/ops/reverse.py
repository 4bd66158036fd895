"""ReverseV2: reverse a tensor along some of its axes.

Source: TensorFlow op definition ``ReverseV2`` (tensorflow/core/ops/array_ops.cc):
``ReverseV2(tensor, axis)`` with ``tensor`` of rank ``R`` and ``axis`` a 1-D int32/int64
tensor of distinct axes in ``[-R, R)`` -> ``y`` of the same shape with
``y[i_0, ..., i_{R-1}] = tensor[j]``, ``j_a = n_a - 1 - i_a`` on a reversed axis ``a`` (of
size ``n_a``) and ``j_a = i_a`` elsewhere. polytf needs ``axis`` to be a compile-time
constant. Keras' ``Bidirectional`` layer reverses the time axis of its backward RNN's input
(and output, with ``return_sequences=True``) so.

Lowering: one copy statement over the output iterators,
``Y[d0, ..., d{R-1}] = X[..., n_a - 1 - d_a, ...]``: the read index is affine with
coefficient -1 on a reversed axis. REDUCTION category, like Transpose: it reads other
indices than it writes.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.constant_inputs import constant_input
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Load
from polytf.poly.statement import Statement


def reversed_axes(node, rank: int, axis_value) -> tuple[int, ...]:
    """``axis`` as sorted non-negative axes.

    Raises:
        ShapeError: ``axis`` is not a compile-time constant 1-D int vector of distinct axes in
            ``[-rank, rank)``.
    """
    if axis_value is None:
        source = node.inputs[1] if len(node.inputs) > 1 else "?"
        raise ShapeError(f"ReverseV2 node '{node.name}': its axis input ('{source}') must be a compile-time constant")
    axis_value = np.asarray(axis_value)
    if axis_value.dtype.kind not in "iu" or axis_value.ndim > 1:
        raise ShapeError(f"ReverseV2 node '{node.name}': axis must be a 1-D int32/int64 tensor, got {axis_value!r}")
    axes = [int(a) for a in axis_value.reshape(-1)]
    if any(not -rank <= a < rank for a in axes):
        raise ShapeError(
            f"ReverseV2 node '{node.name}': axis {axes} is out of range for a tensor of rank {rank} (allowed: [{-rank}, {rank}))"
        )
    normalized = [a % rank for a in axes]
    if len(set(normalized)) != len(normalized):
        raise ShapeError(f"ReverseV2 node '{node.name}': axis {axes} names an axis twice")
    return tuple(sorted(normalized))


def infer(node, input_types, input_constants):
    """``tensor: [n_0, ..., n_{R-1}], axis: [k] -> [n_0, ..., n_{R-1}]``, the tensor's dtype.

    Raises:
        ShapeError: see :func:`reversed_axes`.
    """
    x = input_types[0]
    reversed_axes(node, x.rank, input_constants[1])
    return (TensorType(x.shape, x.dtype),)


def reference(node, inputs):
    x = np.asarray(inputs[0])
    axes = reversed_axes(node, x.ndim, inputs[1])
    return (np.ascontiguousarray(np.flip(x, axis=axes)) if axes else x.copy(),)


def lower(node, inputs, outputs, context):
    """``S[d0..d{R-1}]: Y[d] = X[j]`` with ``j_a = n_a - 1 - d_a`` on the reversed axes."""
    (x,) = inputs
    (y,) = outputs
    axes = reversed_axes(node, len(x.shape), constant_input(node, context, 1, "axis"))
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    source = [AffineExpr.combine((-1, d), constant=x.shape[k] - 1) if k in axes else d for k, d in enumerate(iterators)]
    return [
        Statement(
            context.statement_name(),
            iterators,
            y.shape,
            Access.of(y.name, *iterators),
            Load(Access.of(x.name, *source)),
            node=node.name,
            op=node.op,
        )
    ]


REVERSE_V2 = OpDefinition(
    "ReverseV2",
    REDUCTION,
    infer,
    reference,
    lower,
    data_inputs=(0,),
    source="tensorflow/core/ops/array_ops.cc: ReverseV2",
    dtypes=ANY_DTYPE,
    arity=Arity(2, 2),
)
