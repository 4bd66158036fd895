"""GatherV2: rows of a table picked by compile-time constant or run-time indices.

Source: TensorFlow op definition ``GatherV2`` (tensorflow/core/ops/array_ops.cc):
``params``: [P0, ..., P{A-1}, PA, P{A+1}, ...], ``indices``: int32/int64 of shape I,
``axis``: a scalar in ``[-rank(params), rank(params))`` ->
``output[p..., i..., q...] = params[p..., indices[i...], q...]``, of shape
``[P0, ..., P{A-1}, *I, P{A+1}, ...]``. Only ``batch_dims = 0`` is supported. On CPU
TensorFlow rejects an index outside ``[0, PA)`` (tensorflow/core/kernels/gather_op.cc);
so does polytf: at compile time for constant indices, before the kernel runs for run-time
ones (:class:`~polytf.errors.IndexOutOfRangeError`, naming the node and the index).

Lowering with constant indices (float32 ``params``): with the index iterators
``d{A}..d{A+Q-1}`` (``Q`` = rank of ``indices``) the flat position
``f = sum_j stride_j * d{A+j}`` of an index is affine. The flattened ``indices`` are cut
into maximal arithmetic runs ``v0, v0 + s, v0 + 2s, ...`` at positions ``[f0, f1)``; each
run is one statement ``Y[d...] = X[d0..d{A-1}, v0 + s * (f - f0), d{A+Q}...]`` over
``f0 <= f < f1``. An arithmetic progression (``range``, a constant, a single index) is
one statement.

Lowering with run-time indices (an embedding lookup on token ids): one statement
``Y[d...] = gather(X[d0..d{A-1}, ?, d{A+Q}...], I[d{A}..d{A+Q-1}])``
(:class:`~polytf.poly.expression.Gather`); the access relation of the table covers its
whole axis ``A``, and the generated code clamps each position into the table.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_int
from polytf.ops.constant_inputs import constant_input
from polytf.ops.definition import REDUCTION, Arity, OpDefinition
from polytf.poly.affine import AffineExpr, DynamicIndex
from polytf.poly.expression import Access, Gather, Load
from polytf.poly.statement import Statement


def _axis(node, rank: int, axis_value) -> int:
    if axis_value is None:
        raise ShapeError(f"GatherV2 node '{node.name}': axis ('{node.inputs[2]}') must be a compile-time constant")
    axis_value = np.asarray(axis_value)
    if axis_value.size != 1 or axis_value.dtype.kind not in "iu":
        raise ShapeError(f"GatherV2 node '{node.name}': axis must be a single int32/int64 value, got {axis_value!r}")
    axis = int(axis_value.reshape(-1)[0])
    if not -rank <= axis < rank:
        raise ShapeError(f"GatherV2 node '{node.name}': axis {axis} is out of range for params of rank {rank}")
    return axis % rank


def _check_batch_dims(node) -> None:
    batch_dims = attr_int(node, "batch_dims", 0)
    if batch_dims != 0:
        raise ShapeError(f"GatherV2 node '{node.name}' has batch_dims={batch_dims}; polytf supports batch_dims=0 only")


def _indices(node, indices_value, size: int) -> np.ndarray:
    if indices_value is None:
        raise ShapeError(
            f"GatherV2 node '{node.name}': indices ('{node.inputs[1]}') must be a compile-time constant; "
            "polytf does not support data-dependent gathers"
        )
    indices = np.asarray(indices_value)
    if indices.dtype.kind not in "iu":
        raise ShapeError(f"GatherV2 node '{node.name}': indices must be int32 or int64, got {indices.dtype.name}")
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        raise ShapeError(f"GatherV2 node '{node.name}': indices must lie in [0, {size}), got values from {indices.min()} to {indices.max()}")
    return indices.astype(np.int64)


def infer(node, input_types, input_constants):
    _check_batch_dims(node)
    if len(input_types) != 3:
        raise ShapeError(f"GatherV2 takes 3 inputs (params, indices, axis), got {len(input_types)}")
    params = input_types[0]
    if params.rank < 1:
        raise ShapeError(f"GatherV2 node '{node.name}' needs params of rank >= 1, got {params}")
    axis = _axis(node, params.rank, input_constants[2])
    if input_constants[1] is not None and params.shape[axis] is not None:
        indices_shape = _indices(node, input_constants[1], params.shape[axis]).shape
    else:
        indices_shape = input_types[1].shape
    return (TensorType(params.shape[:axis] + tuple(indices_shape) + params.shape[axis + 1:], params.dtype),)


def reference(node, inputs):
    _check_batch_dims(node)
    params = np.asarray(inputs[0])
    axis = _axis(node, params.ndim, inputs[2])
    indices = _indices(node, inputs[1], params.shape[axis])
    return (np.take(params, indices, axis=axis),)


def arithmetic_runs(values: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Maximal runs ``(first_position, end_position, first_value, step)`` of a 1-D int
    array in which consecutive values differ by ``step``."""
    runs = []
    start = 0
    count = len(values)
    while start < count:
        step = int(values[start + 1] - values[start]) if start + 1 < count else 0
        end = start + 1
        while end < count and int(values[end] - values[end - 1]) == step:
            end += 1
        runs.append((start, end, int(values[start]), step))
        start = end
    return runs


