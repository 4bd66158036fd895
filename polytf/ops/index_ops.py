"""Ops that turn values into positions or positions into values: ``ArgMax``, ``ArgMin`` and
``OneHot``. They have shape inference and numpy references but no lowering yet: compiled
models run them on the host between kernels (:mod:`polytf.runtime.host_fallback`), and
shape inference folds them on constants.

Sources: TensorFlow op definitions (tensorflow/core/ops/math_ops.cc: ``ArgMax``, ``ArgMin``;
tensorflow/core/ops/array_ops.cc: ``OneHot``):

* ``ArgMax(input: [D0, ..., Dn-1], dimension: scalar int) -> [D0, .., D{a-1}, D{a+1}, ..]``
  of ``output_type`` (int64 by default, or int32): the index of the first largest value
  along axis ``a`` (the first smallest for ``ArgMin``).
* ``OneHot(indices: [I...] int, depth: scalar int, on_value, off_value; axis = -1)``: a new
  axis of size ``depth`` at ``axis`` (-1: last); ``on_value`` where the position equals the
  index, ``off_value`` elsewhere (an index outside ``[0, depth)`` gives a row of ``off_value``).
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.registry import ANY_DTYPE, REDUCTION, OpDefinition, register


def _scalar_int(node, value, what: str) -> int:
    if value is None:
        raise ShapeError(f"{node.op} node '{node.name}': {what} ('{node.inputs[1]}') must be a compile-time constant")
    value = np.asarray(value)
    if value.size != 1 or value.dtype.kind not in "iu":
        raise ShapeError(f"{node.op} node '{node.name}': {what} must be one int32/int64 value, got {value!r}")
    return int(value.reshape(-1)[0])


def _axis(node, rank: int, value) -> int:
    axis = _scalar_int(node, value, "dimension")
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{node.op} node '{node.name}': dimension {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def infer_arg(node, input_types, input_constants):
    """``input, dimension`` -> the input's shape without that axis, of ``output_type``.

    Raises:
        ShapeError: not two inputs, a non-constant or out-of-range dimension, or an
            ``output_type`` other than int32/int64.
    """
    if len(input_types) != 2:
        raise ShapeError(f"{node.op} takes 2 inputs (input, dimension), got {len(input_types)}")
    x = input_types[0]
    axis = _axis(node, x.rank, input_constants[1])
    output_type = node.attr("output_type", "int64")
    if output_type not in ("int32", "int64"):
        raise ShapeError(f"{node.op} node '{node.name}': output_type {output_type} is not int32 or int64")
    return (TensorType(x.shape[:axis] + x.shape[axis + 1 :], output_type),)


def reference_arg(node, inputs):
    x = np.asarray(inputs[0])
    axis = _axis(node, x.ndim, inputs[1])
    function = np.argmax if node.op == "ArgMax" else np.argmin
    return (np.asarray(function(x, axis=axis), dtype=node.attr("output_type", "int64")),)


def infer_one_hot(node, input_types, input_constants):
    """``indices: [I...], depth, on_value, off_value`` -> ``[I...]`` with ``depth`` inserted at ``axis``.

    Raises:
        ShapeError: not four inputs, non-integer indices, a non-constant or negative depth,
            on/off values of different dtypes or not scalars, or an axis out of range.
    """
    if len(input_types) != 4:
        raise ShapeError(f"OneHot takes 4 inputs (indices, depth, on_value, off_value), got {len(input_types)}")
    indices, _, on, off = input_types
    if indices.dtype not in ("int32", "int64"):
        raise ShapeError(f"OneHot node '{node.name}': indices must be int32 or int64, got {indices.dtype}")
    depth = _scalar_int(node, input_constants[1], "depth")
    if depth < 0:
        raise ShapeError(f"OneHot node '{node.name}': depth {depth} is negative")
    if on.dtype != off.dtype or on.rank or off.rank:
        raise ShapeError(f"OneHot node '{node.name}': on_value and off_value must be scalars of one dtype, got {on} and {off}")
    axis = int(node.attr("axis", -1))
    if not -1 <= axis <= indices.rank:
        raise ShapeError(f"OneHot node '{node.name}': axis {axis} is out of range for indices of rank {indices.rank}")
    position = indices.rank if axis == -1 else axis
    return (TensorType(indices.shape[:position] + (depth,) + indices.shape[position:], on.dtype),)


def reference_one_hot(node, inputs):
    indices, depth, on, off = (np.asarray(v) for v in inputs)
    depth = int(depth)
    axis = int(node.attr("axis", -1))
    position = indices.ndim if axis == -1 else axis
    hot = np.expand_dims(indices, position) == np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - position))
    return (np.where(hot, on, off).astype(on.dtype),)


ARG_MAX = register(
    OpDefinition("ArgMax", REDUCTION, infer_arg, reference_arg, None, source="tensorflow/core/ops/math_ops.cc: ArgMax", dtypes=("float32", "int32", "int64"), foldable=True)
)
ARG_MIN = register(
    OpDefinition("ArgMin", REDUCTION, infer_arg, reference_arg, None, source="tensorflow/core/ops/math_ops.cc: ArgMin", dtypes=("float32", "int32", "int64"), foldable=True)
)
ONE_HOT = register(
    OpDefinition("OneHot", REDUCTION, infer_one_hot, reference_one_hot, None, source="tensorflow/core/ops/array_ops.cc: OneHot", dtypes=ANY_DTYPE, foldable=True)
)
