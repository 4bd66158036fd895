"""``MatrixBandPart``: keep a band of the innermost matrices, zero the rest.

Source: TensorFlow op definition ``MatrixBandPart`` (tensorflow/core/ops/array_ops.cc) and
``tf.raw_ops.MatrixBandPart``:

* ``MatrixBandPart(input, num_lower, num_upper)``: ``input: [..., M, N]`` (rank >= 2);
  ``num_lower``, ``num_upper`` int32/int64 scalars (compile-time constants here), a negative
  value meaning "the whole triangle";
* ``Y[..., m, n] = X[..., m, n]`` when ``(num_lower < 0 or m - n <= num_lower) and
  (num_upper < 0 or n - m <= num_upper)``, else 0. A causal attention mask freezes to
  ``MatrixBandPart(ones, -1, 0)``, which folds to a constant.

Lowering: two statements over the output iterators with affine constraints, the band
``Y[d] = X[d]`` and its complement ``Y[d] = 0`` (a disjunction), disjoint and covering the
output. REDUCTION category (its statements carry constraints, like Pad).
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.constant_inputs import constant_input, constant_scalar
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.poly.expression import Access, Constant, Load
from polytf.poly.statement import Statement


def band(node, lower_value, upper_value) -> tuple[int, int]:
    """``(num_lower, num_upper)``.

    Raises:
        ShapeError: not compile-time int scalars.
    """
    return constant_scalar(node, lower_value, "num_lower"), constant_scalar(node, upper_value, "num_upper")


def infer(node, input_types, input_constants):
    """``input: [..., M, N], num_lower: [], num_upper: [] -> [..., M, N]``, input's dtype.

    Raises:
        ShapeError: three inputs expected; rank < 2; bounds not constant.
    """
    if len(input_types) != 3:
        raise ShapeError(f"MatrixBandPart node '{node.name}' takes 3 inputs (input, num_lower, num_upper), got {len(input_types)}")
    x = input_types[0]
    if x.rank < 2:
        raise ShapeError(f"MatrixBandPart node '{node.name}': input must have rank >= 2, got {x}")
    band(node, input_constants[1], input_constants[2])
    return (TensorType(x.shape, x.dtype),)


def reference(node, inputs):
    x = np.asarray(inputs[0])
    lower_bound, upper_bound = band(node, inputs[1], inputs[2])
    m = np.arange(x.shape[-2])[:, None]
    n = np.arange(x.shape[-1])[None, :]
    keep = np.ones((x.shape[-2], x.shape[-1]), bool)
    if lower_bound >= 0:
        keep &= m - n <= lower_bound
    if upper_bound >= 0:
        keep &= n - m <= upper_bound
    return (np.where(keep, x, np.zeros((), x.dtype)).astype(x.dtype),)


def lower(node, inputs, outputs, context):
    """``Y[d] = X[d]`` in the band, ``Y[d] = 0`` outside (module docstring)."""
    (x,) = inputs
    (y,) = outputs
    lower_bound, upper_bound = band(node, constant_input(node, context, 1, "num_lower"), constant_input(node, context, 2, "num_upper"))
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    row, column = iterators[-2], iterators[-1]
    inside, outside = [], []
    if lower_bound >= 0:
        inside.append(f"{row} - {column} <= {lower_bound}")
        outside.append(f"{row} - {column} > {lower_bound}")
    if upper_bound >= 0:
        inside.append(f"{column} - {row} <= {upper_bound}")
        outside.append(f"{column} - {row} > {upper_bound}")
    out = Access.of(y.name, *iterators)
    statements = [Statement(context.statement_name(), iterators, y.shape, out, Load(Access.of(x.name, *iterators)), tuple(inside), node.name, node.op)]
    if outside:
        statements.append(Statement(context.statement_name(), iterators, y.shape, out, Constant(0.0), (f"({' or '.join(outside)})",), node.name, node.op))
    return statements


MATRIX_BAND_PART = OpDefinition(
    "MatrixBandPart", REDUCTION, infer, reference, lower, data_inputs=(0,),
    source="tensorflow/core/ops/array_ops.cc: MatrixBandPart", dtypes=ANY_DTYPE, foldable=True, arity=Arity(3, 3),
)
