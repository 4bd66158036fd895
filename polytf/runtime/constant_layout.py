"""Data-layout copies of constants, run once when a model is built.

A kernel that packs a weight into register-tile panels (Goto & van de Geijn, TOMS 2008;
:mod:`polytf.schedules.data_layout`) would copy the same constant on every call. The
target leaves such copies out of the kernel (:attr:`CompiledKernel.constant_copies`);
this module runs them once with numpy and gives the packed arrays to the runtime, which
binds them as read-only arguments shared by every execution context. The copy statement
is evaluated exactly as generated code would: every point of its (box) domain writes
``P[write index] = A[read index]``, and the elements of ``P`` no point writes (the
padding of a last, partial panel) are zero, as in a freshly allocated scratch array.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from polytf.errors import ShapeError
from polytf.poly.expression import Load
from polytf.poly.statement import Statement
from polytf.runtime.buffers import aligned_empty
from polytf.targets.target import CompiledKernel

__all__ = ["evaluate_copy", "packed_constants"]


def evaluate_copy(copy: Statement, source: np.ndarray, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """The array ``copy`` writes, from its source array's value.

    Args:
        copy: a data-layout copy statement ``P[index(i)] = A[index'(i)]`` over the box
            ``0 <= i < extents`` (no guards).
        source: the value of ``A``.
        shape, dtype: ``P``'s shape and dtype.

    Returns:
        A new, 64-byte aligned, read-only array of ``shape``, zero where no point writes.

    Raises:
        ShapeError: the statement is not a plain copy of one array over a box (a polytf bug).
    """
    if copy.constraints or not isinstance(copy.value, Load):
        raise ShapeError(f"copy statement {copy.name} of node '{copy.node}' is not a plain copy over a box; it cannot run ahead of time")
    # one open grid per iterator (np.ogrid): index expressions broadcast to the box
    grids = np.ogrid[tuple(slice(0, extent) for extent in copy.extents)] if copy.extents else []
    point = dict(zip(copy.iterators, grids))
    read = tuple(np.asarray(index.evaluate(point)) for index in copy.value.access.index)
    write = tuple(np.asarray(index.evaluate(point)) for index in copy.write.index)
    result = aligned_empty(shape, dtype)
    result[...] = 0
    result[write] = np.asarray(source, dtype=dtype).reshape(source.shape)[read]
    result.flags.writeable = False
    return result


def packed_constants(kernel: CompiledKernel, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Scratch array name -> its value, for each of ``kernel``'s constant copies.

    Args:
        kernel: a compiled kernel.
        values: Scop array name -> value of each constant array its copies read.

    Raises:
        ShapeError: a copy reads an array that ``values`` does not have (a polytf bug).
    """
    arrays = {info.name: info for info in kernel.arrays}
    result = {}
    for copy in kernel.constant_copies:
        source = copy.value.access.array
        if source not in values:
            raise ShapeError(f"kernel {kernel.scop.name}: the packing of '{source}' needs its constant value, which the model does not have")
        target = arrays[copy.write.array]
        result[target.name] = evaluate_copy(copy, values[source], tuple(target.shape), target.dtype)
    return result