def lower(node, inputs, outputs, context):
    """One copy statement per arithmetic run of constant indices, or one gather statement
    for run-time indices."""
    params, index_array = inputs
    (y,) = outputs
    axis = _axis(node, len(params.shape), constant_input(node, context, 2, "axis"))
    if getattr(context, "constants", {}).get(node.inputs[1]) is None:
        return [_runtime_gather(node, params, index_array, y, axis, context)]
    indices = _indices(node, constant_input(node, context, 1, "indices"), params.shape[axis])
    iterators = tuple(f"d{p}" for p in range(len(y.shape)))
    index_iterators = iterators[axis:axis + indices.ndim]
    strides = [int(np.prod(indices.shape[j + 1:], dtype=np.int64)) for j in range(indices.ndim)]
    flat = AffineExpr.combine(*zip(strides, index_iterators))
    statements = []
    runs = arithmetic_runs(indices.reshape(-1))
    for first, end, value, step in runs:
        source = AffineExpr.combine((step, flat), constant=value - step * first)
        index = iterators[:axis] + (source,) + iterators[axis + indices.ndim:]
        constraints = () if len(runs) == 1 else (f"{first} <= {flat.to_isl()} < {end}",)
        statements.append(
            Statement(
                context.statement_name(),
                iterators,
                y.shape,
                Access.of(y.name, *iterators),
                Load(Access.of(params.name, *index)),
                constraints=constraints,
                node=node.name,
                op=node.op,
            )
        )
    return statements


def _runtime_gather(node, params, index_array, y, axis: int, context) -> Statement:
    """``Y[d...] = gather(X[d0..d{A-1}, ?, d{A+Q}...], I[d{A}..d{A+Q-1}])``."""
    if index_array.type.dtype not in ("int32", "int64"):
        raise ShapeError(f"GatherV2 node '{node.name}': indices must be int32 or int64, got {index_array.type.dtype}")
    iterators = tuple(f"d{p}" for p in range(len(y.shape)))
    rank = len(index_array.shape)
    table_index = iterators[:axis] + (DynamicIndex(params.shape[axis]),) + iterators[axis + rank:]
    value = Gather(Load(Access(params.name, tuple(AffineExpr.of(i) if isinstance(i, str) else i for i in table_index))), Load(Access.of(index_array.name, *iterators[axis:axis + rank])), node.name)
    return Statement(context.statement_name(), iterators, y.shape, Access.of(y.name, *iterators), value, node=node.name, op=node.op)


#: not element-wise: a copy that anchors its own group
GATHER_V2 = OpDefinition(
    "GatherV2", REDUCTION, infer, reference, lower, data_inputs=(0, 1), source="tensorflow/core/ops/array_ops.cc: GatherV2",
    dtypes=("float32", "int32", "int64"), foldable=True, arity=Arity(3, 3),
)
