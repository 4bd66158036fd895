"""Buffers the generated kernels read and write: 64-byte aligned numpy arrays."""

from __future__ import annotations

import numpy as np

ALIGNMENT_BYTES = 64


def aligned_empty(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary
    (a cache line; a full AVX-512 vector)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    raw = np.empty(count * dtype.itemsize + ALIGNMENT_BYTES, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGNMENT_BYTES
    return raw[offset: offset + count * dtype.itemsize].view(dtype).reshape(shape)


def aligned_zeros(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    """Like :func:`aligned_empty`, filled with zeros."""
    result = aligned_empty(shape, dtype)
    result[...] = 0
    return result


def aligned_copy(value: np.ndarray, dtype: str = "float32") -> np.ndarray:
    result = aligned_empty(tuple(value.shape), dtype)
    result[...] = value
    return result
