"""``Range``: an arithmetic sequence, folded at compile time.

Source: TensorFlow op definition ``Range`` (tensorflow/core/ops/math_ops.cc) and
``tf.raw_ops.Range``:

* ``Range(start, limit, delta)``: scalars of one dtype (int32, int64 or float32),
  ``delta != 0`` -> ``[n]`` with ``n = ceil((limit - start) / delta)`` (0 when negative),
  element ``i`` being ``start + i * delta``.

polytf needs all three inputs as compile-time constants (a data-dependent length has no
static shape): shape inference evaluates the numpy reference (``foldable``), so a Range never
reaches code generation. Frozen models use it for positions (``tf.range(seq_len)``) and for
reduction axes.
"""

from __future__ import annotations

import math

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.definition import REDUCTION, Arity, OpDefinition


def _scalars(node, values) -> tuple[float, float, float]:
    if len(values) != 3:
        raise ShapeError(f"Range node '{node.name}' takes 3 inputs (start, limit, delta), got {len(values)}")
    names = ("start", "limit", "delta")
    result = []
    for name, value in zip(names, values):
        if value is None:
            raise ShapeError(
                f"Range node '{node.name}': its {name} input must be a compile-time constant "
                "(the length of a Range is its output's shape; polytf does not support data-dependent shapes)"
            )
        value = np.asarray(value)
        if value.size != 1:
            raise ShapeError(f"Range node '{node.name}': {name} must be a scalar, got shape {list(value.shape)}")
        result.append(value.reshape(()).item())
    if result[2] == 0:
        raise ShapeError(f"Range node '{node.name}': delta must not be 0")
    return tuple(result)


def length(start, limit, delta) -> int:
    """``max(0, ceil((limit - start) / delta))`` (TensorFlow's RangeOp: exact for integers)."""
    if all(isinstance(v, int) for v in (start, limit, delta)):
        count = -((start - limit) // delta) if delta > 0 else -((limit - start) // -delta)
        return max(0, count)
    return max(0, int(math.ceil((limit - start) / delta)))


def infer(node, input_types, input_constants):
    """``start, limit, delta: [] -> [n]``, their dtype.

    Raises:
        ShapeError: an input not a compile-time scalar, or ``delta == 0``.
    """
    start, limit, delta = _scalars(node, input_constants)
    return (TensorType((length(start, limit, delta),), input_types[0].dtype),)


def reference(node, inputs):
    start, limit, delta = _scalars(node, inputs)
    dtype = np.asarray(inputs[0]).dtype
    count = length(start, limit, delta)
    return (np.asarray([start + i * delta for i in range(count)], dtype=dtype).reshape(count),)


def lower(node, inputs, outputs, context):
    """Not lowered: a Range folds at compile time.

    Raises:
        ShapeError: always (a Range too long to fold, over ``FOLD_MAX_ELEMENTS`` elements).
    """
    raise ShapeError(
        f"Range node '{node.name}': a Range is computed at compile time, but this one has {outputs[0].shape[0]} elements, "
        "more than constant folding evaluates (polytf.ops.constant_inputs.FOLD_MAX_ELEMENTS)"
    )


RANGE = OpDefinition(
    "Range", REDUCTION, infer, reference, lower, data_inputs=(), source="tensorflow/core/ops/math_ops.cc: Range",
    dtypes=("float32", "int32", "int64"), foldable=True, arity=Arity(3, 3),
)
