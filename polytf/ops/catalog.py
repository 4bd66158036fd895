"""Imports every op module so that each registers itself in :mod:`polytf.ops.registry`."""

from polytf.ops import conv, elementwise, matmul, pooling, softmax, sources, views  # noqa: F401
