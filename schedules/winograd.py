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
                                               Y = relu(Y + b) ... over (n,th,tw,o,i,j)  (the epilogue,
                                                                                          re-indexed by tile)

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

from dataclasses import replace
from fractions import Fraction
from functools import lru_cache

from polytf.config import MeasurementConfig
from polytf.errors import ScheduleError
from polytf.poly.affine import AffineExpr, DynamicIndex, FloorDiv, Modulo, substitute
from polytf.poly.expression import Access, Binary, Constant, Expr, Gather, Load, subexpressions
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import CopyKind, Statement
from polytf.schedules.recipe import CpuRecipe, ScheduleRecipe
from polytf.schedules.structure import anchor_statement, copy_statements, main_statements, shared_band_depth
from polytf.schedules.target_limits import round_up

__all__ = [
    "WINOGRAD_ALGORITHMS",
    "WINOGRAD_TOLERANCE",
    "apply_winograd",
    "verification_tolerance",
    "winograd_applies",
    "winograd_problem",
    "winograd_recipe",
    "winograd_scop",
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
    tiles_h, tiles_w = -(-height // m), -(-width // m)
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
    # 2. the input transform V[n, th, tw, α·ξ + ν, c] = (Bᵀ d B)[ξ, ν] in two passes (α
    # copies each): T[n, th, tw, ξ, j, c] = Σ_i Bᵀ[ξ, i] d[i, j], then Σ_j T[.., ξ, j, ..] Bᵀ[ν, j]
    rows_transformed = new_array((batch, tiles_h, tiles_w, alpha, alpha, ins), "input transform, rows")
    transformed_input = new_array((batch, tiles_h, tiles_w, alpha * alpha, ins), "input transform")
    extents = (batch, tiles_h, tiles_w, alpha, ins)
    five = ("d0", "d1", "d2", "d3", "d4")
    for xi in range(alpha):
        terms = [
            (
                Fraction(transform_input[xi][i]),
                Load(
                    Access.of(
                        padded, "d0", AffineExpr.combine((m, "d1"), constant=i), AffineExpr.combine((m, "d2"), (1, "d3")), "d4"
                    )
                ),
            )
            for i in range(alpha)
        ]
        copy(five, extents, Access.of(rows_transformed, "d0", "d1", "d2", xi, "d3", "d4"), _linear_combination(terms))
    for nu in range(alpha):
        terms = [
            (Fraction(transform_input[nu][j]), Load(Access.of(rows_transformed, "d0", "d1", "d2", "d3", j, "d4")))
            for j in range(alpha)
        ]
        copy(
            five,
            extents,
            Access.of(transformed_input, "d0", "d1", "d2", AffineExpr.combine((alpha, "d3"), constant=nu), "d4"),
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
    # 5. the output transform Y[n, m·th + i, m·tw + j, o] = (Aᵀ M A)[i, j] in two passes (m
    # statements each): Z[n, th, tw, i, ν, o] = Σ_ξ Aᵀ[i, ξ] M[.., α·ξ + ν, ..], then Σ_ν Z Aᵀ[j, ν],
    # guarded at the border
    output = anchor.write.array
    main: list[Statement] = [initialisation, gemm]
    rows_output = new_array((batch, tiles_h, tiles_w, m, alpha, outs), "output transform, rows")
    for i in range(m):
        terms = [
            (
                Fraction(transform_output[i][xi]),
                Load(Access.of(products, n, th, tw, AffineExpr.combine((1, "d4"), constant=alpha * xi), o)),
            )
            for xi in range(alpha)
        ]
        write = Access.of(rows_output, n, th, tw, i, "d4", o)
        main.append(
            Statement(
                f"{anchor.name}_rows{i}",
                (n, th, tw, o, "d4"),
                (batch, tiles_h, tiles_w, outs, alpha),
                write,
                _linear_combination(terms),
                node=anchor.node,
                op=anchor.op,
            )
        )
    for j in range(m):
        terms = [(Fraction(transform_output[j][nu]), Load(Access.of(rows_output, n, th, tw, "d4", nu, o))) for nu in range(alpha)]
        guards = tuple(
            g for g, needed in ((f"{m}*d1 + d4 < {height}", height % m), (f"{m}*d2 + {j} < {width}", width % m)) if needed
        )
        write = Access.of(output, n, AffineExpr.combine((m, th), (1, "d4")), AffineExpr.combine((m, tw), constant=j), o)
        main.append(
            Statement(
                f"{anchor.name}_out{j}",
                (n, th, tw, o, "d4"),
                (batch, tiles_h, tiles_w, outs, m),
                write,
                _linear_combination(terms),
                guards,
                node=anchor.node,
                op=anchor.op,
            )
        )
    # 6. the epilogue over (n, th, tw, o, i, j), reading and writing where (n, m·th + i, m·tw + j, o)
    substitutions = {
        "d0": AffineExpr.of(n),
        "d1": AffineExpr.combine((m, th), (1, "d4")),
        "d2": AffineExpr.combine((m, tw), (1, "d5")),
        "d3": AffineExpr.of(o),
    }
    guards = tuple(g for g, needed in ((f"{m}*d1 + d4 < {height}", height % m), (f"{m}*d2 + d5 < {width}", width % m)) if needed)
    for statement in problem.epilogue:
        main.append(
            Statement(
                statement.name,
                (n, th, tw, o, "d4", "d5"),
                (batch, tiles_h, tiles_w, outs, m, m),
                _reindexed(statement.write, substitutions),
                _reindex_loads(statement.value, substitutions),
                guards,
                node=statement.node,
                op=statement.op,
            )
        )
    return Scop(scop.name, tuple(copies) + tuple(main), tuple(arrays), scop.ops)


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
def winograd_recipe(scop: Scop, recipe: CpuRecipe) -> CpuRecipe:
    """A Winograd recipe in the convolution's terms, translated into the rewritten kernel's.

    Convolution anchor ``(n, oh, ow, o; kh, kw, c)`` -> batched GEMM ``(n, th, tw, o, e; c)``:
    a tile of ``t`` output rows (columns) becomes ``ceil(t / m)`` tiles, rounded up to the
    register tile; a register tile keeps its size (at most the number of tiles); the
    channel reduction's tile stays, the window's go; in ``point_order`` the window's first
    reduction ``kh`` becomes the transformed point ``e`` and ``kw`` goes. Packing and
    padding are the rewrite's own (none asked for).

    Raises:
        ScheduleError: Winograd does not apply to ``scop`` (naming why).
    """
    problem, reason = _reason(scop)
    if problem is None:
        raise ScheduleError(f"kernel {scop.name}: algorithm {recipe.algorithm} does not apply: {reason}")
    m = WINOGRAD_ALGORITHMS[recipe.algorithm]
    tiles_h, tiles_w = -(-problem.height // m), -(-problem.width // m)
    extents = (problem.batch, tiles_h, tiles_w, problem.out_channels)
    registers = tuple(recipe.register_tile_sizes) or (0, 0, 0, 0)
    registers = tuple(size if k == 3 else min(size, extents[k]) for k, size in enumerate(registers))
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
    names = {"d0": "d0", "d1": "d1", "d2": "d2", "d3": "d3", "r0": "d4", "r2": "r0"}
    order = tuple(names[it] for it in (recipe.point_order or problem.anchor.iterators) if it in names)
    return replace(
        recipe,
        tile_sizes=tuple(translated),
        register_tile_sizes=registers,
        reduction_tile_sizes=(min(reductions[2], problem.in_channels),),
        point_order=order,
        pack=(),
        pad=False,
    )
