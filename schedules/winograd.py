"""Winograd's minimal filtering algorithms F(2×2,3×3) and F(4×4,3×3) for 3×3 convolutions.

Source: Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (CVPR 2016),
section 4; the transform matrices are theirs (interpolation points 0, ±1, ±2 and ∞ for
F(4,3)), the same as NNPACK's and oneDNN's. An output tile ``Y`` of ``m × m`` values is
computed from an input tile ``d`` of ``α × α`` values (``α = m + 2``) and a 3×3 filter ``g``:
``Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A``. For F(2,3) (α = 4)::

    Bᵀ = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
    G  = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]
    Aᵀ = [[1, 1, 1, 0], [0, 1, -1, -1]]

and for F(4,3) (α = 6)::

    Bᵀ = [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
          [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]
    G  = [[1/4, 0, 0], [-1/6, -1/6, -1/6], [-1/6, 1/6, -1/6],
          [1/24, 1/12, 1/6], [1/24, -1/12, 1/6], [0, 0, 1]]
    Aᵀ = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]

The rewrite of a Conv2D kernel ``Y[n, oh, ow, o] = Σ X[n, oh + kh - pt, ow + kw - pl, c] ·
F[kh, kw, c, o]`` (stride 1, dilation 1, 3×3, one group, float32) with ``TH = ceil(OH/m)``,
``TW = ceil(OW/m)`` tiles and ``e = α·ξ + ν`` numbering the ``α²`` transformed points::

    before                                   after
    Y[n,oh,ow,o] = 0                         P[n, TH·m+2, TW·m+2, C] = X zero-padded     (copy)
    Y[n,oh,ow,o] += X[..window..]·F[..]      V[n,th,tw,e,c] = (Bᵀ d B)[ξ,ν]              (α² copies)
    Y = relu(Y + b) ...                      U[e,c,o] = (G g Gᵀ)[ξ,ν]                    (α² copies, weights)
                                             for n, th, tw, o:                           (shared band)
                                               M[n,th,tw,e,o] = 0
                                               M[n,th,tw,e,o] += V[n,th,tw,e,c]·U[e,c,o] (the anchor:
                                                                                          a batched GEMM)
                                               Y[n, m·th+i, m·tw+j, o] = (Aᵀ M A)[i,j]   (m² statements,
                                                                                          guarded at the border)
                                               Y = relu(Y + b) ...                       (the epilogue, m²
                                                                                          statements, re-indexed)

The filter transform reads only the filter: for a constant filter (a model's weights) the
schedule builder leaves it to the caller, which runs it once when the model is built
(:func:`polytf.plan.constant_layout.packed_constants`, in float64); otherwise the kernel
runs it. The input transforms and the zero padding are data-layout copies that run before
the loop nest; the batched GEMM, the output transforms and the epilogue share the outer
band of tiles and output channels, and the GEMM runs in the register-tile micro-kernel.

A Winograd recipe is written in the terms of the convolution (the search space's fields);
:func:`winograd_recipe` translates it into the rewritten kernel's (the tile of an output
row or column becomes a tile of ``m``-tiles, the kernel-window reductions disappear, the
channel reduction stays).

Tolerance: Winograd rounds differently from a direct convolution (the transforms add and
scale before the products, F(4,3)'s by up to 8 and 1/24). Measured with polytf's compiled
kernels on random normal inputs and filters scaled by ``1/sqrt(9C)``, against a float64
reference (``results/winograd.py``, 3×3 SAME layers of 7² to 56² pixels), the largest error
relative to the output's largest magnitude was, for C = 64, 128, 256, 512: direct 0.9, 1.1,
1.4, 2.3 ``e-6``; F(2,3) 0.3, 0.4, 0.6, 0.9 ``e-6``; F(4,3) 0.6, 0.8, 1.0, 1.6 ``e-5``
(growing as ``sqrt(C)``; F(2,3) is as exact as the direct convolution, F(4,3) about 7x
less). :data:`WINOGRAD_TOLERANCE` states the bounds (``|got - ref| <= tolerance ·
max|ref|``): ``5e-6`` for F(2,3), ``5e-5`` for F(4,3); the tuner's verification, whose
absolute tolerance is otherwise ``1e-5 · max|ref| + 1e-6``, widens it to them for a Winograd
recipe (:func:`verification_tolerance`). NaN and
infinities: a transform mixes the values of a tile, so one infinite input makes NaN (``inf
- inf``) in outputs where a direct convolution gives ``±inf``; finite inputs give finite
outputs wherever the direct convolution does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache

from polytf.config import MeasurementConfig
from polytf.errors import ScheduleError
from polytf.poly.affine import AffineExpr, DynamicIndex, FloorDiv, Modulo, substitute
from polytf.poly.expression import Access, Binary, Constant, Expr, Gather, Load, subexpressions
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import CopyKind, Statement
from polytf.schedules.analytic_recipe import CacheSizes, balanced_tile, even_rows
from polytf.schedules.recipe import CpuRecipe, ScheduleRecipe
from polytf.schedules.structure import anchor_statement, copy_statements, main_statements, shared_band_depth
from polytf.schedules.target_limits import TargetLimits, round_up

__all__ = [
    "WINOGRAD_ALGORITHMS",
    "WINOGRAD_TOLERANCE",
    "WinogradTiles",
    "apply_winograd",
    "preferred_winograd",
    "verification_tolerance",
    "winograd_applies",
    "winograd_problem",
    "winograd_recipe",
    "winograd_scop",
    "winograd_tiles",
]

#: Algorithm name -> output tile size ``m`` of F(m×m, 3×3).
WINOGRAD_ALGORITHMS = {"winograd_f2x2_3x3": 2, "winograd_f4x4_3x3": 4}

#: Algorithm name -> largest error accepted, relative to the output's largest magnitude
#: (``|got - ref| <= tolerance · max|ref|``): about 3x the largest error measured at C = 512
#: (module docstring). The tuner's verification widens its absolute tolerance to it
#: (:func:`verification_tolerance`).
WINOGRAD_TOLERANCE = {"winograd_f2x2_3x3": 5e-6, "winograd_f4x4_3x3": 5e-5}

_HALF, _SIXTH = Fraction(1, 2), Fraction(1, 6)
#: m -> (Bᵀ, G, Aᵀ), exact rationals (Lavin & Gray 2016).
TRANSFORMS = {
    2: (
        ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
        ((1, 0, 0), (_HALF, _HALF, _HALF), (_HALF, -_HALF, _HALF), (0, 0, 1)),
        ((1, 1, 1, 0), (0, 1, -1, -1)),
    ),
    4: (
        (
            (4, 0, -5, 0, 1, 0),
            (0, -4, -4, 1, 1, 0),
            (0, 4, -4, -1, 1, 0),
            (0, -2, -1, 2, 1, 0),
            (0, 2, -1, -2, 1, 0),
            (0, 4, 0, -5, 0, 1),
        ),
        (
            (Fraction(1, 4), 0, 0),
            (-_SIXTH, -_SIXTH, -_SIXTH),
            (-_SIXTH, _SIXTH, -_SIXTH),
            (Fraction(1, 24), Fraction(1, 12), _SIXTH),
            (Fraction(1, 24), -Fraction(1, 12), _SIXTH),
            (0, 0, 1),
        ),
        ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1)),
    ),
}


class WinogradProblem:
    """The facts of a convolution kernel that the rewrite needs (:func:`winograd_problem`).

    Attributes:
        anchor, initialisation: the convolution's update and the statement that zeroes it.
        epilogue: the main statements after the anchor (bias, activation...), over the
            output's iterators ``(n, oh, ow, o)``.
        window, filter: the reads ``X[n, oh + kh - pt, ow + kw - pl, c]`` and ``F[kh, kw, c, o]``.
        pad_top, pad_left: ``pt`` and ``pl``.
        batch, height, width, out_channels, in_channels: ``N, OH, OW, O, C``.
    """

    def __init__(
        self,
        anchor: Statement,
        initialisation: Statement,
        epilogue: tuple[Statement, ...],
        window: Access,
        filter_read: Access,
        pads: tuple[int, int],
    ):
        self.anchor, self.initialisation, self.epilogue = anchor, initialisation, epilogue
        self.window, self.filter = window, filter_read
        self.pad_top, self.pad_left = pads
        self.batch, self.height, self.width, self.out_channels = anchor.extents[:4]
        self.in_channels = anchor.extents[6]

    def tiles(self, m: int) -> tuple[int, int]:
        """``(TH, TW) = (ceil(OH / m), ceil(OW / m))``: the m × m output tiles down and across."""
        return -(-self.height // m), -(-self.width // m)


def _is_plain(index: tuple, names: tuple[str, ...]) -> bool:
    return len(index) == len(names) and all(isinstance(i, AffineExpr) and i == AffineExpr.of(n) for i, n in zip(index, names))


def _reason(scop: Scop) -> tuple[WinogradProblem | None, str]:
    """The problem, or None and why Winograd does not apply."""
    if copy_statements(scop):
        return None, "data-layout transformations were already applied"
    if any(a.dtype != "float32" for a in scop.arrays):
        return None, "Winograd computes float32 only"
    anchor = anchor_statement(scop)
    if anchor is None or len(anchor.iterators) != 7 or len(anchor.reduction_iterators) != 3 or shared_band_depth(scop) != 4:
        return None, "the kernel is not a 2-D convolution (an anchor over n, oh, ow, o and kh, kw, c)"
    d0, d1, d2, d3, r0, r1, r2 = anchor.iterators
    value = anchor.value
    if not (
        isinstance(value, Binary)
        and value.op == "add"
        and value.lhs == Load(anchor.write)
        and isinstance(value.rhs, Binary)
        and value.rhs.op == "mul"
    ):
        return None, f"statement {anchor.name} is not a sum of products W = W + X * F"
    factors = (value.rhs.lhs, value.rhs.rhs)
    if not all(isinstance(f, Load) for f in factors) or not _is_plain(anchor.write.index, (d0, d1, d2, d3)):
        return None, f"statement {anchor.name} is not W[n, oh, ow, o] += X[...] * F[...]"
    filters = [f.access for f in factors if _is_plain(f.access.index, (r0, r1, r2, d3))]
    windows = [f.access for f in factors if not _is_plain(f.access.index, (r0, r1, r2, d3))]
    if len(filters) != 1 or len(windows) != 1:
        return None, f"statement {anchor.name} reads no filter F[kh, kw, c, o] (a grouped or depthwise convolution)"
    window = windows[0]
    if anchor.extents[4:6] != (3, 3):
        return None, f"the kernel window is {anchor.extents[4]}x{anchor.extents[5]}, not 3x3"
    expected = [((d0, 1),), ((d1, 1), (r0, 1)), ((d2, 1), (r1, 1)), ((r2, 1),)]
    index = window.index
    if (
        len(index) != 4
        or not all(isinstance(i, AffineExpr) for i in index)
        or [tuple(sorted(i.terms)) for i in index] != [tuple(sorted(t)) for t in expected]
    ):
        return None, f"the window {window} is not X[n, oh + kh - pt, ow + kw - pl, c] (stride 1, dilation 1)"
    if index[0].constant or index[3].constant or index[1].constant > 0 or index[2].constant > 0:
        return None, f"the window {window} has an offset that is not a padding"
    if any(s.write.array == window.array for s in scop.statements):
        return None, f"the kernel writes its input {window.array}"
    statements = main_statements(scop)
    position = statements.index(anchor)
    before, after = statements[:position], statements[position + 1 :]
    if (
        len(before) != 1
        or before[0].write != anchor.write
        or before[0].value != Constant(0.0)
        or before[0].constraints
        or before[0].iterators != anchor.iterators[:4]
    ):
        return None, f"statement {anchor.name} is not preceded by its one initialisation W = 0"
    for statement in after:
        if statement.iterators != anchor.iterators[:4] or statement.extents != anchor.extents[:4] or statement.constraints:
            return None, f"the epilogue statement {statement.name} is not over the output's iterators"
        accesses = (statement.write, *statement.reads)
        if any(
            not isinstance(i, AffineExpr) or isinstance(i, (DynamicIndex, FloorDiv, Modulo)) for a in accesses for i in a.index
        ):
            return None, f"the epilogue statement {statement.name} has a non-affine index"
        if any(isinstance(e, Gather) for e in subexpressions(statement.value)):
            return None, f"the epilogue statement {statement.name} gathers"
    pads = (-index[1].constant, -index[2].constant)
    return WinogradProblem(anchor, before[0], tuple(after), window, filters[0], pads), ""


@lru_cache(maxsize=256)
def winograd_problem(scop: Scop) -> WinogradProblem | None:
    """The convolution facts of ``scop`` when Winograd applies to it, else None (memoised)."""
    return _reason(scop)[0]


def winograd_applies(scop: Scop) -> bool:
    """True when ``scop`` is a 3×3, stride-1, dilation-1, one-group float32 Conv2D (NHWC)
    whose update is zeroed first and followed only by statements over the output's
    iterators with affine indices (bias, activations, residual adds)."""
    return winograd_problem(scop) is not None


def why_not_winograd(scop: Scop) -> str:
    """Why Winograd does not apply to ``scop`` ("" when it does)."""
    return _reason(scop)[1]


# -- the rewrite ------------------------------------------------------------------------------
def _linear_combination(terms: list[tuple[Fraction, Expr]]) -> Expr:
    """``Σ coefficient · value`` without the zero terms, as additions and subtractions
    (coefficients ±1 multiply nothing)."""
    terms = [(c, v) for c, v in terms if c]
    if not terms:
        return Constant(0.0)

    def scaled(coefficient, value):
        magnitude = abs(coefficient)
        return value if magnitude == 1 else Binary("mul", Constant(float(magnitude)), value)

    first_coefficient, first = terms[0]
    result = (
        scaled(first_coefficient, first) if first_coefficient > 0 else Binary("mul", Constant(float(first_coefficient)), first)
    )
    for coefficient, value in terms[1:]:
        result = Binary("add" if coefficient > 0 else "sub", result, scaled(coefficient, value))
    return result


def winograd_scop(scop: Scop, algorithm: str) -> Scop:
    """``scop`` rewritten for Winograd ``algorithm`` (module docstring).

    Raises:
        ScheduleError: an unknown algorithm, or Winograd does not apply (naming why).
    """
    if algorithm not in WINOGRAD_ALGORITHMS:
        raise ScheduleError(
            f"kernel {scop.name}: unknown Winograd algorithm {algorithm!r}; choose one of {', '.join(WINOGRAD_ALGORITHMS)}"
        )
    problem, reason = _reason(scop)
    if problem is None:
        raise ScheduleError(f"kernel {scop.name}: algorithm {algorithm} does not apply: {reason}")
    return _rewrite_cached(scop, WINOGRAD_ALGORITHMS[algorithm])


@lru_cache(maxsize=64)
def _rewrite_cached(scop: Scop, m: int) -> Scop:
    return _rewrite(scop, winograd_problem(scop), m)


def apply_winograd(scop: Scop, recipe: ScheduleRecipe) -> Scop:
    """The Winograd form of ``scop`` for ``recipe.algorithm`` (the data-layout step of a
    Winograd recipe, :func:`polytf.schedules.data_layout.apply_data_layout`).

    Raises:
        ScheduleError: as :func:`winograd_scop`.
    """
    if recipe.algorithm not in WINOGRAD_ALGORITHMS or not winograd_applies(scop):
        return winograd_scop(scop, recipe.algorithm)  # raises, naming why
    return _rewrite_cached(scop, WINOGRAD_ALGORITHMS[recipe.algorithm])


def _rewrite(scop: Scop, problem: WinogradProblem, m: int) -> Scop:
    transform_input, transform_filter, transform_output = TRANSFORMS[m]
    alpha = m + 2
    anchor = problem.anchor
    n, th, tw, o, e, c = "d0", "d1", "d2", "d3", "d4", "r0"
    batch, height, width, outs, ins = problem.batch, problem.height, problem.width, problem.out_channels, problem.in_channels
    tiles_h, tiles_w = problem.tiles(m)
    source = scop.array(problem.window.array)
    arrays = list(scop.arrays)
    copies: list[Statement] = []
    node = anchor.node
    scratch = sum(1 for a in arrays if a.role == "scratch")

    def new_array(shape: tuple[int, ...], what: str) -> str:
        nonlocal scratch
        name = f"P{scratch}"
        scratch += 1
        arrays.append(
            ArrayInfo(
                name,
                shape,
                "float32",
                "scratch",
                f"{source.tensor if what != 'filter' else scop.array(problem.filter.array).tensor} (Winograd {what})",
            )
        )
        return name

    def copy(iterators, extents, write, value, constraints=()):
        copies.append(
            Statement(f"C{len(copies)}", iterators, extents, write, value, constraints, node=node, copy_kind=CopyKind.DATA_LAYOUT)
        )

    # 1. the input, zero-padded to whole tiles (read as it is when it has that shape already)
    rows, columns = tiles_h * m + 2, tiles_w * m + 2
    padded_shape = (batch, rows, columns, ins)
    box = [f"d{k}" for k in range(4)]
    if (problem.pad_top, problem.pad_left) == (0, 0) and source.shape == padded_shape:
        padded = source.name
    else:
        padded = new_array(padded_shape, "input, zero-padded")
        top, left = problem.pad_top, problem.pad_left
        halo = f"(d1 < {top} or d1 >= {top + min(source.shape[1], rows - top)} or d2 < {left} or d2 >= {left + min(source.shape[2], columns - left)})"
        copy(tuple(box), padded_shape, Access.of(padded, *box), Constant(0.0), (halo,))
        inside = (source.shape[0], min(source.shape[1], rows - top), min(source.shape[2], columns - left), ins)
        shifted = Access.of(
            padded, "d0", AffineExpr.combine((1, "d1"), constant=top), AffineExpr.combine((1, "d2"), constant=left), "d3"
        )
        copy(tuple(box), inside, shifted, Load(Access.of(source.name, *box)))
    # 2. the input transform V[n, th, tw, α·ξ + ν, c] = (Bᵀ d B)[ξ, ν] = Σ_i Σ_j Bᵀ[ξ, i] Bᵀ[ν, j]
    # d[m·th + i, m·tw + j] in one pass (α² copies, each of the window's values with a
    # non-zero coefficient): no row-transformed intermediate, whose array (as large as V) a
    # model's call would sweep through memory once more
    transformed_input = new_array((batch, tiles_h, tiles_w, alpha * alpha, ins), "input transform")
    four = ("d0", "d1", "d2", "d3")
    for xi in range(alpha):
        for nu in range(alpha):
            terms = [
                (
                    Fraction(transform_input[xi][i]) * Fraction(transform_input[nu][j]),
                    Load(
                        Access.of(
                            padded,
                            "d0",
                            AffineExpr.combine((m, "d1"), constant=i),
                            AffineExpr.combine((m, "d2"), constant=j),
                            "d3",
                        )
                    ),
                )
                for i in range(alpha)
                for j in range(alpha)
            ]
            copy(
                four,
                (batch, tiles_h, tiles_w, ins),
                Access.of(transformed_input, "d0", "d1", "d2", alpha * xi + nu, "d3"),
                _linear_combination(terms),
            )
    # 3. the filter transform U[e, c, o] = (G g Gᵀ)[ξ, ν] (run once when the filter is a constant)
    transformed_filter = new_array((alpha * alpha, ins, outs), "filter")
    for xi in range(alpha):
        for nu in range(alpha):
            terms = [
                (
                    Fraction(transform_filter[xi][r]) * Fraction(transform_filter[nu][s]),
                    Load(Access.of(problem.filter.array, r, s, "d0", "d1")),
                )
                for r in range(3)
                for s in range(3)
            ]
            copy(
                ("d0", "d1"), (ins, outs), Access.of(transformed_filter, alpha * xi + nu, "d0", "d1"), _linear_combination(terms)
            )
    # 4. the batched GEMM M[n, th, tw, e, o] = Σ_c V[n, th, tw, e, c] · U[e, c, o]
    products = new_array((batch, tiles_h, tiles_w, alpha * alpha, outs), "products")
    product = Access.of(products, n, th, tw, e, o)
    outer = (batch, tiles_h, tiles_w, outs, alpha * alpha)
    initialisation = Statement(
        problem.initialisation.name,
        (n, th, tw, o, e),
        outer,
        product,
        Constant(0.0),
        node=problem.initialisation.node,
        op=problem.initialisation.op,
    )
    update = Binary(
        "add",
        Load(product),
        Binary("mul", Load(Access.of(transformed_input, n, th, tw, e, c)), Load(Access.of(transformed_filter, e, c, o))),
    )
    gemm = Statement(anchor.name, (n, th, tw, o, e, c), (*outer, ins), product, update, node=anchor.node, op=anchor.op)
    # 5. the output transform Y[n, m·th + i, m·tw + j, o] = (Aᵀ M A)[i, j] = Σ_ξ Σ_ν Aᵀ[i, ξ]
    # Aᵀ[j, ν] M[.., α·ξ + ν, ..] in one pass (m² statements over the shared dimensions, each
    # of the products with a non-zero coefficient), guarded at the border
    output = anchor.write.array
    main: list[Statement] = [initialisation, gemm]
    for i in range(m):
        for j in range(m):
            terms = [
                (
                    Fraction(transform_output[i][xi]) * Fraction(transform_output[j][nu]),
                    Load(Access.of(products, n, th, tw, alpha * xi + nu, o)),
                )
                for xi in range(alpha)
                for nu in range(alpha)
            ]
            main.append(
                Statement(
                    f"{anchor.name}_out{i}_{j}",
                    (n, th, tw, o),
                    (batch, tiles_h, tiles_w, outs),
                    Access.of(output, n, AffineExpr.combine((m, th), constant=i), AffineExpr.combine((m, tw), constant=j), o),
                    _linear_combination(terms),
                    _inside_output(m, i, j, height, width),
                    node=anchor.node,
                    op=anchor.op,
                )
            )
    # 6. the epilogue, m² statements per statement (one per point (i, j) of the output tile)
    # over the shared dimensions, reading and writing where (n, m·th + i, m·tw + j, o), each
    # a nest of its own (shared_nests.elementwise_units says why not one)
    for statement in problem.epilogue:
        for i in range(m):
            for j in range(m):
                substitutions = {
                    "d0": AffineExpr.of(n),
                    "d1": AffineExpr.combine((m, th), constant=i),
                    "d2": AffineExpr.combine((m, tw), constant=j),
                    "d3": AffineExpr.of(o),
                }
                main.append(
                    Statement(
                        f"{statement.name}_{i}_{j}",
                        (n, th, tw, o),
                        (batch, tiles_h, tiles_w, outs),
                        _reindexed(statement.write, substitutions),
                        _reindex_loads(statement.value, substitutions),
                        _inside_output(m, i, j, height, width),
                        node=statement.node,
                        op=statement.op,
                    )
                )
    return Scop(scop.name, tuple(copies) + tuple(main), tuple(arrays), scop.ops)


def _inside_output(m: int, i: int, j: int, height: int, width: int) -> tuple[str, ...]:
    """Constraints keeping point ``(i, j)`` of tile ``(d1, d2)`` inside a ``height × width``
    output (none where the tiles divide it)."""
    bounds = ((f"{m}*d1 + {i} < {height}", height % m), (f"{m}*d2 + {j} < {width}", width % m))
    return tuple(bound for bound, needed in bounds if needed)


def _reindexed(access: Access, substitutions: dict[str, AffineExpr]) -> Access:
    return Access(access.array, tuple(substitute(index, substitutions) for index in access.index))


def _reindex_loads(expr: Expr, substitutions: dict[str, AffineExpr]) -> Expr:
    if isinstance(expr, Load):
        return Load(_reindexed(expr.access, substitutions))
    return expr.map_children(lambda child: _reindex_loads(child, substitutions))


def verification_tolerance(recipe: ScheduleRecipe, config: MeasurementConfig) -> MeasurementConfig:
    """``config`` with its absolute tolerance (``atol_scale · max|ref|``) widened to the
    stated error of ``recipe``'s Winograd algorithm (:data:`WINOGRAD_TOLERANCE`); ``config``
    itself for every other recipe, and where it is already as wide."""
    tolerance = WINOGRAD_TOLERANCE.get(getattr(recipe, "algorithm", ""), 0.0)
    return replace(config, atol_scale=tolerance) if tolerance > config.atol_scale else config


# -- the recipe -------------------------------------------------------------------------------
def winograd_recipe(scop: Scop, recipe: CpuRecipe, limits: TargetLimits | None = None) -> CpuRecipe:
    """A Winograd recipe in the convolution's terms, translated into the rewritten kernel's.

    Convolution anchor ``(n, oh, ow, o; kh, kw, c)`` -> batched GEMM ``(n, th, tw, o, e; c)``:
    a tile of ``t`` output rows (columns) becomes ``ceil(t / m)`` tiles, rounded up to the
    register tile; a register tile keeps its size (at most the number of tiles); the
    channel reduction's tile stays, the window's go; the register tile's rows are evened out
    over the tiles of a row and its columns widened into the accumulators that frees
    (:func:`_register_tile`); in ``point_order`` the transformed point
    ``e`` comes first and the window's reductions ``kh, kw`` go. Packing and
    padding are the rewrite's own (none asked for).

    Raises:
        ScheduleError: Winograd does not apply to ``scop`` (naming why).
    """
    problem, reason = _reason(scop)
    if problem is None:
        raise ScheduleError(f"kernel {scop.name}: algorithm {recipe.algorithm} does not apply: {reason}")
    m = WINOGRAD_ALGORITHMS[recipe.algorithm]
    tiles_h, tiles_w = problem.tiles(m)
    extents = (problem.batch, tiles_h, tiles_w, problem.out_channels)
    registers = tuple(recipe.register_tile_sizes) or (0, 0, 0, 0)
    registers = tuple(size if k == 3 else min(size, extents[k]) for k, size in enumerate(registers))
    if registers[2] > 1 and registers[3]:
        column_tile = recipe.tile_sizes[3] if recipe.tile_sizes else 0
        registers = (
            *registers[:2],
            *_register_tile(registers[2], registers[3], tiles_w, problem.out_channels, column_tile, limits or TargetLimits()),
        )
    tiles = tuple(recipe.tile_sizes) or (0, 0, 0, 0)
    translated = []
    for k, (size, register) in enumerate(zip(tiles, registers)):
        if size and k in (1, 2):
            size = -(-size // m)
        if size and register:
            size = min(round_up(size, register), round_up(extents[k], register))
        elif size:
            size = min(size, extents[k])
        translated.append(size)
    reductions = tuple(recipe.reduction_tile_sizes) or (0, 0, 0)
    names = {"d0": "d0", "d1": "d1", "d2": "d2", "d3": "d3", "r2": "r0"}
    # The transformed point ``e`` outermost: one ``U[e]`` (C × O) stays in cache while every
    # register tile of the tile row uses it, where inside the tiles all α² of them would be
    # streamed again for each register tile.
    order = ("d4", *(names[it] for it in (recipe.point_order or problem.anchor.iterators) if it in names))
    return replace(
        recipe,
        tile_sizes=tuple(translated),
        register_tile_sizes=registers,
        reduction_tile_sizes=(min(reductions[2], problem.in_channels),),
        point_order=order,
        pack=(),
        pad=False,
    )


def _register_tile(rows: int, columns: int, tiles: int, outs: int, column_tile: int, limits: TargetLimits) -> tuple[int, int]:
    """The register tile ``(rows, columns)`` of the batched GEMM, from the convolution's: its
    rows run over the ``tiles`` of a tile row (7 for a 28-wide output in F(4,3)), far fewer
    than the convolution's output columns, so they are evened out (7 rows in tiles of 6 and 1
    waste most of the second; 4 and 3 do not, :func:`even_rows`), and when that frees
    accumulators a third vector per row takes them (4 × 24 where 6 × 16 was), as the
    analytic recipe does for the direct convolution, unless the recipe's tile of output
    channels (``column_tile``, 0 for none) is not a multiple of the wider tile (its parallel
    tiles, balanced over the threads, would change)."""
    lanes = limits.vector_lanes
    accumulators = rows * -(-columns // lanes)
    rows = max(1, even_rows(tiles, rows))
    wider = lanes * min(3, accumulators // rows)
    fits = not column_tile or column_tile >= outs or column_tile % wider == 0
    if columns == 2 * lanes and wider > columns and outs >= 2 * wider and fits:
        columns = wider
    return rows, columns


@dataclass(frozen=True)
class WinogradTiles:
    """The cache tiles of a Winograd recipe, in the convolution's terms (:func:`winograd_tiles`).

    Attributes:
        rows: tile of output rows (a multiple of ``m``, at most the output's height).
        channels: tile of output channels (0: untiled).
    """

    rows: int
    channels: int


def winograd_tiles(
    problem: WinogradProblem, m: int, channel_tile: int, columns: int, weights_outer: bool, caches: CacheSizes, threads: int
) -> WinogradTiles:
    """Cache tiles for the Winograd form of ``problem`` (F(m×m, 3×3)), from the direct
    convolution's analytic ones (its output-channel tile ``channel_tile``, 0 for all, its
    register tile's ``columns``, and whether the weights' loop is the outer, parallel one).

    The batched GEMM runs the transformed point ``e`` outermost inside a cache tile
    (:func:`winograd_recipe`), so each ``U[e]`` slice is read once per tile while all the
    tile's rows use it; a tile of output rows therefore spans as many tile rows as keep the
    tile's products ``M`` (``rows/m · ceil(OW/m) · α² · channels`` floats) within half of L2
    (in ResNet50's 28×28×128 layer, all 7 tile rows at once instead of one, which streamed
    all of ``U``, 2.4 MB, once per tile row). Where the weights are the parallel loop, their
    tile is at least 64 channels (or an equal share per thread), balanced over the threads;
    otherwise the row tiles are the parallel loop and are balanced instead."""
    alpha = m + 2
    outs = problem.out_channels
    channels = channel_tile or outs
    if weights_outer and threads > 1:
        share = max(columns, min(64, outs // threads) // columns * columns)
        channels = balanced_tile(outs, max(min(channels, outs), share), columns, threads)
    tiles_h, tiles_w = problem.tiles(m)
    row_bytes = tiles_w * alpha * alpha * min(channels, outs) * 4
    rows = max(1, min(tiles_h, caches.l2_bytes // 2 // row_bytes))
    if not weights_outer and threads > 1 and problem.batch < threads:
        rows = balanced_tile(tiles_h, max(1, min(rows, -(-tiles_h // threads))), 1, threads)
    return WinogradTiles(min(rows * m, problem.height), 0 if channels >= outs else channels)


#: The untuned default uses F(4×4,3×3) for a layer with at least this many input channels ...
PREFERRED_MIN_CHANNELS = 64
#: ... at least this many 4×4 output tiles (batch × tile rows × tile columns) ...
PREFERRED_MIN_TILES = 40
#: ... and tiles covering at most this much more than the output (partial tiles compute waste).
PREFERRED_MAX_COVER = 1.35
#: F(2×2,3×3) is preferred instead for a layer with at least PREFERRED_MIN_CHANNELS input
#: channels and this many output channels, at least PREFERRED_MIN_TILES 2×2 tiles and
#: tiles covering at most this much more than the output, where F(4×4,3×3) is not
#: preferred or its tiles cover more than that: F(2,3) saves 2.25x the products' FLOPs
#: (F(4,3) 4x), so its transforms pay only where each transformed tile feeds enough
#: outputs and few partial tiles are computed.
PREFERRED_F2_MIN_OUT_CHANNELS = 64
PREFERRED_F2_MAX_COVER = 1.2


def preferred_winograd(problem: WinogradProblem | None) -> str:
    """The Winograd algorithm of the untuned default recipe for ``problem`` ("" for the
    direct convolution), where it measured faster than the direct convolution's analytic
    recipe, each kernel alone, 2 threads (``results/winograd.md``: a 2-core znver3, AVX2;
    ``results/winograd_znver5.md``: a 2-core znver5, AVX-512).

    F(4×4,3×3) on 3×3 layers with C >= 64 and at least 40 tiles: 0.53-0.78x the direct
    kernel's time on znver3 and 0.45-0.69x on znver5 (ResNet50's 56²×64 and 28²×128 layers,
    DenseNet121's 56² and 28² ×128→32, InceptionV3's 35²×64→96 and 35²×96→96, VGG16's). With
    few tiles it lost: 1.15-2.6x on znver3 (14²×256 and 7²×512 at batch 1: 16 and 4 tiles,
    too few rows for the transformed weights, 4x the filter; 7²×512 at batch 8: 32), and with
    few channels (147²×32→64: the transforms cost as much as the products; 1.31x on znver3).

    F(2×2,3×3) on layers with C >= 64 and O >= 64 whose 2×2 tiles number at least 40 and
    cover at most 20% more than the output, where F(4,3) is not preferred or its 4×4 tiles
    cover more than that: ResNet50's 14²×256 at batch 1 (49 tiles; 0.92x the direct kernel
    on znver3, 0.61x on znver5, where F(4,3) took 1.15x and 0.70x) and at batch 8 (F(4,3)'s
    tiles cover 31% more than the output: F(2,3) 0.95x F(4,3)'s time on znver3, 0.97x on
    znver5), InceptionV3's 8²×448→384 at batch 8 (0.64x the direct kernel on znver5). It
    lost with 32 output channels (DenseNet121's 14²×128→32: 1.01x and 1.28x the direct
    kernel), and on 7²×512 at batch 8 on znver3 (2×2 tiles covering 31% more than the
    output: 1.29x; 0.92x on znver5). The tuner tries both algorithms and the direct
    convolution."""
    if problem is None:
        return ""

    def cover_if_applies(m: int) -> float | None:
        """How much the m×m tiles cover over the output, None when too few tiles or channels."""
        tiles_h, tiles_w = problem.tiles(m)
        if problem.in_channels < PREFERRED_MIN_CHANNELS or problem.batch * tiles_h * tiles_w < PREFERRED_MIN_TILES:
            return None
        return tiles_h * tiles_w * m * m / (problem.height * problem.width)

    f4_cover, f2_cover = cover_if_applies(4), cover_if_applies(2)
    if f4_cover is not None and f4_cover <= PREFERRED_F2_MAX_COVER:
        return "winograd_f4x4_3x3"
    if f2_cover is not None and f2_cover <= PREFERRED_F2_MAX_COVER and problem.out_channels >= PREFERRED_F2_MIN_OUT_CHANNELS:
        return "winograd_f2x2_3x3"
    if f4_cover is not None and f4_cover <= PREFERRED_MAX_COVER:
        return "winograd_f4x4_3x3"
    return ""
