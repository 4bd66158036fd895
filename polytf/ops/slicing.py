"""``Slice``: a box cut out of a tensor.

Source: TensorFlow op definition ``Slice`` (tensorflow/core/ops/array_ops.cc) and
``tf.raw_ops.Slice``:

* ``Slice(input, begin, size)``: ``input: [S0, ..., S{R-1}]``; ``begin`` and ``size`` are
  int32/int64 vectors ``[R]`` (compile-time constants here); ``size[k] = -1`` means "to the
  end" (``S_k - begin_k``); ``0 <= begin_k`` and ``begin_k + size_k <= S_k``;
* output ``[size0, ..., size{R-1}]``, the same dtype.

Lowering: ``S[d0..d{R-1}]: Y[d] = X[d + begin]`` over the output iterators. REDUCTION
category (it anchors its own group): it reads its input at other indices than it writes.
The expansion rule of :mod:`polytf.ops.split` (applied by :mod:`polytf.passes.expansion`) turns ``Split``,
``SplitV`` and ``Unpack`` into Slices.
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


def _vector(node, value, rank: int, what: str) -> tuple[int, ...]:
    if value is None:
        raise ShapeError(f"Slice node '{node.name}': its {what} input must be a compile-time constant; polytf does not support data-dependent shapes")
    value = np.asarray(value)
    if value.dtype.kind not in "iu" or value.shape != (rank,):
        raise ShapeError(f"Slice node '{node.name}': {what} must be an int32/int64 vector of length {rank} (the input's rank), got {value.dtype.name} {list(value.shape)}")
    return tuple(int(v) for v in value)


def slice_box(node, shape, begin_value, size_value) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(begin, size)`` with ``-1`` sizes resolved.

    Raises:
        ShapeError: not constant, wrong length, or a box outside the input.
    """
    rank = len(shape)
    begin = _vector(node, begin_value, rank, "begin")
    size = list(_vector(node, size_value, rank, "size"))
    for axis, extent in enumerate(shape):
        if size[axis] == -1:
            if extent is None:
                raise ShapeError(f"Slice node '{node.name}': size -1 on axis {axis} needs a known input size")
            size[axis] = extent - begin[axis]
        if begin[axis] < 0 or size[axis] < 0 or (extent is not None and begin[axis] + size[axis] > extent):
            raise ShapeError(
                f"Slice node '{node.name}': begin {list(begin)} and size {list(size)} leave the input of shape {list(shape)} on axis {axis}"
            )
    return begin, tuple(size)


def infer(node, input_types, input_constants):
    """``input: [S...], begin: [R], size: [R] -> [size...]``, input's dtype.

    Raises:
        ShapeError: three inputs expected; ``begin``/``size`` not constant or out of range.
    """
    if len(input_types) != 3:
        raise ShapeError(f"Slice node '{node.name}' takes 3 inputs (input, begin, size), got {len(input_types)}")
    x = input_types[0]
    _, size = slice_box(node, x.shape, input_constants[1], input_constants[2])
    return (TensorType(size, x.dtype),)


def reference(node, inputs):
    x = np.asarray(inputs[0])
    begin, size = slice_box(node, x.shape, inputs[1], inputs[2])
    return (np.array(x[tuple(slice(b, b + s) for b, s in zip(begin, size))]),)


def lower(node, inputs, outputs, context):
    """``S[d]: Y[d] = X[d + begin]``."""
    (x,) = inputs
    (y,) = outputs
    begin, _ = slice_box(node, x.shape, constant_input(node, context, 1, "begin"), constant_input(node, context, 2, "size"))
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    source = Access.of(x.name, *(AffineExpr.combine((1, it), constant=b) for it, b in zip(iterators, begin)))
    return [Statement(context.statement_name(), iterators, y.shape, Access.of(y.name, *iterators), Load(source), node=node.name, op=node.op)]


SLICE = OpDefinition(
    "Slice", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/array_ops.cc: Slice",
    dtypes=ANY_DTYPE, foldable=True, arity=Arity(3, 3),
)
