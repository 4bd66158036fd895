"""``DepthToSpace`` and ``SpaceToDepth``: moving blocks between space and channels (NHWC).

Source: TensorFlow op definitions ``DepthToSpace`` and ``SpaceToDepth``
(tensorflow/core/ops/array_ops.cc), attrs ``block_size = b >= 2`` and ``data_format``
(polytf supports ``NHWC``, TensorFlow's only CPU layout):

* ``DepthToSpace``: ``[N, H, W, C] -> [N, H*b, W*b, C/(b*b)]`` (``C`` divisible by ``b*b``),
  ``Y[n, h*b + i, w*b + j, c] = X[n, h, w, (i*b + j)*C' + c]`` with ``C' = C/(b*b)``;
* ``SpaceToDepth``: ``[N, H, W, C] -> [N, H/b, W/b, C*b*b]`` (``H``, ``W`` divisible by
  ``b``), ``Y[n, h, w, (i*b + j)*C + c] = X[n, h*b + i, w*b + j, c]``.

Lowering, one copy statement per block offset ``(i, j)`` (``b*b`` statements), each affine:

* ``SpaceToDepth`` over the output iterators, restricted to the channel slab
  ``(i*b + j)*C <= d3 < (i*b + j + 1)*C``: ``Y[d] = X[d0, b*d1 + i, b*d2 + j, d3 - (i*b + j)*C]``;
* ``DepthToSpace`` over ``(n, h, w, c')`` (the input's space and the output's channels),
  writing through the affine, strided index ``Y[d0, b*d1 + i, b*d2 + j, d3] =
  X[d0, d1, d2, (i*b + j)*C' + d3]``: the output row ``h*b + i`` is not an affine function of
  the output iterators alone, but is one of ``(h, i)``.

REDUCTION category: both read their input at other indices than they write.
"""

from __future__ import annotations

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_int, attr_string
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.poly.affine import AffineExpr, FloorDiv
from polytf.poly.expression import Access, Load
from polytf.poly.statement import Statement


def block_of(node) -> int:
    """``block_size`` (checked ``>= 2``; NHWC only).

    Raises:
        ShapeError: a smaller block, or a data format other than NHWC.
    """
    block = attr_int(node, "block_size")
    if block < 2:
        raise ShapeError(f"{node.op} node '{node.name}': block_size must be at least 2, got {block}")
    data_format = attr_string(node, "data_format", "NHWC")
    if data_format != "NHWC":
        raise ShapeError(f"{node.op} node '{node.name}': data_format {data_format} is not supported; polytf supports NHWC (TensorFlow's CPU layout)")
    return block


def output_shape(node, shape) -> tuple[int, ...]:
    """The output shape of a ``[N, H, W, C]`` input.

    Raises:
        ShapeError: not rank 4, or sizes not divisible as the op needs.
    """
    block = block_of(node)
    if len(shape) != 4 or any(s is None for s in shape):
        raise ShapeError(f"{node.op} node '{node.name}': the input must be a static [N, H, W, C] tensor, got {list(shape)}")
    n, h, w, c = shape
    if node.op == "DepthToSpace":
        if c % (block * block):
            raise ShapeError(f"DepthToSpace node '{node.name}': channels {c} are not divisible by block_size^2 = {block * block}")
        return (n, h * block, w * block, c // (block * block))
    if h % block or w % block:
        raise ShapeError(f"SpaceToDepth node '{node.name}': height {h} and width {w} must be divisible by block_size {block}")
    return (n, h // block, w // block, c * block * block)


def infer(node, input_types, input_constants):
    """``[N, H, W, C] ->`` the rearranged shape (module docstring), input's dtype.

    Raises:
        ShapeError: see :func:`output_shape`.
    """
    if len(input_types) != 1:
        raise ShapeError(f"{node.op} node '{node.name}' takes 1 input, got {len(input_types)}")
    x = input_types[0]
    return (TensorType(output_shape(node, x.shape), x.dtype),)


def reference(node, inputs):
    x = np.asarray(inputs[0])
    block = block_of(node)
    n, h, w, c = x.shape
    shape = output_shape(node, x.shape)
    if node.op == "DepthToSpace":
        blocks = x.reshape(n, h, w, block, block, c // (block * block))
        return (np.ascontiguousarray(blocks.transpose(0, 1, 3, 2, 4, 5)).reshape(shape),)
    blocks = x.reshape(n, h // block, block, w // block, block, c)
    return (np.ascontiguousarray(blocks.transpose(0, 1, 3, 2, 4, 5)).reshape(shape),)


def lower(node, inputs, outputs, context):
    """``b*b`` copy statements (module docstring)."""
    (x,) = inputs
    (y,) = outputs
    block = block_of(node)
    iterators = ("d0", "d1", "d2", "d3")
    statements = []
    for i in range(block):
        for j in range(block):
            offset = i * block + j
            if node.op == "SpaceToDepth":
                channels = x.shape[3]
                source = Access.of(
                    x.name, "d0", AffineExpr.combine((block, "d1"), constant=i), AffineExpr.combine((block, "d2"), constant=j),
                    AffineExpr.combine((1, "d3"), constant=-offset * channels),
                )
                constraints = (f"{offset * channels} <= d3 < {(offset + 1) * channels}",)
                write, extents = Access.of(y.name, *iterators), y.shape
            else:
                channels = y.shape[3]
                source = Access.of(x.name, "d0", FloorDiv(AffineExpr.of("d1"), block), FloorDiv(AffineExpr.of("d2"), block), AffineExpr.combine((1, "d3"), constant=offset * channels))
                write, extents = Access.of(y.name, *iterators), y.shape
                constraints = (f"d1 mod {block} = {i}", f"d2 mod {block} = {j}")
            statements.append(Statement(context.statement_name(), iterators, extents, write, Load(source), constraints, node.name, node.op))
    return statements


DEPTH_TO_SPACE = OpDefinition(
    "DepthToSpace", REDUCTION, infer, reference, lower, source="tensorflow/core/ops/array_ops.cc: DepthToSpace", dtypes=ANY_DTYPE,
    arity=Arity(1, 1),
)
SPACE_TO_DEPTH = OpDefinition(
    "SpaceToDepth", REDUCTION, infer, reference, lower, source="tensorflow/core/ops/array_ops.cc: SpaceToDepth", dtypes=ANY_DTYPE,
    arity=Arity(1, 1),
)
