"""``Tile``: a tensor repeated along each axis.

Source: TensorFlow op definition ``Tile`` (tensorflow/core/ops/array_ops.cc):

* ``Tile(input, multiples)``: ``input: [S0, ..., S{R-1}]``, ``multiples`` an int32/int64
  vector ``[R]`` of non-negative counts (a compile-time constant here);
* output ``[S0 * m0, ..., S{R-1} * m{R-1}]``, element ``Y[d] = X[d0 mod S0, ...]``.

Lowering: ``S[d0..d{R-1}]: Y[d] = X[i(d)]`` over the output iterators, where ``i_k(d)`` is
``d_k`` when ``m_k = 1``, ``0`` when ``S_k = 1`` and the quasi-affine ``d_k mod S_k``
otherwise (isl manual, "Integer Division"). REDUCTION category: it reads its input at other
indices than it writes, so it anchors its own group.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.constant_inputs import constant_input
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.poly.affine import AffineExpr, Modulo
from polytf.poly.expression import Access, Load
from polytf.poly.statement import Statement


def multiples_of(node, rank: int, value) -> tuple[int, ...]:
    """The repeat counts.

    Raises:
        ShapeError: not a compile-time int vector of length ``rank``, or a negative count.
    """
    if value is None:
        raise ShapeError(f"Tile node '{node.name}': its multiples input must be a compile-time constant; polytf does not support data-dependent shapes")
    value = np.asarray(value)
    if value.dtype.kind not in "iu" or value.shape != (rank,):
        raise ShapeError(f"Tile node '{node.name}': multiples must be an int32/int64 vector of length {rank} (the input's rank), got {value.dtype.name} {list(value.shape)}")
    multiples = tuple(int(v) for v in value)
    if any(m < 0 for m in multiples):
        raise ShapeError(f"Tile node '{node.name}': multiples {list(multiples)} has a negative count")
    return multiples


def infer(node, input_types, input_constants):
    """``input: [S...], multiples: [R] -> [S_k * m_k ...]``, input's dtype.

    Raises:
        ShapeError: two inputs expected; bad ``multiples``.
    """
    if len(input_types) != 2:
        raise ShapeError(f"Tile node '{node.name}' takes 2 inputs (input, multiples), got {len(input_types)}")
    x = input_types[0]
    multiples = multiples_of(node, x.rank, input_constants[1])
    return (TensorType(tuple(None if s is None else s * m for s, m in zip(x.shape, multiples)), x.dtype),)


def reference(node, inputs):
    x = np.asarray(inputs[0])
    return (np.tile(x, multiples_of(node, x.ndim, inputs[1])) if x.ndim else x.copy(),)


def lower(node, inputs, outputs, context):
    """``S[d]: Y[d] = X[d mod S]``."""
    (x,) = inputs
    (y,) = outputs
    multiples = multiples_of(node, len(x.shape), constant_input(node, context, 1, "multiples"))
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    index = []
    for it, size, multiple in zip(iterators, x.shape, multiples):
        if multiple == 1:
            index.append(it)
        elif size <= 1:  # a size-1 axis (or an empty one: no points)
            index.append(0)
        else:
            index.append(Modulo(AffineExpr.of(it), size))
    return [Statement(context.statement_name(), iterators, y.shape, Access.of(y.name, *iterators), Load(Access.of(x.name, *index)), node=node.name, op=node.op)]


TILE = OpDefinition(
    "Tile", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/array_ops.cc: Tile",
    dtypes=ANY_DTYPE, foldable=True, arity=Arity(2, 2),
)
