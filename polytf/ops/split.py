"""Multi-output splits: ``Split``, ``SplitV`` and ``Unpack``.

Sources: TensorFlow op definitions (tensorflow/core/ops/array_ops.cc):

* ``Split(axis, value)``, attr ``num_split = N``: ``value: [..., S, ...]`` cut along
  ``axis`` (a constant scalar in ``[-R, R)``) into ``N`` equal parts ``[..., S / N, ...]``;
* ``SplitV(value, size_splits, axis)``, attr ``num_split = N``: parts of the sizes in the
  constant vector ``size_splits`` (at most one ``-1``, which takes the rest);
* ``Unpack(value)``, attrs ``num = N`` and ``axis``: ``value: [..., N, ...]`` into ``N``
  tensors with that axis removed.

The lowering binds output 0 of each node only, so these ops have no lowering of their own:
their expansion rule (:func:`expand_split`, applied by the graph pass
:mod:`polytf.passes.expansion` before fusion) gives every output that some node reads its
own node, a ``Slice`` of the input (for ``Unpack`` then a ``Reshape`` dropping the unpacked
axis: a view, no run-time cost)::

    parts = Split(axis, x)            parts/part_0 = Slice(x, begin_0, size_0)
    y = Relu(parts:1)         ->      parts/part_1 = Slice(x, begin_1, size_1)
    z = Exp(parts:0)                  y = Relu(parts/part_1:0); z = Exp(parts/part_0:0)

Their shape rules and numpy references serve shape inference and constant folding.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops.attributes import attr_int
from polytf.ops.constant_inputs import axis_of
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.ops.expansion import Expansion, GraphBuilder, lowered_by_expansion


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


#: not lowered directly: the expansion pass replaces the node first
lower = lowered_by_expansion("has several outputs and is lowered as one Slice per output")


def expand_split(node, builder: GraphBuilder) -> dict[int, str] | None:
    """One ``Slice`` (``Unpack``: and a ``Reshape``) per output some node reads (module
    docstring); None when the input's type is not static.

    Raises:
        ShapeError: see :func:`split_sizes`.
    """
    value = node.inputs[value_index(node)] if len(node.inputs) > value_index(node) else None
    value_type = builder.type_of(value) if value is not None else None
    if value_type is None or not value_type.is_static:
        return None
    axis, sizes = split_sizes(node, value_type.shape, [builder.constant_value(t) for t in node.inputs])
    replacements: dict[int, str] = {}
    offset = 0
    for port, size in enumerate(sizes):
        begin, offset = offset, offset + size
        if not builder.is_read(node.output(port)):
            continue
        shape = list(value_type.shape)
        shape[axis] = size
        starts = [0] * len(shape)
        starts[axis] = begin
        part = builder.fresh_name(f"{node.name}/part_{port}")
        begin_tensor = builder.constant(f"{part}/begin", np.asarray(starts, np.int32))
        size_tensor = builder.constant(f"{part}/size", np.asarray(shape, np.int32))
        result = builder.add(Node(part, "Slice", (value, begin_tensor, size_tensor), attrs={"T": value_type.dtype, "Index": "int32"}), TensorType(tuple(shape), value_type.dtype))
        if node.op == "Unpack":
            del shape[axis]
            shape_tensor = builder.constant(f"{part}/shape", np.asarray(shape, np.int32))
            reshape = Node(builder.fresh_name(f"{part}/unpacked"), "Reshape", (result, shape_tensor), attrs={"T": value_type.dtype, "Tshape": "int32"})
            result = builder.add(reshape, TensorType(tuple(shape), value_type.dtype))
        replacements[port] = result
    return replacements


_SLICES = Expansion(expand_split, "one Slice per output")
SPLIT = OpDefinition(
    "Split", REDUCTION, infer, reference, lower, data_inputs=(1,), source="tensorflow/core/ops/array_ops.cc: Split", dtypes=ANY_DTYPE, foldable=True,
    arity=Arity(2, 2), expand=_SLICES,
)
SPLIT_V = OpDefinition(
    "SplitV", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/array_ops.cc: SplitV", dtypes=ANY_DTYPE, foldable=True,
    arity=Arity(3, 3), expand=_SLICES,
)
UNPACK = OpDefinition(
    "Unpack", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/array_ops.cc: Unpack", dtypes=ANY_DTYPE, foldable=True,
    arity=Arity(1, 1), expand=_SLICES,
)
