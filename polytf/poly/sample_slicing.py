"""Sample slicing: a kernel at batch size ``N`` as the kernel at a smaller batch size ``b``
run on ``N / b`` consecutive slices of its arrays.

A model with a ``None`` batch (:mod:`polytf.compiler.dynamic_model`) is lowered at each size
it is called with, and most of its kernels then differ from the same kernel at the smallest
size only in the batch extent: ``Conv2D`` over ``S[d0, d1, d2, d3, r0, r1, r2]`` with
``0 <= d0 < N`` reads ``X[d0, ...]`` and writes ``Y[d0, ...]``, and sample ``n`` of ``Y``
depends on sample ``n`` of ``X`` alone. Such a kernel is *sample-separable*: running the
kernel compiled for ``b`` samples once per slice of ``b`` samples (each array's pointer
moved on by ``b`` samples) computes exactly what the kernel at ``N`` computes, so one
compiled object serves every size that ``b`` divides (:mod:`polytf.runtime.cpu.sliced_kernel`).

:func:`sample_slicing` decides this from the two Scops alone, by structure:

- the Scops have the same statements, arrays and ops, apart from sizes;
- each array is either the same in both, or *sliced*: its leading dimension is ``count``
  times the base's (``N * u`` rows against ``b * u``, e.g. a ``[N * S, D]`` matrix), its
  other dimensions equal;
- each statement is the same in both but for its first iterator's extent, which is
  ``count`` times the base's, and its constraints do not name that iterator;
- every access of a sliced array indexes its leading dimension with exactly the first
  iterator, and no other dimension with it; no access of an unsliced array uses the first
  iterator; every statement writes a sliced array.

Together: in ``{ S[i0, ...] -> A[i0, ...] }`` the iteration points with ``i0`` in slice
``k`` (``k*b*u <= i0 < (k+1)*b*u``) touch the rows of slice ``k`` of each sliced array and
nothing of another slice, and read the unsliced arrays (the weights) the same way for
every slice, so the slices are independent and each is the base kernel's computation
shifted by ``k * b * u`` rows (the dependences of the kernel at ``N`` never cross a slice;
isl manual, "Dependence Analysis": a shift of the first iterator and the first index
together is an isomorphism of the access relations). Anything else (a reduction over the
batch, a transpose that moves the batch, a gather along it) is refused: the caller then
compiles the kernel at ``N`` as a static model would.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import numpy as np

from polytf.poly.affine import AffineExpr, DynamicIndex, FloorDiv, IndexExpr, Modulo, substitute
from polytf.poly.expression import Access, Expr, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import Statement

__all__ = ["SampleSlicing", "sample_slicing"]


@dataclass(frozen=True)
class SampleSlicing:
    """How a kernel runs as its base kernel on slices (:func:`sample_slicing`).

    Attributes:
        count: calls of the base kernel, one per slice (``N / b``; at least 2).
        strides: for each array of the Scop (its order), the bytes between the addresses two
            consecutive calls give it: a slice of a sliced array, 0 for an array every call
            reads whole (a weight).
    """

    count: int
    strides: tuple[int, ...]


def sample_slicing(scop: Scop, base: Scop) -> SampleSlicing | None:
    """How ``scop`` (a kernel at batch size ``N``) runs as ``base`` (the same kernel lowered
    at a batch size ``b`` dividing ``N``) on ``N / b`` slices, or None when it cannot (the
    conditions of the module docstring; also when the two are the same size).

    Args:
        scop: the kernel at the larger size.
        base: the kernel the same model gave at the smaller size.
    """
    if scop.name != base.name or scop.ops != base.ops or len(scop.statements) != len(base.statements) or len(scop.arrays) != len(base.arrays):
        return None
    counts: set[int] = set()
    strides = []
    for array, base_array in zip(scop.arrays, base.arrays):
        stride = _slice_stride(array, base_array, counts)
        if stride is None:
            return None
        strides.append(stride)
    if len(counts) != 1:
        return None
    count = counts.pop()
    sliced = {base_array.name: int(base_array.shape[0]) for base_array, stride in zip(base.arrays, strides) if stride}
    for statement, base_statement in zip(scop.statements, base.statements):
        if not _statement_sliced(statement, base_statement, count, sliced):
            return None
    return SampleSlicing(count, tuple(strides))


def _slice_stride(array: ArrayInfo, base: ArrayInfo, counts: set[int]) -> int | None:
    """Bytes of one slice of ``array`` (0 when it is the same array at both sizes; the count
    of slices added to ``counts``), or None when its shapes are not a slicing."""
    if (array.name, array.dtype, array.role, array.tensor) != (base.name, base.dtype, base.role, base.tensor):
        return None
    if tuple(array.shape) == tuple(base.shape):
        return 0
    if len(array.shape) != len(base.shape) or not array.shape or tuple(array.shape[1:]) != tuple(base.shape[1:]):
        return None
    rows, base_rows = int(array.shape[0]), int(base.shape[0])
    if base_rows <= 0 or rows % base_rows or rows // base_rows < 2:
        return None
    counts.add(rows // base_rows)
    return base_rows * math.prod(int(d) for d in array.shape[1:]) * np.dtype(array.dtype).itemsize


def _statement_sliced(statement: Statement, base: Statement, count: int, sliced: dict[str, int]) -> bool:
    """Whether ``statement`` is ``base`` over ``count`` times its first iterator's extent,
    touching each sliced array's slice by that iterator alone (module docstring); ``sliced``:
    each sliced array's rows at the base size, which must be the base's first extent (so
    that slice ``k`` of the iterations is slice ``k`` of the rows)."""
    if not statement.iterators or statement.extents[0] != count * base.extents[0] or statement.extents[1:] != base.extents[1:]:
        return False
    first = statement.iterators[0]
    if base.extents[0] == 1:  # the base's first iterator is 0: broadcast weights may index by it
        base = dataclasses.replace(base, value=_first_iterator_zero(base.value, first, sliced))
    if dataclasses.replace(base, extents=statement.extents) != statement:
        return False
    if any(re.search(rf"\b{re.escape(first)}\b", constraint) for constraint in statement.constraints):
        return False
    if statement.write.array not in sliced:
        return False
    accesses = (statement.write, *statement.reads)
    if any(access.array in sliced and sliced[access.array] != base.extents[0] for access in accesses):
        return False
    return all(_access_sliced(access, first, access.array in sliced) for access in accesses)


def _first_iterator_zero(expr: Expr, first: str, sliced: dict[str, int]) -> Expr:
    """``expr`` with ``first`` replaced by 0 in the indices of the unsliced arrays it reads:
    where the base runs one row, lowering may index a broadcast operand of one row
    (``B[d0, 0, d2]``, a ``[1, 1, C]`` weight) by the iterator it indexes by 0 at other
    sizes."""
    if isinstance(expr, Load):
        if expr.access.array in sliced:
            return expr
        return Load(Access(expr.access.array, tuple(_index_zero(index, first) for index in expr.access.index)))
    return expr.map_children(lambda child: _first_iterator_zero(child, first, sliced))


def _index_zero(index: IndexExpr, first: str) -> IndexExpr:
    if isinstance(index, DynamicIndex) or first not in index.iterators:
        return index
    if isinstance(index, (FloorDiv, Modulo)):
        return type(index)(_index_zero(index.numerator, first), index.divisor)
    return substitute(index, {name: AffineExpr() if name == first else AffineExpr.of(name) for name in index.iterators})


def _access_sliced(access: Access, first: str, sliced: bool) -> bool:
    """Whether ``access`` uses ``first`` only as the whole leading index of a sliced array."""
    rest = access.index[1:] if sliced else access.index
    if any(first in index.iterators for index in rest):
        return False
    return not sliced or (bool(access.index) and access.index[0] == AffineExpr.of(first))
