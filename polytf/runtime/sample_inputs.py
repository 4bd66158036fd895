"""Seeded random inputs for a model's placeholders, for timing and tuning.

float32 inputs are standard normal; int32/int64 inputs are 0 or 1 (valid token ids of any
non-empty table, valid attention-mask values); bool inputs are fair coins.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from polytf.graph import TensorType

__all__ = ["sample_inputs"]


def sample_inputs(input_types: Mapping[str, TensorType], seed: int = 0) -> dict[str, np.ndarray]:
    """One array per placeholder, by name (shapes and dtypes from ``input_types``)."""
    rng = np.random.default_rng(seed)
    result = {}
    for name, tensor_type in input_types.items():
        shape, dtype = tuple(int(d) for d in tensor_type.shape), np.dtype(tensor_type.dtype)
        if dtype.kind == "b":
            result[name] = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            result[name] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            result[name] = rng.standard_normal(shape).astype(dtype)
    return result
