"""The op table: every :class:`~polytf.ops.definition.OpDefinition` polytf supports, listed
explicitly from the op modules (each defines its definitions as module constants; importing
one has no side effect), and the queries over it.

Semantics follow TensorFlow's op definitions (tensorflow/core/ops/*.cc); each op module
cites its ops.
"""

from __future__ import annotations

from collections.abc import Sequence

from polytf.errors import UnsupportedOpError
from polytf.graph import Node
from polytf.ops import (
    band_part,
    batch_matmul,
    batch_norm,
    binary_math,
    bucketing,
    cast,
    comparison,
    concat,
    conv,
    conv_transpose,
    cumsum,
    depthwise_conv,
    einsum,
    elementwise,
    fill,
    float_checks,
    gather,
    grouped_conv,
    index_ops,
    logical,
    matmul,
    mirror_pad,
    pad,
    pooling,
    range,
    reductions,
    resize,
    reverse,
    roll,
    select,
    slicing,
    softmax,
    sources,
    space_batch,
    space_depth,
    split,
    static_shape,
    tile,
    top_k,
    transpose,
    unary,
    views,
)
from polytf.ops.definition import OpDefinition

#: Every supported op, grouped by module.
OP_DEFINITIONS: tuple[OpDefinition, ...] = (
    # sources and views: no code
    sources.PLACEHOLDER,
    sources.CONST,
    static_shape.SHAPE,
    views.IDENTITY,
    views.IDENTITY_N,
    views.STOP_GRADIENT,
    views.SNAPSHOT,
    views.RESHAPE,
    views.SQUEEZE,
    views.EXPAND_DIMS,
    views.NOOP,
    # element-wise
    elementwise.ADD_V2,
    elementwise.ADD,
    elementwise.SUB,
    elementwise.MUL,
    elementwise.SQUARED_DIFFERENCE,
    elementwise.BIAS_ADD,
    elementwise.RELU,
    *binary_math.DEFINITIONS.values(),
    binary_math.CLIP_BY_VALUE,
    *unary.DEFINITIONS.values(),
    *comparison.DEFINITIONS.values(),
    *logical.DEFINITIONS.values(),
    *select.DEFINITIONS.values(),
    *float_checks.DEFINITIONS.values(),
    float_checks.CHECK_NUMERICS,
    cast.CAST,
    fill.FILL,
    fill.ZEROS_LIKE,
    fill.ONES_LIKE,
    fill.BROADCAST_TO,
    batch_norm.FUSED_BATCH_NORM,
    batch_norm.FUSED_BATCH_NORM_V2,
    batch_norm.FUSED_BATCH_NORM_V3,
    # contractions
    matmul.MATMUL,
    batch_matmul.BATCH_MATMUL_V2,
    batch_matmul.BATCH_MATMUL_V3,
    einsum.EINSUM,
    conv.CONV2D,
    conv.CONV3D,
    grouped_conv.GROUPED_CONV2D,
    depthwise_conv.DEPTHWISE_CONV2D,
    # other reductions and data movement
    conv_transpose.CONV2D_BACKPROP_INPUT,
    conv_transpose.CONV3D_BACKPROP_INPUT,
    pooling.MAX_POOL,
    pooling.AVG_POOL,
    pooling.MAX_POOL_3D,
    pooling.AVG_POOL_3D,
    softmax.SOFTMAX,
    softmax.LOG_SOFTMAX,
    bucketing.BUCKETIZE,
    reductions.SUM,
    reductions.MEAN,
    reductions.MAX,
    reductions.MIN,
    reductions.PROD,
    reductions.ALL,
    reductions.ANY,
    cumsum.CUMSUM,
    top_k.TOP_K_V2,
    index_ops.ARG_MAX,
    index_ops.ARG_MIN,
    index_ops.ONE_HOT,
    band_part.MATRIX_BAND_PART,
    concat.CONCAT_V2,
    concat.CONCAT,
    pad.PAD,
    pad.PAD_V2,
    mirror_pad.MIRROR_PAD,
    slicing.SLICE,
    static_shape.STRIDED_SLICE,
    static_shape.PACK,
    split.SPLIT,
    split.SPLIT_V,
    split.UNPACK,
    gather.GATHER_V2,
    tile.TILE,
    transpose.TRANSPOSE,
    reverse.REVERSE_V2,
    roll.ROLL,
    range.RANGE,
    resize.RESIZE_NEAREST_NEIGHBOR,
    resize.RESIZE_BILINEAR,
    space_depth.DEPTH_TO_SPACE,
    space_depth.SPACE_TO_DEPTH,
    space_batch.SPACE_TO_BATCH_ND,
    space_batch.BATCH_TO_SPACE_ND,
)


def _index(definitions: Sequence[OpDefinition]) -> dict[str, OpDefinition]:
    table: dict[str, OpDefinition] = {}
    for definition in definitions:
        if definition.op in table:
            raise ValueError(f"op {definition.op} is defined twice in the op table")
        table[definition.op] = definition
    return table


#: op type -> its definition (built from :data:`OP_DEFINITIONS`).
OP_TABLE: dict[str, OpDefinition] = _index(OP_DEFINITIONS)


def lookup(op: str) -> OpDefinition | None:
    """The definition of ``op``, or None when polytf does not support it."""
    return OP_TABLE.get(op)


def supported_ops() -> tuple[str, ...]:
    """Every supported op type, sorted."""
    return tuple(sorted(OP_TABLE))


def check_supported(nodes: Sequence[Node]) -> None:
    """Raise :class:`UnsupportedOpError` listing every node whose op is not in the table."""
    missing = [(n.name, n.op) for n in nodes if n.op not in OP_TABLE]
    if missing:
        raise UnsupportedOpError(missing)


def convolution_ops() -> tuple[str, ...]:
    """The ops whose weight has a spatial window (``Conv2D``, ``DepthwiseConv2dNative``),
    sorted: the convolution layers of a profile."""
    return tuple(sorted(op for op, definition in OP_TABLE.items() if definition.weight_layout is not None and definition.weight_layout.is_convolution))


__all__ = ["OP_DEFINITIONS", "OP_TABLE", "check_supported", "convolution_ops", "lookup", "supported_ops"]
