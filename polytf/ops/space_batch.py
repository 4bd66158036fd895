"""``SpaceToBatchND`` and ``BatchToSpaceND``: moving blocks of spatial positions into the batch
and back, any number ``M >= 1`` of spatial dimensions.

Source: TensorFlow op definitions ``SpaceToBatchND`` and ``BatchToSpaceND``
(tensorflow/core/ops/array_ops.cc) and their CPU kernels (tensorflow/core/kernels/
spacetobatch_functor.h, spacetobatch_op.cc, batchtospace_op.cc). Inputs ``block_shape``
(int32/int64 ``[M]``, entries ``B_k >= 1``) and ``paddings`` / ``crops`` (int32/int64
``[M, 2]``, non-negative) must be compile-time constants in polytf. With the input
``[N, S_1, ..., S_M, R...]`` (``R``: the remaining dimensions, channels in NHWC) and the block
offsets ``o = (o_1, ..., o_M)``, ``0 <= o_k < B_k``, numbered row-major
``q(o) = (...(o_1*B_2 + o_2)*B_3 + ...) + o_M``:

* ``SpaceToBatchND``: zero-pad dimension ``k`` by ``paddings[k] = (p_k, p'_k)`` to
  ``P_k = S_k + p_k + p'_k`` (divisible by ``B_k``), then
  ``[N, S_1, ..., R] -> [N * prod(B), P_1/B_1, ..., P_M/B_M, R]``,
  ``Y[q(o)*N + n, i_1, ..., i_M, r] = X[n, B_1*i_1 + o_1 - p_1, ..., B_M*i_M + o_M - p_M, r]``
  (0 where an index falls in the padding);
* ``BatchToSpaceND``: the inverse, then crop dimension ``k`` by ``crops[k] = (c_k, c'_k)``:
  ``[N * prod(B), S_1, ..., R] -> [N, B_1*S_1 - c_1 - c'_1, ..., R]``,
  ``Y[n, B_1*i_1 + o_1 - c_1, ..., r] = X[q(o)*N + n, i_1, ..., i_M, r]``.

TensorFlow writes a dilated convolution as ``SpaceToBatchND -> Conv2D (VALID) ->
BatchToSpaceND`` (tensorflow/python/ops/nn_ops.py, ``with_space_to_batch``);
:mod:`polytf.passes.dilation_folding` folds that pattern back into one convolution with
``dilations``, and these lowerings run the ops that do not fold.

Lowering, one copy statement per block offset ``o`` (``prod(B)`` statements), each affine:

* ``SpaceToBatchND`` over the output slab of ``o`` (iterators ``d0`` = ``n``, ``d1..dM`` =
  ``i``, then ``R``): ``Y[q(o)*N + d0, d1, ...] = X[d0, B_1*d1 + o_1 - p_1, ...]`` on the
  box of ``d_k`` whose input index lies in ``[0, S_k)``, and ``Y[...] = 0`` on the rest of the
  slab (the padding; a statement only where there is some), as :mod:`polytf.ops.pad` does;
* ``BatchToSpaceND`` over the input slab of ``o``, writing through the strided index
  ``Y[d0, B_1*d1 + o_1 - c_1, ...] = X[q(o)*N + d0, d1, ...]`` on the box of ``d_k`` whose
  output index survives the crop: the output position is affine in the input iterators, not in
  the output's (as :mod:`polytf.ops.space_depth`'s ``DepthToSpace``).

REDUCTION category: both read their input at other indices than they write.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.constant_inputs import constant_input
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.ops.traits import SpaceBatchMove
from polytf.poly.affine import AffineExpr
from polytf.poly.expression import Access, Constant, Load
from polytf.poly.statement import Statement

SPACE_TO_BATCH = "SpaceToBatchND"
BATCH_TO_SPACE = "BatchToSpaceND"


@dataclass(frozen=True)
class BlockGeometry:
    """Sizes of one ``SpaceToBatchND`` / ``BatchToSpaceND`` node (module docstring).

    Attributes:
        block: ``(B_1, ..., B_M)``.
        amounts: ``((p_k, p'_k), ...)``: the paddings (to batch) or the crops (to space).
        input_shape: the input's static shape.
        output_shape: the output's static shape.
    """

    block: tuple[int, ...]
    amounts: tuple[tuple[int, int], ...]
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]

    @property
    def blocks(self) -> int:
        """``prod(B)``: how many block offsets (batch entries per input batch entry)."""
        return int(np.prod(self.block, dtype=np.int64))

    @property
    def offsets(self) -> list[tuple[int, tuple[int, ...]]]:
        """``(q(o), o)`` for every block offset ``o``, in row-major order."""
        return list(enumerate(itertools.product(*(range(b) for b in self.block))))


def _integers(node, value, what: str, shape: tuple[int | None, ...]) -> np.ndarray:
    """``value`` as an int64 array of ``shape`` (None: any length).

    Raises:
        ShapeError: unknown at compile time, not integer, or of another shape.
    """
    if value is None:
        raise ShapeError(
            f"{node.op} node '{node.name}': its {what} input must be a compile-time constant; polytf does not support data-dependent shapes"
        )
    value = np.asarray(value)
    if value.dtype.kind not in "iu":
        raise ShapeError(f"{node.op} node '{node.name}': {what} must be int32 or int64, got {value.dtype.name}")
    if value.ndim != len(shape) or any(want is not None and got != want for got, want in zip(value.shape, shape)):
        expected = "[" + ", ".join("M" if want is None else str(want) for want in shape) + "]"
        raise ShapeError(f"{node.op} node '{node.name}': {what} must have shape {expected}, got {list(value.shape)}")
    return value.astype(np.int64)


def block_geometry(node, input_type: TensorType, block_value, amounts_value) -> BlockGeometry:
    """Check ``node``'s constant inputs against its input type and compute its output shape.

    Args:
        node: a ``SpaceToBatchND`` or ``BatchToSpaceND`` node.
        input_type: its data input's type (static shape).
        block_value: the ``block_shape`` value (``[M]``), None when not constant.
        amounts_value: the ``paddings`` / ``crops`` value (``[M, 2]``), None when not constant.

    Raises:
        ShapeError: non-constant or malformed ``block_shape``/``paddings``/``crops``, a block
            entry below 1, a negative padding or crop, an input of rank below ``M + 1`` or of
            unknown size, a padded size the block does not divide (to batch), a batch the
            blocks do not divide or crops larger than the dimension (to space).
    """
    to_batch = node.op == SPACE_TO_BATCH
    amounts_name = "paddings" if to_batch else "crops"
    block = _integers(node, block_value, "block_shape", (None,))
    spatial = len(block)
    amounts = _integers(node, amounts_value, amounts_name, (spatial, 2))
    if spatial < 1 or np.any(block < 1):
        raise ShapeError(
            f"{node.op} node '{node.name}': block_shape must hold at least one entry, each >= 1, got {block.tolist()}"
        )
    if np.any(amounts < 0):
        raise ShapeError(f"{node.op} node '{node.name}': {amounts_name} must be non-negative, got {amounts.tolist()}")
    shape = input_type.shape
    if len(shape) < spatial + 1 or any(size is None for size in shape):
        raise ShapeError(
            f"{node.op} node '{node.name}': the input must be a static tensor of rank >= {spatial + 1} (batch and {spatial} spatial dimensions), got {input_type}"
        )
    batch, sizes, remaining = shape[0], shape[1 : spatial + 1], tuple(shape[spatial + 1 :])
    blocks = int(np.prod(block))
    if to_batch:
        padded = [size + int(before) + int(after) for size, (before, after) in zip(sizes, amounts)]
        for k, (size, width, b) in enumerate(zip(sizes, padded, block)):
            if width % b:
                raise ShapeError(
                    f"SpaceToBatchND node '{node.name}': spatial dimension {k + 1} of size {size} padded by {amounts[k].tolist()} to {width} "
                    f"is not divisible by block_shape[{k}] = {int(b)}"
                )
        output = (batch * blocks, *(width // int(b) for width, b in zip(padded, block)), *remaining)
    else:
        if batch % blocks:
            raise ShapeError(
                f"BatchToSpaceND node '{node.name}': batch {batch} is not divisible by the product of block_shape {block.tolist()} = {blocks}"
            )
        spaced = []
        for k, (size, (before, after), b) in enumerate(zip(sizes, amounts, block)):
            full = size * int(b)
            if before + after > full:
                raise ShapeError(
                    f"BatchToSpaceND node '{node.name}': crops {amounts[k].tolist()} exceed spatial dimension {k + 1} of size {full}"
                )
            spaced.append(full - int(before) - int(after))
        output = (batch // blocks, *spaced, *remaining)
    pairs = tuple((int(before), int(after)) for before, after in amounts)
    return BlockGeometry(tuple(int(b) for b in block), pairs, tuple(shape), tuple(output))


def _check_input_count(node, count: int) -> None:
    if count != 3:
        names = "(input, block_shape, paddings)" if node.op == SPACE_TO_BATCH else "(input, block_shape, crops)"
        raise ShapeError(f"{node.op} node '{node.name}' takes 3 inputs {names}, got {count}")


def infer(node, input_types, input_constants):
    """``[N, S_1..S_M, R] ->`` the moved shape (module docstring), the input's dtype.

    Raises:
        ShapeError: see :func:`block_geometry`.
    """
    _check_input_count(node, len(input_types))
    x = input_types[0]
    return (TensorType(block_geometry(node, x, input_constants[1], input_constants[2]).output_shape, x.dtype),)


def reference(node, inputs):
    """numpy: pad, split each spatial dimension into ``(size/B, B)``, move the ``B`` axes in
    front of the batch and flatten them into it (to batch); the inverse, then crop (to space)."""
    _check_input_count(node, len(inputs))
    x = np.asarray(inputs[0])
    g = block_geometry(node, TensorType(x.shape, x.dtype.name), inputs[1], inputs[2])
    spatial = len(g.block)
    remaining = x.shape[spatial + 1 :]
    if node.op == SPACE_TO_BATCH:
        padded = np.pad(x, ((0, 0), *g.amounts, *((0, 0),) * len(remaining)))
        split = padded.reshape(
            (x.shape[0], *itertools.chain.from_iterable((size // b, b) for size, b in zip(padded.shape[1:], g.block)), *remaining)
        )
        order = (
            *(2 + 2 * k for k in range(spatial)),
            0,
            *(1 + 2 * k for k in range(spatial)),
            *range(1 + 2 * spatial, split.ndim),
        )
        return (np.ascontiguousarray(split.transpose(order)).reshape(g.output_shape),)
    batch = g.output_shape[0]
    split = x.reshape((*g.block, batch, *x.shape[1:]))
    order = (
        spatial,
        *itertools.chain.from_iterable((spatial + 1 + k, k) for k in range(spatial)),
        *range(2 * spatial + 1, split.ndim),
    )
    full = np.ascontiguousarray(split.transpose(order)).reshape(
        (batch, *(size * b for size, b in zip(x.shape[1 : spatial + 1], g.block)), *remaining)
    )
    window = tuple(slice(before, full.shape[1 + k] - after) for k, (before, after) in enumerate(g.amounts))
    return (np.ascontiguousarray(full[(slice(None), *window)]),)


def _surviving_range(extent: int, block: int, offset: int, shift: int, size: int) -> tuple[int, int]:
    """``[low, high)``: the iterator values ``d`` in ``[0, extent)`` whose index
    ``block*d + offset - shift`` lies in ``[0, size)`` (``low == high``: none)."""
    low = max(0, -(-(shift - offset) // block))
    high = min(extent, -(-(size + shift - offset) // block))
    return low, max(low, high)


def lower(node, inputs, outputs, context):
    """``prod(B)`` copy statements (and padding statements for ``SpaceToBatchND``), module
    docstring; ``block_shape`` and ``paddings``/``crops`` come from ``context.constants``."""
    (x,) = inputs
    (y,) = outputs
    g = block_geometry(
        node, x.type, constant_input(node, context, 1, "block_shape"), constant_input(node, context, 2, "paddings or crops")
    )
    spatial = len(g.block)
    iterators = tuple(f"d{k}" for k in range(len(x.shape)))
    spatial_iterators = iterators[1 : spatial + 1]
    to_batch = node.op == SPACE_TO_BATCH
    # to batch: iterate over the output slab of one offset and read the (padded) input;
    # to space: iterate over the input slab of one offset and write the (cropped) output.
    slab = (y if to_batch else x).shape
    spaced = (x if to_batch else y).shape
    batch = slab[0] // g.blocks if to_batch else spaced[0]
    extents = (batch, *slab[1:])
    statements = []
    for q, offset in g.offsets:
        strided = [
            AffineExpr.combine((b, it), constant=o - shift)
            for it, b, o, (shift, _) in zip(spatial_iterators, g.block, offset, g.amounts)
        ]
        blocked = (AffineExpr.combine((1, "d0"), constant=q * batch), *map(AffineExpr.of, iterators[1:]))
        spaced_index = (AffineExpr.of("d0"), *strided, *map(AffineExpr.of, iterators[spatial + 1 :]))
        ranges = [
            _surviving_range(extent, b, o, shift, size)
            for extent, b, o, (shift, _), size in zip(slab[1:], g.block, offset, g.amounts, spaced[1:])
        ]
        inside = tuple(
            f"{low} <= {it} < {high}"
            for it, (low, high), extent in zip(spatial_iterators, ranges, slab[1:])
            if (low, high) != (0, extent)
        )
        has_inside = all(high > low for low, high in ranges) and all(extents)
        if to_batch:
            write, source = Access(y.name, blocked), Access(x.name, spaced_index)
            outside = [
                f"{it} < {low} or {it} >= {high}"
                for it, (low, high), extent in zip(spatial_iterators, ranges, slab[1:])
                if (low, high) != (0, extent)
            ]
            if outside and all(extents):
                constraints = (f"({' or '.join(outside)})",) if has_inside else ()
                statements.append(
                    Statement(context.statement_name(), iterators, extents, write, Constant(0.0), constraints, node.name, node.op)
                )
        else:
            write, source = Access(y.name, spaced_index), Access(x.name, blocked)
        if has_inside:
            statements.append(
                Statement(context.statement_name(), iterators, extents, write, Load(source), inside, node.name, node.op)
            )
    return statements


SPACE_TO_BATCH_ND = OpDefinition(
    SPACE_TO_BATCH,
    REDUCTION,
    infer,
    reference,
    lower,
    data_inputs=(0,),
    source="tensorflow/core/ops/array_ops.cc: SpaceToBatchND",
    dtypes=ANY_DTYPE,
    arity=Arity(3, 3),
    space_batch=SpaceBatchMove(to_batch=True),
)
BATCH_TO_SPACE_ND = OpDefinition(
    BATCH_TO_SPACE,
    REDUCTION,
    infer,
    reference,
    lower,
    data_inputs=(0,),
    source="tensorflow/core/ops/array_ops.cc: BatchToSpaceND",
    dtypes=ANY_DTYPE,
    arity=Arity(3, 3),
    space_batch=SpaceBatchMove(to_batch=False),
)
