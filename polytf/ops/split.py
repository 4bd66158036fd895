"""Multi-output splits: ``Split``, ``SplitV`` and ``Unpack``.

Sources: TensorFlow op definitions (tensorflow/core/ops/array_ops.cc):

* ``Split(axis, value)``, attr ``num_split = N``: ``value: [..., S, ...]`` cut along
  ``axis`` (a constant scalar in ``[-R, R)``) into ``N`` equal parts ``[..., S / N, ...]``;
* ``SplitV(value, size_splits, axis)``, attr ``num_split = N``: parts of the sizes in the
  constant vector ``size_splits`` (at most one ``-1``, which takes the rest);
* ``Unpack(value)``, attrs ``num = N`` and ``axis``: ``value: [..., N, ...]`` into ``N``
  tensors with that axis removed.

The lowering binds one output per node, so these ops have no lowering of their own: the
graph pass :func:`polytf.passes.multi_output.split_multi_output_ops` rewrites each into
one ``Slice`` (and, for ``Unpack``, a ``Reshape``) per used output before fusion. Their
shape rules and numpy references serve shape inference and constant folding.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_int
from polytf.ops.registry import ANY_DTYPE, REDUCTION, OpDefinition, register


def axis_of(node, rank: int, value) -> int:
    """The normalized axis.

    Raises:
        ShapeError: not a compile-time int scalar in ``[-rank, rank)``.
    """
    if value is None:
        raise ShapeError(f"{node.op} node '{node.name}': its axis input must be a compile-time constant")
    value = np.asarray(value)
    if value.dtype.kind not in "iu" or value.size != 1:
        raise ShapeError(f"{node.op} node '{node.name}': axis must be an int32/int64 scalar, got {value!r}")
    axis = int(value.reshape(-1)[0])
    if not -rank <= axis < rank:
        raise ShapeError(f"{node.op} node '{node.name}': axis {axis} is out of range for an input of rank {rank} (allowed: [{-rank}, {rank}))")
    return axis % rank


def split_sizes(node, shape, constants) -> tuple[int, tuple[int, ...]]:
    """``(axis, sizes of the parts along it)`` of a Split or SplitV; for Unpack, sizes of 1.

    Args:
        shape: the shape of ``value``.
        constants: the node's inputs' compile-time values (None where unknown).

    Raises:
        ShapeError: unknown or out-of-range axis; sizes that do not add up to the axis size.
    """
    rank = len(shape)
    if node.op == "Split":
        axis = axis_of(node, rank, constants[0])
        parts = attr_int(node, "num_split")
        extent = shape[axis]
        if parts < 1 or extent is None or extent % parts:
            raise ShapeError(f"Split node '{node.name}': dimension {axis} of size {extent} does not split into num_split={parts} equal parts")
        return axis, (extent // parts,) * parts
    if node.op == "SplitV":
        axis = axis_of(node, rank, constants[2])
        if constants[1] is None:
            raise ShapeError(f"SplitV node '{node.name}': its size_splits input must be a compile-time constant")
        sizes = [int(s) for s in np.asarray(constants[1]).reshape(-1)]
        extent = shape[axis]
        unknown = [k for k, s in enumerate(sizes) if s == -1]
        if len(unknown) > 1 or any(s < -1 for s in sizes) or extent is None:
            raise ShapeError(f"SplitV node '{node.name}': size_splits {sizes} needs non-negative sizes with at most one -1 and a known axis size")
        if unknown:
            sizes[unknown[0]] = extent - (sum(sizes) + 1)
        if sum(sizes) != extent or min(sizes, default=0) < 0:
            raise ShapeError(f"SplitV node '{node.name}': size_splits {sizes} do not add up to the size {extent} of dimension {axis}")
        count = attr_int(node, "num_split", len(sizes))
        if count != len(sizes):
            raise ShapeError(f"SplitV node '{node.name}': num_split={count} but size_splits has {len(sizes)} entries")
        return axis, tuple(sizes)
    axis = attr_int(node, "axis", 0)
    if not -rank <= axis < rank:
        raise ShapeError(f"Unpack node '{node.name}': axis {axis} is out of range for an input of rank {rank}")
    axis %= rank
    count = attr_int(node, "num", shape[axis])
    if shape[axis] != count:
        raise ShapeError(f"Unpack node '{node.name}': num={count} but dimension {axis} has size {shape[axis]}")
    return axis, (1,) * count


def value_index(node) -> int:
    """Position of the ``value`` input (``Split`` has the axis first)."""
    return 1 if node.op == "Split" else 0


def _check_count(node, count: int) -> None:
    expected = 1 if node.op == "Unpack" else 3 if node.op == "SplitV" else 2
    if count != expected:
        names = {"Split": "(axis, value)", "SplitV": "(value, size_splits, axis)", "Unpack": "(value)"}[node.op]
        raise ShapeError(f"{node.op} node '{node.name}' takes {expected} input{'s' if expected > 1 else ''} {names}, got {count}")


def infer(node, input_types, input_constants):
    """``value: [..., S, ...] -> N x [..., s_k, ...]`` (Unpack: the axis removed), value's dtype.

    Raises:
        ShapeError: see :func:`split_sizes`.
    """
    _check_count(node, len(input_types))
    x = input_types[value_index(node)]
    axis, sizes = split_sizes(node, x.shape, input_constants)
    outputs = []
    for size in sizes:
        shape = list(x.shape)
        if node.op == "Unpack":
            del shape[axis]
        else:
            shape[axis] = size
        outputs.append(TensorType(tuple(shape), x.dtype))
    return tuple(outputs)


def reference(node, inputs):
    _check_count(node, len(inputs))
    x = np.asarray(inputs[value_index(node)])
    axis, sizes = split_sizes(node, x.shape, [None if k == value_index(node) else v for k, v in enumerate(inputs)])
    parts = np.split(x, np.cumsum(sizes)[:-1].astype(int), axis=axis) if sizes else []
    if node.op == "Unpack":
        parts = [np.squeeze(p, axis=axis) for p in parts]
    return tuple(np.array(p) for p in parts)


def lower(node, inputs, outputs, context):
    """Not lowered directly.

    Raises:
        ShapeError: always; the split rewriting pass should have replaced the node.
    """
    raise ShapeError(
        f"{node.op} node '{node.name}' has several outputs and is lowered as one Slice per output: "
        "run polytf.passes.multi_output.split_multi_output_ops (part of the graph optimizer) before lowering"
    )


_DTYPES = ANY_DTYPE
SPLIT = register(OpDefinition("Split", REDUCTION, infer, reference, lower, data_inputs=(1,), source="tensorflow/core/ops/array_ops.cc: Split", dtypes=_DTYPES, foldable=True))
SPLIT_V = register(OpDefinition("SplitV", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/array_ops.cc: SplitV", dtypes=_DTYPES, foldable=True))
UNPACK = register(OpDefinition("Unpack", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/array_ops.cc: Unpack", dtypes=_DTYPES, foldable=True))
