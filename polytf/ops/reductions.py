"""Reductions over axes: ``Sum``, ``Mean``, ``Max``, ``Min``, ``Prod``, ``All``, ``Any``.

Source: TensorFlow op definitions ``Sum``, ``Mean``, ``Max``, ``Min``, ``Prod``, ``All``, ``Any``
(tensorflow/core/ops/math_ops.cc, "REGISTER_OP(...).Input("reduction_indices: Tidx")")
and their kernels (tensorflow/core/kernels/reduction_ops_common.h):

* inputs ``input: [D0, ..., Dn-1]`` and ``reduction_indices``, a scalar or vector of
  int32/int64 axes in ``[-n, n)`` (negative axes count from the end), which polytf needs
  as a compile-time constant; duplicates are an error, as in TensorFlow;
* attr ``keep_dims`` (default False): reduced axes stay as size 1, else they are removed;
* ``Sum`` of no elements is 0, ``Prod`` 1, ``Max`` is ``-inf``, ``Min`` ``+inf``, ``Mean``
  is NaN; integer ``Mean`` (compile-time constants only) divides with truncation toward zero;
* float ``Max``/``Min`` are NaN where a reduced element is NaN (Eigen's ``MaxReducer`` with
  ``PropagateNaN``: the ``maximum``/``minimum`` of :mod:`polytf.poly.expression`); ``Sum``
  and ``Mean`` are NaN where ``+inf`` meets ``-inf``;
* ``All`` and ``Any`` reduce bool tensors (logical and / or; of no elements True / False).

Lowering, with ``d*`` iterators over the output and ``r0..`` over the reduced axes (in
input order); the input is read at ``X[...]`` with ``r_j`` at reduced axis ``j`` and the
matching output iterator elsewhere:

* ``Sum``: ``Y[d] = 0``; ``Y[d] = Y[d] + X[d, r]``
* ``Max``: ``Y[d] = -inf``; ``Y[d] = maximum(Y[d], X[d, r])``; ``Min`` likewise with ``+inf``, ``minimum``
  (integer tensors start from the dtype's lowest / highest value instead)
* ``Prod``: ``Y[d] = 1``; ``Y[d] = Y[d] * X[d, r]``
* ``All``: ``Y[d] = true``; ``Y[d] = Y[d] and X[d, r]``; ``Any`` likewise with ``false``, ``or``
* ``Mean``: ``T[d] = 0``; ``T[d] = T[d] + X[d, r]``; ``Y[d] = T[d] / N`` with ``N`` the
  number of reduced elements (``T`` a kernel temporary, so that only reductions read the
  element they write, as in :mod:`polytf.ops.softmax`).

With no axes to reduce the op is a copy ``Y[d] = X[d]``.
"""

from __future__ import annotations

import itertools

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_bool
from polytf.ops.definition import REDUCTION, Arity, OpDefinition
from polytf.poly.expression import Access, Binary, Constant, Load, Logical
from polytf.poly.statement import Statement


def _keep_dims(node) -> bool:
    return attr_bool(node, "keep_dims", False)


def reduction_axes(node, rank: int, indices) -> tuple[int, ...]:
    """The sorted, non-negative axes of ``reduction_indices``.

    Raises:
        ShapeError: an axis outside ``[-rank, rank)``, a repeated axis, or indices of rank > 1.
    """
    values = np.asarray(indices)
    if values.ndim > 1:
        raise ShapeError(f"{node.op} node '{node.name}': reduction_indices must be a scalar or a vector, got shape {values.shape}")
    if values.size and not np.issubdtype(values.dtype, np.integer):
        raise ShapeError(f"{node.op} node '{node.name}': reduction_indices must be integers, got dtype {values.dtype}")
    axes = []
    for axis in values.reshape(-1).tolist():
        if not -rank <= axis < rank:
            raise ShapeError(f"{node.op} node '{node.name}': reduction axis {axis} is out of range for an input of rank {rank}")
        axis = axis + rank if axis < 0 else axis
        if axis in axes:
            raise ShapeError(f"{node.op} node '{node.name}': reduction axis {axis} appears twice in {values.tolist()}")
        axes.append(axis)
    return tuple(sorted(axes))


