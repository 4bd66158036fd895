"""``MirrorPad``: padding with a reflection of the tensor's own border.

Source: TensorFlow op definition ``MirrorPad`` (tensorflow/core/ops/array_ops.cc) and
``tf.raw_ops.MirrorPad``:

* ``MirrorPad(input, paddings)``, attr ``mode`` in ``REFLECT``, ``SYMMETRIC``: ``input:
  [S0, ..., S{R-1}]``, ``paddings`` an int32/int64 ``[R, 2]`` constant ``(b_k, a_k)``;
  output ``[S_k + b_k + a_k ...]``;
* ``REFLECT`` mirrors without repeating the border (``[1, 2, 3]`` padded by 2 on both sides:
  ``[3, 2, 1, 2, 3, 2, 1]``; ``b_k, a_k <= S_k - 1``); ``SYMMETRIC`` repeats it
  (``[2, 1, 1, 2, 3, 3, 2]``; ``b_k, a_k <= S_k``).

Lowering: along axis ``k`` an output index ``d`` lies in one of three regions, and the
source index is affine in each (``e = 1`` for REFLECT, ``0`` for SYMMETRIC):

* before (``d < b``): ``b - d - 1 + e``;
* inside (``b <= d < b + S``): ``d - b``;
* after (``d >= b + S``): ``2S - 1 - e + b - d``.

One copy statement per combination of non-empty regions over all axes (``3^R`` at most;
axes without padding have the inside region only), each over the output iterators with its
region constraints: the writes are disjoint and cover the output. REDUCTION category.
"""

from __future__ import annotations

import itertools

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_string
from polytf.ops.constant_inputs import constant_input
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.ops.pad import paddings_of
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Load
from polytf.poly.statement import Statement


def _mode(node) -> str:
    return attr_string(node, "mode", allowed=("REFLECT", "SYMMETRIC"))


def checked_paddings(node, input_type: TensorType, value) -> tuple[tuple[int, int], ...]:
    """The ``(before, after)`` pairs.

    Raises:
        ShapeError: not constant, wrong shape, negative, or wider than the mode allows.
    """
    pairs = paddings_of(node, input_type, value)
    extra = 1 if _mode(node) == "REFLECT" else 0
    for axis, ((before, after), size) in enumerate(zip(pairs, input_type.shape)):
        if size is not None and max(before, after) > size - extra:
            raise ShapeError(
                f"MirrorPad node '{node.name}': paddings {[before, after]} on axis {axis} exceed what {_mode(node)} allows for size {size} "
                f"(at most {size - extra})"
            )
    return pairs


def infer(node, input_types, input_constants):
    """``input: [S...], paddings: [R, 2] -> [S_k + b_k + a_k ...]``, input's dtype.

    Raises:
        ShapeError: two inputs expected; see :func:`checked_paddings`.
    """
    if len(input_types) != 2:
        raise ShapeError(f"MirrorPad node '{node.name}' takes 2 inputs (input, paddings), got {len(input_types)}")
    x = input_types[0]
    pairs = checked_paddings(node, x, input_constants[1])
    return (TensorType(tuple(None if s is None else s + b + a for s, (b, a) in zip(x.shape, pairs)), x.dtype),)


def reference(node, inputs):
    x = np.asarray(inputs[0])
    pairs = checked_paddings(node, TensorType(x.shape, x.dtype.name), inputs[1])
    return (np.pad(x, pairs, mode="reflect" if _mode(node) == "REFLECT" else "symmetric"),)


def _regions(iterator: str, size: int, before: int, after: int, extra: int):
    """``(constraint or None, source index)`` for each non-empty region of one axis."""
    regions = []
    if before:
        regions.append((f"{iterator} < {before}", AffineExpr.combine((-1, iterator), constant=before - 1 + extra)))
    regions.append((f"{before} <= {iterator} < {before + size}" if before or after else None, AffineExpr.combine((1, iterator), constant=-before)))
    if after:
        regions.append((f"{iterator} >= {before + size}", AffineExpr.combine((-1, iterator), constant=2 * size - 1 - extra + before)))
    return regions


def lower(node, inputs, outputs, context):
    """One ``Y[d] = X[source(d)]`` statement per combination of regions (module docstring)."""
    (x,) = inputs
    (y,) = outputs
    pairs = checked_paddings(node, x.type, constant_input(node, context, 1, "paddings"))
    if not all(x.shape):
        return []
    extra = 1 if _mode(node) == "REFLECT" else 0
    iterators = tuple(f"d{k}" for k in range(len(y.shape)))
    out = Access.of(y.name, *iterators)
    per_axis = [_regions(it, size, before, after, extra) for it, size, (before, after) in zip(iterators, x.shape, pairs)]
    statements = []
    for combination in itertools.product(*per_axis):
        constraints = tuple(c for c, _ in combination if c is not None)
        source = Access.of(x.name, *(index for _, index in combination))
        statements.append(Statement(context.statement_name(), iterators, y.shape, out, Load(source), constraints, node.name, node.op))
    return statements


MIRROR_PAD = OpDefinition(
    "MirrorPad", REDUCTION, infer, reference, lower, data_inputs=(0,), source="tensorflow/core/ops/array_ops.cc: MirrorPad",
    dtypes=ANY_DTYPE, foldable=True, arity=Arity(2, 2),
)
