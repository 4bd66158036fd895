"""Ops that turn values into positions or positions into values: ``ArgMax``, ``ArgMin`` and
``OneHot``: shape inference, numpy references (which also fold them on constants), and no
lowering of their own: the graph pass :mod:`polytf.passes.index_op_expansion` writes
each as compiled comparisons, selections and reductions over a constant array of positions
before fusion.

Sources: TensorFlow op definitions (tensorflow/core/ops/math_ops.cc: ``ArgMax``, ``ArgMin``;
tensorflow/core/ops/array_ops.cc: ``OneHot``):

* ``ArgMax(input: [D0, ..., Dn-1], dimension: scalar int) -> [D0, .., D{a-1}, D{a+1}, ..]``
  of ``output_type`` (int64 by default, or int32): the index of the first largest value
  along axis ``a`` (the first smallest for ``ArgMin``). The CPU kernel
  (tensorflow/core/kernels/argmax_op.cc, Eigen's ``ArgMaxTupleReducer``) starts from
  position 0 and the dtype's lowest value (highest for ``ArgMin``) and takes a value only
  when it is strictly larger: NaN never wins, and where no value is above ``lowest`` (all
  NaN or ``-inf``) the result is 0. An empty axis is an error.
* ``OneHot(indices: [I...] int, depth: scalar int, on_value, off_value; axis = -1)``: a new
  axis of size ``depth`` at ``axis`` (-1: last); ``on_value`` where the position equals the
  index, ``off_value`` elsewhere (an index outside ``[0, depth)`` gives a row of ``off_value``).
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.registry import ANY_DTYPE, REDUCTION, OpDefinition, register


def scalar_int(node, value, what: str) -> int:
    """One compile-time int32/int64 value.

    Raises:
        ShapeError: unknown at compile time, or not one integer.
    """
    if value is None:
        raise ShapeError(f"{node.op} node '{node.name}': {what} ('{node.inputs[1]}') must be a compile-time constant")
    value = np.asarray(value)
    if value.size != 1 or value.dtype.kind not in "iu":
        raise ShapeError(f"{node.op} node '{node.name}': {what} must be one int32/int64 value, got {value!r}")
    return int(value.reshape(-1)[0])


def dtype_limits(dtype) -> tuple[float | int, float | int]:
    """The lowest and highest finite values of a float or integer dtype
    (``numeric_limits<T>::lowest()`` and ``max()``)."""
    info = np.finfo(dtype) if np.dtype(dtype).kind == "f" else np.iinfo(dtype)
    return info.min, info.max


def arg_axis(node, rank: int, value) -> int:
    """The normalized ``dimension`` of an ArgMax/ArgMin.

    Raises:
        ShapeError: unknown at compile time, or outside ``[-rank, rank)``.
    """
    axis = scalar_int(node, value, "dimension")
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
    axis = arg_axis(node, x.rank, input_constants[1])
    if x.shape[axis] == 0:
        raise ShapeError(f"{node.op} node '{node.name}': the reduced axis {axis} of {x} is empty")
    output_type = node.attr("output_type", "int64")
    if output_type not in ("int32", "int64"):
        raise ShapeError(f"{node.op} node '{node.name}': output_type {output_type} is not int32 or int64")
    return (TensorType(x.shape[:axis] + x.shape[axis + 1 :], output_type),)


def reference_arg(node, inputs):
    """TensorFlow's CPU rule (module docstring): values not above the dtype's lowest (below
    its highest for ArgMin), NaN included, are taken as that bound; then the first extreme."""
    x = np.asarray(inputs[0])
    axis = arg_axis(node, x.ndim, inputs[1])
    lowest, highest = dtype_limits(x.dtype)
    with np.errstate(invalid="ignore"):
        if node.op == "ArgMax":
            positions = np.argmax(np.where(x > lowest, x, lowest), axis=axis)
        else:
            positions = np.argmin(np.where(x < highest, x, highest), axis=axis)
    return (np.asarray(positions, dtype=node.attr("output_type", "int64")),)


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
    depth = scalar_int(node, input_constants[1], "depth")
    if depth < 0:
        raise ShapeError(f"OneHot node '{node.name}': depth {depth} is negative")
    if on.dtype != off.dtype or on.rank or off.rank:
        raise ShapeError(f"OneHot node '{node.name}': on_value and off_value must be scalars of one dtype, got {on} and {off}")
    position = one_hot_position(node, indices.rank)
    return (TensorType(indices.shape[:position] + (depth,) + indices.shape[position:], on.dtype),)


def one_hot_position(node, rank: int) -> int:
    """Where OneHot's new axis goes in the output: ``axis``, or ``rank`` for ``axis = -1``.

    Raises:
        ShapeError: ``axis`` outside ``[-1, rank]``.
    """
    axis = int(node.attr("axis", -1))
    if not -1 <= axis <= rank:
        raise ShapeError(f"OneHot node '{node.name}': axis {axis} is out of range for indices of rank {rank}")
    return rank if axis == -1 else axis


def lower(node, inputs, outputs, context):
    """Not lowered directly.

    Raises:
        ShapeError: always; the index-op expansion pass should have replaced the node.
    """
    raise ShapeError(
        f"{node.op} node '{node.name}' is compiled as comparisons and reductions over positions: "
        "run polytf.passes.index_op_expansion.expand_index_ops (part of the graph optimizer) before lowering"
    )


def reference_one_hot(node, inputs):
    indices, depth, on, off = (np.asarray(v) for v in inputs)
    depth = int(depth)
    position = one_hot_position(node, indices.ndim)
    hot = np.expand_dims(indices, position) == np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - position))
    return (np.where(hot, on, off).astype(on.dtype),)


ARG_MAX = register(
    OpDefinition("ArgMax", REDUCTION, infer_arg, reference_arg, lower, source="tensorflow/core/ops/math_ops.cc: ArgMax", dtypes=("float32", "int32", "int64"), foldable=True)
)
ARG_MIN = register(
    OpDefinition("ArgMin", REDUCTION, infer_arg, reference_arg, lower, source="tensorflow/core/ops/math_ops.cc: ArgMin", dtypes=("float32", "int32", "int64"), foldable=True)
)
ONE_HOT = register(
    OpDefinition("OneHot", REDUCTION, infer_one_hot, reference_one_hot, lower, source="tensorflow/core/ops/array_ops.cc: OneHot", dtypes=ANY_DTYPE, foldable=True)
)
