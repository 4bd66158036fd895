"""Run-time index checks: an embedding lookup's ids are checked before its kernel runs."""

from __future__ import annotations

import numpy as np

from polytf.errors import IndexOutOfRangeError


def check_indices(indices: np.ndarray, extent: int, node: str) -> None:
    """Raise IndexOutOfRangeError when an index of a run-time gather lies outside ``[0, extent)``,
    as TensorFlow's CPU kernel does (tensorflow/core/kernels/gather_op.cc)."""
    if indices.size == 0:
        return
    low, high = int(indices.min()), int(indices.max())
    if low >= 0 and high < extent:
        return
    bad = np.argwhere((indices < 0) | (indices >= extent))[0]
    position = ", ".join(str(int(i)) for i in bad)
    raise IndexOutOfRangeError(
        f"GatherV2 node '{node}': indices[{position}] = {int(indices[tuple(bad)])} is not in [0, {extent}); "
        "the kernel was not run (polytf never reads outside a table)"
    )


__all__ = ["check_indices"]
