"""BatchMatMulV2 / BatchMatMulV3: ``c[b..., i, j] = sum_k op(a)[b..., i, k] * op(b)[b..., k, j]``.

Source: TensorFlow op definitions ``BatchMatMulV2`` and ``BatchMatMulV3``
(tensorflow/core/ops/math_ops.cc):

* ``x``: [..., M, K] (or [..., K, M] with ``adj_x``), ``y``: [..., K, N] (or [..., N, K]
  with ``adj_y``), both of rank >= 2, float32 (``adj`` is the adjoint, a transpose for
  real numbers).
* The batch dimensions (all but the last two) broadcast like numpy: aligned on the
  right, a missing or size-1 dimension repeats. Keras freezes a Dense layer on a
  rank-3 input as ``[B, T, K] x [K, N]``.
* -> ``[broadcast(batch_x, batch_y)..., M, N]``, float32. ``BatchMatMulV3``'s ``Ta``,
  ``Tb`` and ``Tout`` must all be float32.

Lowering, with batch iterators ``d0..d{P-1}``, rows ``i = d{P}``, columns ``j = d{P+1}``
and the reduction iterator ``r0``:

1. ``C[d..., i, j] = 0``
2. ``C[d..., i, j] += A[bcast(d)..., i, r0] * B[bcast(d)..., r0, j]``

where ``bcast`` drops the leading batch iterators an operand does not have and
replaces the iterator of a broadcast size-1 dimension by the constant 0.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_bool
from polytf.ops.definition import CONTRACTION, Arity, OpDefinition
from polytf.ops.elementwise import broadcast_shapes
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.statement import Statement


def _adjoints(node) -> tuple[bool, bool]:
    return attr_bool(node, "adj_x", False), attr_bool(node, "adj_y", False)


def _check_dtypes(node) -> None:
    if node.op != "BatchMatMulV3":
        return
    for key in ("Ta", "Tb", "Tout"):
        dtype = node.attr(key, "float32")
        if dtype != "float32":
            raise ShapeError(f"{node.op} with {key}={dtype} is not supported: polytf compiles float32 only")


def infer(node, input_types, input_constants):
    _check_dtypes(node)
    if len(input_types) != 2:
        raise ShapeError(f"{node.op} takes 2 inputs (x, y), got {len(input_types)}")
    x, y = input_types
    if x.rank < 2 or y.rank < 2:
        raise ShapeError(f"{node.op} needs inputs of rank >= 2, got {x} and {y}")
    if x.dtype != y.dtype:
        raise ShapeError(f"{node.op} inputs have different dtypes: {x} and {y}")
    adj_x, adj_y = _adjoints(node)
    m, k = (x.shape[-1], x.shape[-2]) if adj_x else x.shape[-2:]
    k2, n = (y.shape[-1], y.shape[-2]) if adj_y else y.shape[-2:]
    if k is not None and k2 is not None and k != k2:
        raise ShapeError(f"{node.op} inner dimensions differ: {x} x {y} (adj_x={adj_x}, adj_y={adj_y}): {k} != {k2}")
    try:
        batch = broadcast_shapes(x.shape[:-2], y.shape[:-2])
    except ShapeError as error:
        raise ShapeError(f"{node.op} batch dimensions of {x} and {y} do not broadcast: {error}") from None
    return (TensorType(batch + (m, n), x.dtype),)


def reference(node, inputs):
    _check_dtypes(node)
    x, y = (np.asarray(v, dtype=np.float32) for v in inputs)
    adj_x, adj_y = _adjoints(node)
    if adj_x:
        x = np.swapaxes(x, -1, -2)
    if adj_y:
        y = np.swapaxes(y, -1, -2)
    return (np.matmul(x, y).astype(np.float32),)


def _batch_index(shape: tuple[int, ...], batch_shape: tuple[int, ...]) -> list:
    """Indices of an operand's batch dimensions from the output batch iterators."""
    offset = len(batch_shape) - len(shape)
    return [0 if size == 1 and batch_shape[axis + offset] != 1 else f"d{axis + offset}" for axis, size in enumerate(shape)]


def lower(node, inputs, outputs, context):
    """``S_init[d..., i, j]: C = 0``; ``S_update[d..., i, j, r0]: C += A[bcast(d), i, r0] * B[bcast(d), r0, j]``."""
    x, y = inputs
    (c,) = outputs
    adj_x, adj_y = _adjoints(node)
    shape = c.shape
    batch_shape = shape[:-2]
    rank = len(shape)
    i, j = f"d{rank - 2}", f"d{rank - 1}"
    k = x.shape[-2] if adj_x else x.shape[-1]
    x_batch = _batch_index(x.shape[:-2], batch_shape)
    y_batch = _batch_index(y.shape[:-2], batch_shape)
    x_access = Access.of(x.name, *x_batch, *(("r0", i) if adj_x else (i, "r0")))
    y_access = Access.of(y.name, *y_batch, *((j, "r0") if adj_y else ("r0", j)))
    iterators = tuple(f"d{axis}" for axis in range(rank))
    out = Access.of(c.name, *iterators)
    init = Statement(context.statement_name(), iterators, shape, out, Constant(0.0), node=node.name, op=node.op)
    update = Statement(
        context.statement_name(),
        iterators + ("r0",),
        shape + (k,),
        out,
        Binary("add", Load(out), Binary("mul", Load(x_access), Load(y_access))),
        node=node.name,
        op=node.op,
    )
    return [init, update]


BATCH_MATMUL_V2 = OpDefinition(
    "BatchMatMulV2", CONTRACTION, infer, reference, lower, source="tensorflow/core/ops/math_ops.cc: BatchMatMulV2",
    arity=Arity(2, 2),
)
BATCH_MATMUL_V3 = OpDefinition(
    "BatchMatMulV3", CONTRACTION, infer, reference, lower, source="tensorflow/core/ops/math_ops.cc: BatchMatMulV3",
    arity=Arity(2, 2),
)
