"""``ResizeNearestNeighbor`` and ``ResizeBilinear`` of NHWC images.

Sources: TensorFlow op definitions (tensorflow/core/ops/image_ops.cc) and their CPU kernels
(tensorflow/core/kernels/image/resize_nearest_neighbor_op.cc, resize_bilinear_op.cc,
image_resizer_state.h):

* ``images: [N, H, W, C]``, ``size``: an int32 ``[2]`` constant ``(H', W')`` ->
  ``[N, H', W', C]``; attrs ``align_corners`` and ``half_pixel_centers`` (not both);
* per axis (float32 arithmetic, as the kernels do): ``scale = (in - 1) / (out - 1)`` with
  ``align_corners`` (and ``out > 1``), else ``in / out``;
* nearest: ``src(y) = min(round(y * scale) if align_corners else floor(s(y)), in - 1)``,
  with ``s(y) = (y + 0.5) * scale`` under ``half_pixel_centers``, else ``y * scale``
  (``round`` is half away from zero); the result has the images' dtype;
* bilinear: ``v = (y + 0.5) * scale - 0.5`` under ``half_pixel_centers``, else ``y * scale``;
  ``lo = max(floor(v), 0)``, ``hi = min(ceil(v), in - 1)``, ``lerp = v - floor(v)``;
  ``top = X[lo_y, lo_x] + (X[lo_y, hi_x] - X[lo_y, lo_x]) * lerp_x``, ``bottom`` likewise on
  ``hi_y``, ``Y = top + (bottom - top) * lerp_y``; float32 output.

Lowering. The source indices are not affine in the output index, but they are piecewise
affine with a period: with ``in / out = a / b`` in lowest terms, ``src(y + b) = src(y) + a``
(in exact arithmetic). :func:`axis_pieces` computes, per axis, the kernels' float32 values
for every output index and cuts them into *pieces* ``y = p*q + y0`` (``q`` in ``[0, count)``)
on which ``lo = a*q + lo0``, ``hi = a*q + hi0`` and ``lerp`` are exactly what the kernel
computes (clamped borders and float32 rounding become pieces of their own). One statement
per (row piece, column piece) iterates the output ``(n, y, x, c)`` restricted to the piece
(``y0 <= y <= y0 + p_y*(count - 1)`` and ``y mod p_y = y0 mod p_y``, likewise ``x``) and
reads ``X[n, floor((a*y + p_y*lo0 - a*y0) / p_y), ..]`` (exact on the piece): every
statement writes the output at its own iterators, so they share one parallel band over the
output with each other and with fused element-wise consumers (a 2x bilinear upsampling of
``[1, 64, 64, 64]`` with a ReLU: 170-200 us as 16 separate loop nests over ``(n, q_y, q_x,
c)``, one thread). Ratios that would need more than
:data:`MAX_STATEMENTS` statements raise ShapeError (such a node can run on the host
through its numpy reference). REDUCTION category.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polytf.errors import ShapeError
from polytf.graph import TensorType
from polytf.ops.attributes import attr_bool
from polytf.ops.constant_inputs import constant_input
from polytf.ops.definition import ANY_DTYPE, REDUCTION, Arity, OpDefinition
from polytf.poly.affine import AffineExpr, FloorDiv
from polytf.poly.expression import Access, Binary, Constant, Load
from polytf.poly.statement import Statement

#: Most statements a resize is lowered to (row pieces x column pieces).
MAX_STATEMENTS = 256


def _attrs(node) -> tuple[bool, bool]:
    align = attr_bool(node, "align_corners", False)
    half = attr_bool(node, "half_pixel_centers", False)
    if align and half:
        raise ShapeError(f"{node.op} node '{node.name}': align_corners and half_pixel_centers cannot both be true (TensorFlow rejects it too)")
    return align, half


def _size(node, value) -> tuple[int, int]:
    if value is None:
        raise ShapeError(f"{node.op} node '{node.name}': its size input must be a compile-time constant; polytf does not support data-dependent shapes")
    value = np.asarray(value)
    if value.dtype.kind not in "iu" or value.shape != (2,) or np.any(value <= 0):
        raise ShapeError(f"{node.op} node '{node.name}': size must be an int32 vector of two positive sizes, got {value!r}")
    return int(value[0]), int(value[1])


def infer(node, input_types, input_constants):
    """``images: [N, H, W, C], size: [2] -> [N, H', W', C]``.

    Raises:
        ShapeError: two inputs expected; a non-static or non-rank-4 image; bad ``size`` or attrs.
    """
    if len(input_types) != 2:
        raise ShapeError(f"{node.op} node '{node.name}' takes 2 inputs (images, size), got {len(input_types)}")
    x = input_types[0]
    if x.rank != 4:
        raise ShapeError(f"{node.op} node '{node.name}': images must be [N, H, W, C], got {x}")
    _attrs(node)
    height, width = _size(node, input_constants[1])
    dtype = x.dtype if node.op == "ResizeNearestNeighbor" else "float32"
    return (TensorType((x.shape[0], height, width, x.shape[3]), dtype),)


def _scale(in_size: int, out_size: int, align: bool) -> np.float32:
    if align and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def source_indices(op: str, in_size: int, out_size: int, align: bool, half: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lo, hi, lerp)`` per output index, as TensorFlow's CPU kernels compute them
    (float32); nearest has ``hi == lo`` and ``lerp == 0``."""
    scale = _scale(in_size, out_size, align)
    y = np.arange(out_size, dtype=np.float32)
    if op == "ResizeNearestNeighbor":
        value = (y + np.float32(0.5)) * scale if half else y * scale
        index = np.floor(value.astype(np.float64) + 0.5) if align else np.floor(value)
        lo = np.minimum(index.astype(np.int64), in_size - 1)
        if half:
            lo = np.maximum(lo, 0)
        return lo, lo, np.zeros(out_size, np.float32)
    value = (y + np.float32(0.5)) * scale - np.float32(0.5) if half else y * scale
    floor = np.floor(value)
    lo = np.maximum(floor.astype(np.int64), 0)
    hi = np.minimum(np.ceil(value).astype(np.int64), in_size - 1)
    return lo, hi, (value - floor).astype(np.float32)


