"""Softmax and LogSoftmax over the last axis.

Source: TensorFlow op definitions ``Softmax`` and ``LogSoftmax`` (tensorflow/core/ops/nn_ops.cc):
``logits`` of rank >= 1 -> ``softmax[..., j] = exp(logits[..., j]) / sum_k exp(logits[..., k])``,
computed stably as ``exp(x - max(x)) / sum(exp(x - max(x)))`` along the last axis;
``logsoftmax = (x - max(x)) - log(sum(exp(x - max(x))))`` (its CPU kernel,
tensorflow/core/kernels/softmax_op_functor.h, computes the same).

Lowering (program order), with kernel-local temporaries ``M`` (row max), ``E``
(exponentials) and ``Z`` (row sum); rows use ``d0..d{R-2}``, full-shape statements
``d0..d{R-1}``, reductions add ``r0``:

1. ``M[d] = -inf``
2. ``M[d] = max(M[d], X[d, r0])``
3. ``E[d, dl] = exp(X[d, dl] - M[d])``
4. ``Z[d] = 0``
5. ``Z[d] = Z[d] + E[d, r0]``
6. ``Y[d, dl] = E[d, dl] / Z[d]`` (LogSoftmax: ``Y[d, dl] = (X[d, dl] - M[d]) - log(Z[d])``)

``E`` is a temporary rather than the output itself so that no statement other than a
reduction reads the element it writes.

NaN and infinities (as TensorFlow's Eigen CPU kernel, tensorflow/core/kernels/
softmax_op_functor.h, which computes ``x - max(x)`` too): a row holding NaN or ``+inf``, or
only ``-inf``, is NaN everywhere: ``exp(NaN)``, ``inf - inf`` and ``-inf - (-inf)`` put a NaN
into ``Z``. The row maximum may therefore skip NaN (``max``, ``llvm.maxnum``, which vectorises
as a reduction). TensorFlow's oneDNN kernel, which it uses on some hosts (AVX-512), differs on
such rows: NaN only at the NaN and ``+inf`` positions, 0 elsewhere.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.ops.definition import REDUCTION, Arity, OpDefinition
from polytf.poly.expression import Access, Binary, Constant, Load, Unary
from polytf.poly.statement import Statement


def infer(node, input_types, input_constants):
    if len(input_types) != 1:
        raise ShapeError(f"{node.op} takes 1 input, got {len(input_types)}")
    (x,) = input_types
    if x.rank < 1:
        raise ShapeError(f"{node.op} needs an input of rank >= 1, got {x}")
    return (x,)


def reference(node, inputs):
    x = np.asarray(inputs[0], dtype=np.float32)
    if x.ndim < 1:
        raise ShapeError(f"{node.op} needs an input of rank >= 1, got shape {x.shape}")
    shifted = x.astype(np.float64) - x.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    if node.op == "LogSoftmax":
        return ((shifted - np.log(e.sum(axis=-1, keepdims=True))).astype(np.float32),)
    return ((e / e.sum(axis=-1, keepdims=True)).astype(np.float32),)


def lower(node, inputs, outputs, context):
    (x,) = inputs
    (y,) = outputs
    shape = y.shape
    rank = len(shape)
    row_shape, length = shape[:-1], shape[-1]
    row = tuple(f"d{i}" for i in range(rank - 1))
    full = row + (f"d{rank - 1}",)
    rowmax = context.temporary(row_shape)
    e = context.temporary(shape)
    rowsum = context.temporary(row_shape)

    def statement(iterators, extents, write, value):
        return Statement(context.statement_name(), iterators, tuple(extents), write, value, node=node.name, op=node.op)

    m = Access.of(rowmax.name, *row)
    z = Access.of(rowsum.name, *row)
    return [
        statement(row, row_shape, m, Constant(float("-inf"))),
        statement(row + ("r0",), row_shape + (length,), m, Binary("max", Load(m), Load(Access.of(x.name, *row, "r0")))),
        statement(full, shape, Access.of(e.name, *full), Unary("exp", Binary("sub", Load(Access.of(x.name, *full)), Load(m)))),
        statement(row, row_shape, z, Constant(0.0)),
        statement(row + ("r0",), row_shape + (length,), z, Binary("add", Load(z), Load(Access.of(e.name, *row, "r0")))),
        statement(full, shape, Access.of(y.name, *full), _normalised(node, x, e, m, z, full)),
    ]


def _normalised(node, x, e, m: Access, z: Access, full: tuple[str, ...]):
    """The output element: ``E / Z``, or for LogSoftmax ``(X - M) - log(Z)``."""
    if node.op == "LogSoftmax":
        return Binary("sub", Binary("sub", Load(Access.of(x.name, *full)), Load(m)), Unary("log", Load(z)))
    return Binary("div", Load(Access.of(e.name, *full)), Load(z))


SOFTMAX = OpDefinition(
    "Softmax", REDUCTION, infer, reference, lower, source="tensorflow/core/ops/nn_ops.cc: Softmax", arity=Arity(1, 1), reduces_axes=True,
)
LOG_SOFTMAX = OpDefinition(
    "LogSoftmax", REDUCTION, infer, reference, lower, source="tensorflow/core/ops/nn_ops.cc: LogSoftmax", arity=Arity(1, 1), reduces_axes=True,
)
