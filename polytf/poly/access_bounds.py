"""The memory a kernel may touch, from its access relations.

For every array ``A`` of shape ``[n_0, ..., n_{k-1}]``, the union of the images of
the iteration domains under the statements' access relations to ``A`` (reads and
writes) must lie inside the box ``{ A[i] : 0 <= i_j < n_j }``; then a row-major
buffer that reaches the element after the lexicographically largest element touched
(the largest address, since every index lies inside the box) is large enough for every
address the kernel computes: ``n_0 * ... * n_{k-1}`` elements when the kernel touches the
last one, fewer for an array that is a window of a bigger buffer (a slab of a
concatenation, :mod:`polytf.plan.buffer_placement`, whose shape is the buffer's and whose
first element is the slab's). The runtime checks each buffer against these sizes before it
hands the buffer to native code (:mod:`polytf.runtime.cpu.argument_table`).

An index read at run time (an embedding lookup's ids: a :class:`~polytf.poly.expression.Gather`)
has no static bound: :func:`run_time_index_checks` names the arrays the runtime checks
against their tables' extents before the kernel runs (:mod:`polytf.runtime.index_checks`).

Source: access relations and their images, isl manual ("Sets and Relations",
``isl_union_set_apply``); a violation is reported as one sample point
(``isl_set_sample_point``), not as the whole set.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from polytf.errors import PolyhedralError
from polytf.islpy_on_demand import isl
from polytf.poly.expression import Gather, Load, subexpressions
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import box_set


def array_box(info: ArrayInfo) -> isl.Set:
    """``{ A[i_0, ..., i_{k-1}] : 0 <= i_j < n_j }`` for an array ``A`` of shape ``[n_j]``."""
    return box_set(info.name, tuple(f"i{k}" for k in range(len(info.shape))), tuple(int(s) for s in info.shape))


def array_bytes(info: ArrayInfo) -> int:
    """Bytes of a row-major array of ``info.shape`` and ``info.dtype`` (one element for a scalar)."""
    return math.prod(int(extent) for extent in info.shape) * np.dtype(info.dtype).itemsize


@lru_cache(maxsize=512)
def required_bytes(scop: Scop) -> tuple[int, ...]:
    """Bytes each array of ``scop`` needs (``scop.arrays`` order), after checking that
    every access stays inside its array's shape.

    Args:
        scop: a Scop whose accesses are affine or quasi-affine (floor division and
            remainder by constants), e.g. a kernel after data-layout transformations.

    Returns:
        the bytes up to and including the last element (lexicographically) that the
        kernel touches in each array (module docstring); :func:`array_bytes` for an array
        it does not touch.

    Raises:
        PolyhedralError: an access reaches outside its array (a polytf bug in a lowering
            or a data-layout transformation); the message names the statement, the
            array and one offending element.
    """
    boxes = {info.name: array_box(info) for info in scop.arrays}
    last: dict[str, int] = {}  # array -> the largest row-major index touched
    for statement in scop.statements:
        for access in (statement.write, *statement.reads):
            box = boxes.get(access.array)
            if box is None:
                raise PolyhedralError(f"kernel {scop.name}: statement {statement.name} accesses {access.array}, which is not one of its arrays")
            touched = statement.access_map(access).range()
            outside = touched.subtract(box)
            if not outside.is_empty():
                raise PolyhedralError(
                    f"kernel {scop.name}: statement {statement.name} (node '{statement.node}') accesses {access} outside "
                    f"{access.array}{list(scop.array(access.array).shape)}, e.g. at {outside.sample_point()}"
                )
            if not touched.is_empty():
                last[access.array] = max(last.get(access.array, -1), _row_major_index(touched.lexmax().sample_point(), scop.array(access.array).shape))
    return tuple(
        (last[info.name] + 1) * np.dtype(info.dtype).itemsize if info.name in last else array_bytes(info) for info in scop.arrays
    )


def _row_major_index(point: isl.Point, shape: tuple[int, ...]) -> int:
    """The row-major position of ``point`` (an element inside an array of ``shape``)."""
    index = 0
    for position, extent in enumerate(shape):
        index = index * int(extent) + point.get_coordinate_val(isl.dim_type.set, position).to_python()
    return index


def run_time_index_checks(scop: Scop) -> tuple[tuple[str, int, str], ...]:
    """``(index array, table extent, node)`` of every gather of ``scop`` whose index is read
    at run time, once each: the runtime checks those arrays before the kernel runs."""
    checks = (
        (expr.index.access.array, expr.extent, expr.node or statement.node)
        for statement in scop.statements
        for expr in subexpressions(statement.value)
        if isinstance(expr, Gather) and isinstance(expr.index, Load)
    )
    return tuple(dict.fromkeys(checks))


__all__ = ["array_box", "array_bytes", "required_bytes", "run_time_index_checks"]
