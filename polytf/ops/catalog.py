"""Imports every op module so that each registers itself in :mod:`polytf.ops.registry`."""

from polytf.ops import (  # noqa: F401
    batch_matmul,
    batch_norm,
    cast,
    concat,
    conv,
    depthwise_conv,
    einsum,
    elementwise,
    gather,
    matmul,
    pad,
    pooling,
    reductions,
    softmax,
    sources,
    static_shape,
    transpose,
    unary,
    views,
)