def _output_shape(shape, axes, keep_dims: bool) -> tuple:
    if keep_dims:
        return tuple(1 if axis in axes else size for axis, size in enumerate(shape))
    return tuple(size for axis, size in enumerate(shape) if axis not in axes)


def infer(node, input_types, input_constants):
    """``input: [D...]`` -> the reduced shape, same dtype.

    Raises:
        ShapeError: not two inputs, ``reduction_indices`` unknown at compile time, or bad axes.
    """
    if len(input_types) != 2:
        raise ShapeError(f"{node.op} takes 2 inputs (input, reduction_indices), got {len(input_types)}")
    x = input_types[0]
    indices = input_constants[1]
    if indices is None:
        raise ShapeError(
            f"{node.op} node '{node.name}': reduction_indices '{node.inputs[1]}' must be a compile-time constant "
            "(polytf builds the loop nest from the reduced axes)"
        )
    axes = reduction_axes(node, x.rank, indices)
    return (TensorType(_output_shape(x.shape, axes, _keep_dims(node)), x.dtype),)


def reference(node, inputs):
    """numpy reduction; float32 accumulated in float64 and rounded; integers keep their dtype."""
    x, indices = np.asarray(inputs[0]), inputs[1]
    axes = reduction_axes(node, x.ndim, indices)
    keep = _keep_dims(node)
    if node.op in ("All", "Any"):
        if x.dtype != np.bool_:
            raise ShapeError(f"{node.op} node '{node.name}': input must be bool, got {x.dtype.name}")
        return (np.asarray((np.all if node.op == "All" else np.any)(x, axis=axes, keepdims=keep), dtype=np.bool_),)
    if np.issubdtype(x.dtype, np.integer):
        if node.op in ("Max", "Min"):
            return ((np.max if node.op == "Max" else np.min)(x, axis=axes, keepdims=keep),)
        if node.op == "Prod":
            return (np.asarray(np.prod(x.astype(np.int64), axis=axes, keepdims=keep), dtype=x.dtype),)
        total = np.sum(x.astype(np.int64), axis=axes, keepdims=keep)
        if node.op == "Mean":
            count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
            total = np.where(total < 0, -(-total // count), total // count)
        return (np.asarray(total, dtype=x.dtype),)
    value = np.asarray(x, dtype=np.float32).astype(np.float64)
    with np.errstate(invalid="ignore"):
        if node.op == "Max":
            result = np.max(value, axis=axes, keepdims=keep, initial=-np.inf)
        elif node.op == "Min":
            result = np.min(value, axis=axes, keepdims=keep, initial=np.inf)
        elif node.op == "Prod":
            result = np.prod(value, axis=axes, keepdims=keep)
        elif node.op == "Sum":
            result = np.sum(value, axis=axes, keepdims=keep)
        else:
            result = np.mean(value, axis=axes, keepdims=keep) if value.size else np.full(_output_shape(x.shape, axes, keep), np.nan)
    return (np.asarray(result, dtype=np.float32),)


def _axes_for_lowering(node, input_shape, output_shape, context) -> tuple[int, ...]:
    """Reduced axes: from the compile-time value of ``reduction_indices`` in
    ``context.constants`` when the lowering driver provides it, else from the shapes when
    they determine the result (always with ``keep_dims``).

    Raises:
        ShapeError: no constant and the shapes are ambiguous (e.g. ``[2, 2] -> [2]``).
    """
    constants = getattr(context, "constants", None) or {}
    if len(node.inputs) > 1 and node.inputs[1] in constants:
        return reduction_axes(node, len(input_shape), constants[node.inputs[1]])
    rank = len(input_shape)
    if _keep_dims(node):
        # a size-1 axis gives the same result whether it is reduced or not
        return tuple(axis for axis in range(rank) if input_shape[axis] != output_shape[axis])
    candidates = [
        axes for axes in itertools.combinations(range(rank), rank - len(output_shape)) if _output_shape(input_shape, axes, False) == tuple(output_shape)
    ]
    if len(candidates) != 1:
        raise ShapeError(
            f"{node.op} node '{node.name}': the lowering needs the compile-time value of reduction_indices '{node.inputs[1]}' "
            f"(the shapes {list(input_shape)} -> {list(output_shape)} allow several sets of axes); "
            "the lowering driver must set LoweringContext.constants"
        )
    return candidates[0]


def lower(node, inputs, outputs, context):
    (x,) = inputs
    (y,) = outputs
    axes = _axes_for_lowering(node, x.shape, y.shape, context)
    keep = _keep_dims(node)
    output_iterators = tuple(f"d{i}" for i in range(len(y.shape)))
    reduction_iterators = tuple(f"r{j}" for j in range(len(axes)))
    index = []
    kept = iter(output_iterators)
    for axis in range(len(x.shape)):
        if axis in axes:
            index.append(reduction_iterators[axes.index(axis)])
            if keep:
                next(kept)
        else:
            index.append(next(kept))
    source = Load(Access.of(x.name, *index))
    out = Access.of(y.name, *output_iterators)

    def statement(iterators, extents, write, value):
        return Statement(context.statement_name(), tuple(iterators), tuple(extents), write, value, node=node.name, op=node.op)

    if not axes:
        return [statement(output_iterators, y.shape, out, source)]
    full_iterators = output_iterators + reduction_iterators
    full_extents = y.shape + tuple(x.shape[a] for a in axes)
    if node.op in ("Max", "Min"):
        initial, combine = (float("-inf"), "maximum") if node.op == "Max" else (float("inf"), "minimum")
        start = Constant(initial)
        if y.type.dtype in ("int32", "int64"):  # no infinities: the dtype's extremes
            limits = np.iinfo(y.type.dtype)
            start = Constant(int(limits.min if node.op == "Max" else limits.max), y.type.dtype)
        return [
            statement(output_iterators, y.shape, out, start),
            statement(full_iterators, full_extents, out, Binary(combine, Load(out), source)),
        ]
    if node.op in ("All", "Any"):
        start, combine = (Constant(1, "bool"), "and") if node.op == "All" else (Constant(0, "bool"), "or")
        return [statement(output_iterators, y.shape, out, start), statement(full_iterators, full_extents, out, Logical(combine, Load(out), source))]
    if node.op == "Prod":
        return [statement(output_iterators, y.shape, out, Constant(1.0)), statement(full_iterators, full_extents, out, Binary("mul", Load(out), source))]
    if node.op == "Sum":
        return [statement(output_iterators, y.shape, out, Constant(0.0)), statement(full_iterators, full_extents, out, Binary("add", Load(out), source))]
    total = Access.of(context.temporary(y.shape).name, *output_iterators)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    return [
        statement(output_iterators, y.shape, total, Constant(0.0)),
        statement(full_iterators, full_extents, total, Binary("add", Load(total), source)),
        statement(output_iterators, y.shape, out, Binary("div", Load(total), Constant(float(count)))),
    ]


def _define(op: str, dtypes: tuple[str, ...] = ("float32", "int32", "int64")) -> OpDefinition:
    return OpDefinition(
        op, REDUCTION, infer, reference, lower, data_inputs=(0,), source=f"tensorflow/core/ops/math_ops.cc: {op}", dtypes=dtypes, foldable=True, arity=Arity(2, 2),
        reduces_axes=True,
    )


SUM = _define("Sum")
MEAN = _define("Mean")
MAX = _define("Max")
MIN = _define("Min")
PROD = _define("Prod")
ALL = _define("All", ("bool",))
ANY = _define("Any", ("bool",))
