"""Ops that turn values into positions or positions into values: ``ArgMax``, ``ArgMin`` and
``OneHot``: shape inference, numpy references (which also fold them on constants), and no
lowering of their own: their expansion rules (below; applied by the graph pass
:mod:`polytf.passes.expansion` before fusion) write each as compiled comparisons,
selections and reductions over a constant array of positions.

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
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.ops.expansion import Expansion, GraphBuilder, NodeAdder, lowered_by_expansion


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


#: not lowered directly: the expansion pass replaces the node first
lower = lowered_by_expansion("is compiled as comparisons and reductions over positions")


def reference_one_hot(node, inputs):
    indices, depth, on, off = (np.asarray(v) for v in inputs)
    depth = int(depth)
    position = one_hot_position(node, indices.ndim)
    hot = np.expand_dims(indices, position) == np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - position))
    return (np.where(hot, on, off).astype(on.dtype),)


# --- expansion -----------------------------------------------------------------------
#
# Statement bodies read array elements, not iterator values, so an op that compares values
# with *positions* is written as ops polytf compiles, with the positions as a constant array
# ``P = [0, 1, ..., N - 1]`` shaped to broadcast along the axis (numpy/TF broadcasting).
#
# ``ArgMax(x, axis)``, for ``x: [..., N, ...]`` (``ArgMin``: ``Less``, highest, ``Min``)::
#
#     v = SelectV2(Greater(x, lowest), x, lowest)            # NaN and -inf become lowest
#     m = Max(v, axis, keep_dims=True)                        # [..., 1, ...]
#     y = Min(SelectV2(Equal(v, m), P, N), axis)              # the first position of m
#
# This is TensorFlow's CPU kernel's rule (module docstring): the first position of the
# largest value; NaN never wins; where no value is above ``lowest`` the result is 0 (every
# ``v`` is ``lowest`` then). Replacing NaN before the ``Max`` also keeps NaN out of the
# reduction (which propagates it, as TensorFlow's ``Max``); ``m`` is one of the values of
# ``v``, so some position always matches.
#
# ``OneHot(indices, depth, on, off, axis)``, for ``indices: [I...]`` of rank ``R`` and the new
# axis at ``a`` (``axis = -1``: ``a = R``)::
#
#     e = Reshape(indices, I[:a] + [1] + I[a:])
#     y = SelectV2(Equal(e, P), on, off)                      # P: [depth, 1 (R - a times)]
#
# An index outside ``[0, depth)`` equals no position, so its row is ``off``, as in TensorFlow
# (tensorflow/core/kernels/one_hot_op.h). The expanded node keeps its name (its last op).


def expand_arg(node, builder: GraphBuilder) -> dict[int, str] | None:
    """``ArgMax``/``ArgMin`` as comparisons, selections and reductions (see above); None
    when the input's type is not static."""
    x = builder.type_of(node.inputs[0]) if node.inputs else None
    if x is None or not x.is_static:
        return None
    build = NodeAdder(builder, node)
    axis = arg_axis(node, x.rank, builder.constant_value(node.inputs[1]))
    extent = int(x.shape[axis])
    index_dtype = node.attr("output_type", "int64")
    lowest, highest = dtype_limits(x.dtype)
    is_max = node.op == "ArgMax"
    value_type, bool_type = TensorType(tuple(x.shape), x.dtype), TensorType(tuple(x.shape), "bool")
    bound = build.constant("bound", np.asarray(lowest if is_max else highest, x.dtype))
    inside = build.op("inside", "Greater" if is_max else "Less", (node.inputs[0], bound), bool_type, T=x.dtype)
    clamped = build.op("clamped", "SelectV2", (inside, node.inputs[0], bound), value_type, T=x.dtype)
    axis_tensor = build.constant("axis", np.asarray([axis], np.int32))
    reduced_shape = tuple(1 if k == axis else d for k, d in enumerate(x.shape))
    extreme = build.op("extreme", "Max" if is_max else "Min", (clamped, axis_tensor), TensorType(reduced_shape, x.dtype), T=x.dtype, keep_dims=True)
    is_extreme = build.op("is_extreme", "Equal", (clamped, extreme), bool_type, T=x.dtype)
    positions = build.constant("positions", np.arange(extent, dtype=index_dtype).reshape((extent,) + (1,) * (x.rank - 1 - axis)))
    past_the_end = build.constant("past_the_end", np.asarray(extent, index_dtype))
    candidates = build.op("candidates", "SelectV2", (is_extreme, positions, past_the_end), TensorType(tuple(x.shape), index_dtype), T=index_dtype)
    result_shape = tuple(d for k, d in enumerate(x.shape) if k != axis)
    return {0: build.op(None, "Min", (candidates, axis_tensor), TensorType(result_shape, index_dtype), T=index_dtype, keep_dims=False)}


def expand_one_hot(node, builder: GraphBuilder) -> dict[int, str] | None:
    """``OneHot`` as an equality with positions and a selection (see above); None when the
    indices' type is not static."""
    indices = builder.type_of(node.inputs[0]) if node.inputs else None
    if indices is None or not indices.is_static:
        return None
    build = NodeAdder(builder, node)
    depth = scalar_int(node, builder.constant_value(node.inputs[1]), "depth")
    position = one_hot_position(node, indices.rank)
    expanded_shape = tuple(indices.shape[:position]) + (1,) + tuple(indices.shape[position:])
    shape_tensor = build.constant("shape", np.asarray(expanded_shape, np.int32))
    expanded = build.op("expanded", "Reshape", (node.inputs[0], shape_tensor), TensorType(expanded_shape, indices.dtype), T=indices.dtype, Tshape="int32")
    positions = build.constant("positions", np.arange(depth, dtype=indices.dtype).reshape((depth,) + (1,) * (indices.rank - position)))
    output_shape = tuple(indices.shape[:position]) + (depth,) + tuple(indices.shape[position:])
    hot = build.op("hot", "Equal", (expanded, positions), TensorType(output_shape, "bool"), T=indices.dtype)
    value_dtype = builder.type_of(node.inputs[2]).dtype
    return {0: build.op(None, "SelectV2", (hot, node.inputs[2], node.inputs[3]), TensorType(output_shape, value_dtype), T=value_dtype)}


_ARG_EXPANSION = Expansion(expand_arg, "comparisons, selections and reductions")
ARG_MAX = OpDefinition(
    "ArgMax", REDUCTION, infer_arg, reference_arg, lower, source="tensorflow/core/ops/math_ops.cc: ArgMax", dtypes=("float32", "int32", "int64"), foldable=True,
    arity=Arity(2, 2), expand=_ARG_EXPANSION,
)
ARG_MIN = OpDefinition(
    "ArgMin", REDUCTION, infer_arg, reference_arg, lower, source="tensorflow/core/ops/math_ops.cc: ArgMin", dtypes=("float32", "int32", "int64"), foldable=True,
    arity=Arity(2, 2), expand=_ARG_EXPANSION,
)
ONE_HOT = OpDefinition(
    "OneHot", REDUCTION, infer_one_hot, reference_one_hot, lower, source="tensorflow/core/ops/array_ops.cc: OneHot", dtypes=ANY_DTYPE, foldable=True,
    arity=Arity(4, 4), expand=Expansion(expand_one_hot, "an equality with positions and a selection"),
)