def reference(node, inputs):
    x = np.asarray(inputs[0])
    align, half = _attrs(node)
    height, width = _size(node, inputs[1])
    ly, hy, wy = source_indices(node.op, x.shape[1], height, align, half)
    lx, hx, wx = source_indices(node.op, x.shape[2], width, align, half)
    if node.op == "ResizeNearestNeighbor":
        return (np.array(x[:, ly][:, :, lx]),)
    x = x.astype(np.float32)
    wx = wx[None, None, :, None]
    top = x[:, ly][:, :, lx] + (x[:, ly][:, :, hx] - x[:, ly][:, :, lx]) * wx
    bottom = x[:, hy][:, :, lx] + (x[:, hy][:, :, hx] - x[:, hy][:, :, lx]) * wx
    return ((top + (bottom - top) * wy[None, :, None, None]).astype(np.float32),)


@dataclass(frozen=True)
class Piece:
    """Output indices ``period*q + start`` for ``q`` in ``[0, count)``, reading
    ``lo = step*q + lo``/``hi = step*q + hi`` with the constant ``lerp``."""

    period: int
    start: int
    count: int
    step: int
    lo: int
    hi: int
    lerp: float

    def constraints(self, iterator: str) -> tuple[str, ...]:
        """The output indices of the piece, as isl constraints on the output ``iterator``."""
        last = self.start + self.period * (self.count - 1)
        inside = (f"{self.start} <= {iterator} <= {last}",)
        return inside if self.period == 1 or self.count == 1 else (*inside, f"{iterator} mod {self.period} = {self.start % self.period}")

    def source(self, iterator: str, upper: bool) -> AffineExpr | FloorDiv:
        """``step*q + lo`` (``hi``) at the output index ``iterator = period*q + start``: a floor
        division by ``period`` that is exact on the piece."""
        first = self.hi if upper else self.lo
        if self.period == 1:
            return AffineExpr.combine((self.step, iterator), constant=first - self.step * self.start)
        return FloorDiv(AffineExpr.combine((self.step, iterator), constant=self.period * first - self.step * self.start), self.period)


