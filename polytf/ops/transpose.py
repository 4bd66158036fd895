"""Transpose: permute the dimensions of a tensor.

Source: TensorFlow op definition ``Transpose`` (tensorflow/core/ops/array_ops.cc):
``Transpose(x, perm)`` with ``x`` of rank ``R`` and ``perm`` a permutation of
``0..R-1`` -> ``y`` with ``y.shape[i] = x.shape[perm[i]]`` and
``y[i_0, ..., i_{R-1}] = x[j]`` where ``j[perm[k]] = i_k``. polytf needs ``perm`` to be a
compile-time constant (an int32/int64 vector); negative entries are rejected, as
TensorFlow does.

Lowering: one copy statement over the output iterators,
``Y[d0, ..., d{R-1}] = X[...]`` with ``d_k`` at position ``perm[k]`` of the read; stores
are contiguous, loads strided. Transpose is a REDUCTION-category op (it anchors its own
group) rather than ELEMENTWISE: an element-wise op joins a producer group of the same
shape and shares its loops element by element, which a transpose cannot do.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.constant_inputs import constant_input
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.poly.expression import Access, Load
from polytf.poly.statement import Statement


def permutation(node, rank: int, perm_value) -> tuple[int, ...]:
    """``perm`` as a tuple of ints.

    Raises:
        ShapeError: ``perm`` is not a compile-time constant permutation of ``0..rank-1``.
    """
    if perm_value is None:
        source = node.inputs[1] if len(node.inputs) > 1 else "?"
        raise ShapeError(f"Transpose node '{node.name}': its perm input ('{source}') must be a compile-time constant")
    perm_value = np.asarray(perm_value)
    if perm_value.dtype.kind not in "iu" or perm_value.ndim != 1:
        raise ShapeError(f"Transpose node '{node.name}': perm must be a 1-D int32/int64 tensor, got {perm_value!r}")
    perm = tuple(int(p) for p in perm_value)
    if sorted(perm) != list(range(rank)):
        raise ShapeError(f"Transpose node '{node.name}': perm {list(perm)} is not a permutation of 0..{rank - 1} (the input has rank {rank})")
    return perm


def infer(node, input_types, input_constants):
    if len(input_types) != 2:
        raise ShapeError(f"Transpose takes 2 inputs (x, perm), got {len(input_types)}")
    x = input_types[0]
    perm = permutation(node, x.rank, input_constants[1])
    return (TensorType(tuple(x.shape[p] for p in perm), x.dtype),)


def reference(node, inputs):
    x = np.asarray(inputs[0])
    return (np.ascontiguousarray(np.transpose(x, permutation(node, x.ndim, inputs[1]))),)


def lower(node, inputs, outputs, context):
    """``S[d0..d{R-1}]: Y[d] = X[j]`` with ``j[perm[k]] = d_k``."""
    (x,) = inputs
    (y,) = outputs
    perm = permutation(node, len(x.shape), constant_input(node, context, 1, "perm"))
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    source = [""] * len(perm)
    for k, p in enumerate(perm):
        source[p] = iterators[k]
    return [Statement(context.statement_name(), iterators, y.shape, Access.of(y.name, *iterators), Load(Access.of(x.name, *source)), node=node.name, op=node.op)]


TRANSPOSE = OpDefinition(
    "Transpose", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/array_ops.cc: Transpose",
    dtypes=ANY_DTYPE, arity=Arity(2, 2),
)