def axis_pieces(lo: np.ndarray, hi: np.ndarray, lerp: np.ndarray, in_size: int) -> list[Piece]:
    """Cut one axis into pieces (module docstring): per residue of the period, maximal runs
    on which ``lo``, ``hi`` advance by the step and ``lerp`` stays."""
    out_size = len(lo)
    divisor = math.gcd(in_size, out_size)
    period, step = out_size // divisor, in_size // divisor
    pieces = []
    for start in range(min(period, out_size)):
        indices = list(range(start, out_size, period))
        run_start = 0
        for k in range(1, len(indices) + 1):
            first, current = indices[run_start], indices[k] if k < len(indices) else None
            same = current is not None and (
                lo[current] - lo[first] == step * (k - run_start) and hi[current] - hi[first] == step * (k - run_start) and lerp[current] == lerp[first]
            )
            if not same:
                pieces.append(Piece(period, first, k - run_start, step, int(lo[first]), int(hi[first]), float(lerp[first])))
                run_start = k
    return pieces


def _load(x, n, row, column, c):
    return Load(Access.of(x.name, n, row, column, c))


def _lerp(a, b, weight: float):
    """``a + (b - a) * weight`` (just ``a`` when the weight is 0)."""
    if weight == 0.0:
        return a
    return Binary("add", a, Binary("mul", Binary("sub", b, a), Constant(weight)))


def lower(node, inputs, outputs, context):
    """One statement per (row piece, column piece) (module docstring).

    Raises:
        ShapeError: more than :data:`MAX_STATEMENTS` statements would be needed.
    """
    (x,) = inputs
    (y,) = outputs
    align, half = _attrs(node)
    height, width = _size(node, constant_input(node, context, 1, "size"))
    rows = axis_pieces(*source_indices(node.op, x.shape[1], height, align, half), x.shape[1])
    columns = axis_pieces(*source_indices(node.op, x.shape[2], width, align, half), x.shape[2])
    if len(rows) * len(columns) > MAX_STATEMENTS:
        raise ShapeError(
            f"{node.op} node '{node.name}': resizing {list(x.shape[1:3])} to {[height, width]} has source indices that need "
            f"{len(rows)} x {len(columns)} affine pieces (more than {MAX_STATEMENTS}); polytf lowers ratios with a short period "
            "(e.g. integer factors); run this node on the host"
        )
    statements = []
    for row in rows:
        for column in columns:
            write = Access.of(y.name, "d0", "d1", "d2", "d3")
            r_lo, r_hi = row.source("d1", False), row.source("d1", True)
            c_lo, c_hi = column.source("d2", False), column.source("d2", True)
            top = _lerp(_load(x, "d0", r_lo, c_lo, "d3"), _load(x, "d0", r_lo, c_hi, "d3"), column.lerp)
            if row.lerp == 0.0:
                value = top
            else:
                bottom = _lerp(_load(x, "d0", r_hi, c_lo, "d3"), _load(x, "d0", r_hi, c_hi, "d3"), column.lerp)
                value = _lerp(top, bottom, row.lerp)
            constraints = (*row.constraints("d1"), *column.constraints("d2"))
            statements.append(Statement(context.statement_name(), ("d0", "d1", "d2", "d3"), y.shape, write, value, constraints, node.name, node.op))
    return statements


RESIZE_NEAREST_NEIGHBOR = OpDefinition(
    "ResizeNearestNeighbor", REDUCTION, infer, reference, lower, data_inputs=(0,),
    source="tensorflow/core/ops/image_ops.cc: ResizeNearestNeighbor", dtypes=ANY_DTYPE, arity=Arity(2, 2),
)
RESIZE_BILINEAR = OpDefinition(
    "ResizeBilinear", REDUCTION, infer, reference, lower, data_inputs=(0,),
    source="tensorflow/core/ops/image_ops.cc: ResizeBilinear", arity=Arity(2, 2),
)
