"""Data-layout transformations of a Scop: operand packing and zero-padding.

Both add *copy statements* that run before the loop nest (the schedule builder places
them first, each as its own band) and rewrite the anchor statement's reads to the copy:

- **Packing** (Goto & van de Geijn, "Anatomy of High-Performance Matrix Multiplication",
  TOMS 2008; Gareev, Grosser & Kruse, "High-Performance Generalized Tensor Operations: A
  Compiler-Oriented Approach", TACO 2018): an operand read by the anchor is copied into
  register-tile panels, so the micro-kernel streams it contiguously. For ``B[r0, d1]`` with
  a register tile of 16 on ``d1``, the packed array is ``P[floor(d1/16), r0, d1 mod 16]``.
- **im2col** (Chellapilla et al., "High Performance Convolutional Neural Networks for
  Document Processing", 2006): the anchor's read that is not a plain permutation of its
  iterators (a Conv2D's input window) is gathered into a dense array indexed by the
  iterators it depends on, ``X_col[n, oh, ow, kh, kw, c]``; the convolution then is a
  matrix product over contiguous rows, run by the same micro-kernel (im2col + GEMM).
- **Zero-padding**: a read that the anchor guards with domain constraints (a Conv2D's
  SAME padding) is redirected to a zero-padded copy of its array, and the constraints are
  dropped, so every register tile of the convolution is a full one. Legal only for
  sum-of-products reductions ``W = W + X * ...``, where a zero read adds nothing. Only
  affine axes are padded: an axis indexed by a floor division or a modulo (a grouped or
  depthwise convolution's ``floor(d3/Og)``) must stay inside the array on the whole box.

The new arrays have role ``"scratch"``: they are kernel arguments like any other array
(after the kernel's own), allocated by the caller once per execution context, so a kernel
keeps no state and concurrent calls on separate contexts never share a buffer.
"""

from __future__ import annotations

from functools import lru_cache

from polytf.errors import ScheduleError
from polytf.islpy_on_demand import isl
from polytf.poly.affine import AffineExpr, DynamicIndex, FloorDiv, Modulo
from polytf.poly.expression import Access, Binary, Constant, Expr, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import CopyKind, IteratorRole, Statement
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.structure import anchor_statement, shared_band_depth
from polytf.schedules.winograd import WINOGRAD_ALGORITHMS, apply_winograd

SCRATCH = "scratch"
#: Algorithms of a contraction's anchor statement: as written, im2col + GEMM, or Winograd's
#: F(2×2,3×3) and F(4×4,3×3) (:mod:`polytf.schedules.winograd`).
ALGORITHMS = ("direct", "im2col", *WINOGRAD_ALGORITHMS)


def apply_data_layout(scop: Scop, recipe: ScheduleRecipe) -> Scop:
    """The Scop with the recipe's zero-padding and packing applied (``scop`` itself when the
    recipe asks for neither).

    The recipe is one :func:`polytf.schedules.validation.validate_recipe` accepted; the
    checks here only guard against a caller that skipped it.

    Raises:
        ScheduleError: the recipe packs an array the anchor does not read as a plain
            permutation of its iterators, packs without a register tile on any of the
            array's iterators, or pads a statement that is not a sum of products.
    """
    if not recipe.pad and not recipe.pack and recipe.algorithm == "direct":
        return scop
    if recipe.algorithm not in ALGORITHMS:
        raise ScheduleError(f"kernel {scop.name}: unknown algorithm {recipe.algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    if any(s.copy_kind is CopyKind.DATA_LAYOUT for s in scop.statements):
        raise ScheduleError(f"kernel {scop.name}: data-layout transformations were already applied")
    if recipe.algorithm in WINOGRAD_ALGORITHMS:
        return apply_winograd(scop, recipe)
    copies: list[Statement] = []
    arrays = list(scop.arrays)
    anchor = anchor_statement(scop)
    value = anchor.value
    constraints = anchor.constraints
    if recipe.pad or (recipe.algorithm == "im2col" and constraints):
        value, constraints = _zero_pad(scop, anchor, copies, arrays)
    if recipe.algorithm == "im2col":
        value = _im2col(scop, anchor, value, copies, arrays)
    for name in recipe.pack:
        value = _pack(scop, anchor, recipe, name, value, copies, arrays)
    rewritten = Statement(anchor.name, anchor.iterators, anchor.extents, anchor.write, value, constraints, anchor.node, anchor.op)
    # by name, not identity: memoised analyses may hand back the anchor of an equal Scop
    statements = tuple(copies) + tuple(rewritten if s.name == anchor.name else s for s in scop.statements)
    return Scop(scop.name, statements, tuple(arrays), scop.ops)


def _new_array_name(arrays: list[ArrayInfo]) -> str:
    return f"P{sum(1 for a in arrays if a.role == SCRATCH)}"


def _copy_statement_name(copies: list[Statement]) -> str:
    return f"C{len(copies)}"


def anchor_roles(anchor: Statement, iterators: tuple[str, ...]) -> tuple[IteratorRole, ...]:
    """The roles of ``iterators`` (some of the anchor's) in ``anchor``: a copy statement over
    them keeps them (e.g. an im2col copy's reduction iterators stay sequential loops when it
    is a GPU launch of its own)."""
    return tuple(anchor.roles[anchor.iterators.index(it)] for it in iterators)


def replace_load(expr: Expr, old: Access, new: Access) -> Expr:
    """``expr`` with every load of ``old`` reading ``new`` instead (the rewrite a copy into
    scratch or shared memory makes of the statements that read the copied array)."""
    if isinstance(expr, Load):
        return Load(new) if expr.access == old else expr
    return expr.map_children(lambda child: replace_load(child, old, new))


# -- packing -------------------------------------------------------------------------------
def _pack(scop: Scop, anchor: Statement, recipe: ScheduleRecipe, name: str, value: Expr, copies: list[Statement], arrays: list[ArrayInfo]) -> Expr:
    reads = [a for a in value.loads() if a.array == name]
    if not reads:
        raise ScheduleError(f"kernel {scop.name}: cannot pack {name}: the anchor statement {anchor.name} does not read it")
    if len(set(reads)) > 1:
        raise ScheduleError(f"kernel {scop.name}: cannot pack {name}: the anchor reads it through {len(set(reads))} different accesses")
    access = reads[0]
    iterators = plain_iterators(access)
    if iterators is None:
        raise ScheduleError(f"kernel {scop.name}: cannot pack {name}: its index {access} is not a permutation of loop iterators")
    depth = shared_band_depth(scop)
    register = {anchor.iterators[k]: size for k, size in enumerate(recipe.register_tile_sizes[:depth]) if size}
    ordered = [it for it in anchor.iterators if it in iterators]
    tiled = [it for it in ordered if it in register]
    if not tiled:
        raise ScheduleError(f"kernel {scop.name}: cannot pack {name}: none of its iterators {ordered} has a register tile")
    rest = [it for it in ordered if it not in register]
    extents = dict(zip(anchor.iterators, anchor.extents))
    source = scop.array(name)
    shape = tuple(-(-extents[it] // register[it]) for it in tiled) + tuple(extents[it] for it in rest) + tuple(register[it] for it in tiled)
    packed_name = _new_array_name(arrays)
    arrays.append(ArrayInfo(packed_name, shape, source.dtype, SCRATCH, f"{source.tensor} (packed)"))
    index = tuple(FloorDiv(AffineExpr.of(it), register[it]) for it in tiled) + tuple(AffineExpr.of(it) for it in rest) + tuple(Modulo(AffineExpr.of(it), register[it]) for it in tiled)
    # The copy statement uses the anchor's iterator names restricted to the packed ones.
    copy_iterators = tuple(ordered)
    copy = Statement(
        _copy_statement_name(copies),
        copy_iterators,
        tuple(extents[it] for it in copy_iterators),
        Access(packed_name, index),
        Load(access),
        node=anchor.node,
        roles=anchor_roles(anchor, copy_iterators),
        copy_kind=CopyKind.DATA_LAYOUT,
    )
    if not _reads_inside(copy, access, source):
        raise ScheduleError(
            f"kernel {scop.name}: cannot pack {name}: the anchor statement {anchor.name} reads it only where its guards hold "
            f"(e.g. one input of a ConcatV2), so a panel over the whole tile would read outside {name}{list(source.shape)}"
        )
    copies.append(copy)
    return replace_load(value, access, Access(packed_name, index))


def reads_inside_box(scop: Scop, anchor: Statement, access: Access) -> bool:
    """True when ``anchor`` reads ``access`` inside its array on the whole box of its
    extents, guards ignored (so a copy over that box, e.g. a packed panel, stays in bounds)."""
    box = Statement(anchor.name, anchor.iterators, anchor.extents, anchor.write, anchor.value)
    return _reads_inside(box, access, scop.array(access.array))


def _reads_inside(statement: Statement, access: Access, array: ArrayInfo) -> bool:
    """True when ``statement`` reads ``access`` only inside ``array``'s shape on its whole domain."""
    touched = statement.access_map(access).range()
    return touched.is_subset(isl.Set(_box_text(array.name, array.shape)))


def packable_operands(scop: Scop) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(array, iterators of its index)`` of each array the anchor statement may pack: a
    kernel input (never an array the kernel writes) that the anchor reads through one
    access whose index is a permutation of its iterators (``B[r0, d1]``), inside the array
    on the whole box of its extents (so that a panel copy stays in bounds). Packing it
    also needs a register tile on one of those iterators."""
    anchor = anchor_statement(scop)
    accesses: dict[str, set[Access]] = {}
    for access in anchor.value.loads():
        if access != anchor.write:
            accesses.setdefault(access.array, set()).add(access)
    result = []
    for array, reads in accesses.items():
        if len(reads) != 1 or scop.array(array).role != "input":
            continue
        (access,) = reads
        names = plain_iterators(access)
        if names is not None and reads_inside_box(scop, anchor, access):
            result.append((array, tuple(names)))
    return tuple(result)


# -- im2col ---------------------------------------------------------------------------------
def plain_iterators(access: Access) -> list[str] | None:
    """The iterators of an access whose every index is a distinct plain iterator
    (``B[r0, d1]``: packable as it is), else None (``X[d0, d1 + r0]``: a window)."""
    names = []
    for index in access.index:
        if not isinstance(index, AffineExpr) or len(index.terms) != 1 or index.terms[0][1] != 1 or index.constant != 0:
            return None
        names.append(index.terms[0][0])
    return names if len(set(names)) == len(names) else None


def im2col_window(anchor: Statement, value: Expr | None = None) -> Access | None:
    """The one windowed read of ``anchor`` that im2col gathers (a read whose index is not a
    permutation of iterators, e.g. a Conv2D's ``X[n, oh + kh, ow + kw, c]``), or None when
    it has none, several, or a non-affine one. ``value``: the anchor's value after padding."""
    value = anchor.value if value is None else value
    windows = [a for a in dict.fromkeys(value.loads()) if a != anchor.write and plain_iterators(a) is None]
    if len(windows) != 1 or any(not isinstance(i, AffineExpr) for i in windows[0].index):
        return None
    return windows[0]


def im2col_applies(scop: Scop) -> bool:
    """True when im2col applies to the anchor statement of ``scop``: a sum of products in
    a shared outer band, with one windowed read of an array that no statement of the kernel
    writes (the gathering copy runs before the kernel's statements), and guards (if any) that
    zero-padding removes first."""
    anchor = anchor_statement(scop)
    window = im2col_window(anchor)
    if window is None or any(statement.write.array == window.array for statement in scop.statements):
        return False
    return bool(shared_band_depth(scop)) and is_sum_of_products(anchor) and (not anchor.constraints or can_zero_pad(scop))


def _im2col(scop: Scop, anchor: Statement, value: Expr, copies: list[Statement], arrays: list[ArrayInfo]) -> Expr:
    access = im2col_window(anchor, value)
    if access is None:
        raise ScheduleError(f"kernel {scop.name}: im2col needs exactly one affine windowed read in statement {anchor.name}")
    used = {name for index in access.index for name, _ in index.terms}
    iterators = tuple(it for it in anchor.iterators if it in used)
    extents = dict(zip(anchor.iterators, anchor.extents))
    source = next(a for a in arrays if a.name == access.array)
    gathered = _new_array_name(arrays)
    shape = tuple(extents[it] for it in iterators)
    arrays.append(ArrayInfo(gathered, shape, source.dtype, SCRATCH, f"{source.tensor} (im2col)"))
    target = Access.of(gathered, *iterators)
    copy = Statement(
        _copy_statement_name(copies), iterators, shape, target, Load(access), node=anchor.node, roles=anchor_roles(anchor, iterators), copy_kind=CopyKind.DATA_LAYOUT
    )
    copies.append(copy)
    return replace_load(value, access, target)


# -- zero padding --------------------------------------------------------------------------
@lru_cache(maxsize=256)
def can_zero_pad(scop: Scop) -> bool:
    """True when zero-padding applies to the anchor statement of ``scop``: it has guarded
    reads, it is a sum of products, and its guards do nothing but keep its affine reads
    in bounds (so that reading zeros outside them adds nothing). Memoised per Scop."""
    anchor = anchor_statement(scop)
    if not anchor.constraints or not is_sum_of_products(anchor):
        return False
    try:
        _zero_pad(scop, anchor, [], list(scop.arrays))
    except ScheduleError:
        return False
    return True


def is_sum_of_products(anchor: Statement) -> bool:
    """True for ``W = W + X * ...`` (a zero factor leaves ``W`` unchanged)."""
    value = anchor.value
    return isinstance(value, Binary) and value.op == "add" and value.lhs == Load(anchor.write) and isinstance(value.rhs, Binary) and value.rhs.op == "mul"


def _product_factors(expr: Expr) -> list[Expr]:
    if isinstance(expr, Binary) and expr.op == "mul":
        return _product_factors(expr.lhs) + _product_factors(expr.rhs)
    return [expr]


def _zero_pad(scop: Scop, anchor: Statement, copies: list[Statement], arrays: list[ArrayInfo]) -> tuple[Expr, tuple[str, ...]]:
    if not anchor.constraints:
        raise ScheduleError(f"kernel {scop.name}: nothing to pad: the anchor statement {anchor.name} has no guarded reads")
    if not is_sum_of_products(anchor):
        raise ScheduleError(f"kernel {scop.name}: cannot zero-pad statement {anchor.name}: it is not a sum of products W = W + X * ...")
    box = Statement(anchor.name, anchor.iterators, anchor.extents, anchor.write, anchor.value)
    box_domain = box.domain()
    value = anchor.value
    guarded = box_domain
    for factor in _product_factors(anchor.value.rhs):
        if not isinstance(factor, Load):
            continue
        access = factor.access
        info = scop.array(access.array)
        if any(isinstance(i, DynamicIndex) for i in access.index):
            continue
        in_bounds = isl.Map(access.to_isl(anchor.name, anchor.iterators)).intersect_range(isl.Set(_box_text(access.array, info.shape))).domain()
        if box_domain.is_subset(in_bounds):
            continue  # never out of bounds: no padding needed
        if not _quasi_affine_indices_inside(box, access, info):
            continue  # a floor division or modulo that leaves its axis: not padded (the guard check below refuses)
        lows, highs = [], []
        for k, index in enumerate(access.index):
            if not isinstance(index, AffineExpr):  # inside its axis (checked above): that axis needs no padding
                lows.append(0)
                highs.append(info.shape[k] - 1)
                continue
            spans = [c * (anchor.extents[anchor.iterators.index(it)] - 1) for it, c in index.terms]
            lows.append(min(index.constant + sum(min(0, s) for s in spans), 0))
            highs.append(max(index.constant + sum(max(0, s) for s in spans), info.shape[k] - 1))
        shape = tuple(h - lo + 1 for lo, h in zip(lows, highs))
        padded_name = _new_array_name(arrays)
        arrays.append(ArrayInfo(padded_name, shape, info.dtype, SCRATCH, f"{info.tensor} (zero-padded)"))
        iterators = tuple(f"d{k}" for k in range(len(shape)))
        halo = " or ".join(f"{it} < {-lo} or {it} >= {-lo + size}" for it, lo, size in zip(iterators, lows, info.shape))

        copies.append(
            Statement(
                _copy_statement_name(copies),
                iterators,
                shape,
                Access.of(padded_name, *iterators),
                Constant(0.0),
                constraints=(f"({halo})",),
                node=anchor.node,
                copy_kind=CopyKind.DATA_LAYOUT,
            )
        )
        copies.append(
            Statement(
                _copy_statement_name(copies),
                iterators,
                info.shape,
                Access.of(padded_name, *(AffineExpr.combine((1, it), constant=-lo) for it, lo in zip(iterators, lows))),
                Load(Access.of(access.array, *iterators)),
                node=anchor.node,
                copy_kind=CopyKind.DATA_LAYOUT,
            )
        )
        shifted = Access(padded_name, tuple(i + (-lo) if lo else i for i, lo in zip(access.index, lows)))
        value = replace_load(value, access, shifted)
        guarded = guarded.intersect(in_bounds)
    if not guarded.is_equal(anchor.domain()):
        raise ScheduleError(f"kernel {scop.name}: cannot zero-pad statement {anchor.name}: its constraints do more than keep reads in bounds")
    return value, ()


def _quasi_affine_indices_inside(box: Statement, access: Access, array: ArrayInfo) -> bool:
    """True when every floor division or modulo index of ``access`` (a grouped
    convolution's ``floor(d3/Og)``) stays inside its axis of ``array`` on the whole box
    ``box``, so that only the affine axes (the convolution window's) need padding."""
    touched = box.access_map(access).range()
    names = [f"i{k}" for k in range(len(array.shape))]
    for k, index in enumerate(access.index):
        if isinstance(index, AffineExpr):
            continue
        axis = isl.Set(f"{{ {array.name}[{', '.join(names)}] : 0 <= i{k} < {array.shape[k]} }}")
        if not touched.is_subset(axis):
            return False
    return True


def _box_text(array: str, shape: tuple[int, ...]) -> str:
    names = [f"i{k}" for k in range(len(shape))]
    bounds = " and ".join(f"0 <= {n} < {s}" for n, s in zip(names, shape))
    return f"{{ {array}[{', '.join(names)}] : {bounds} }}"


__all__ = ["SCRATCH", "ALGORITHMS", "apply_data_layout", "can_zero_pad", "im2col_applies", "im2col_window", "is_sum_of_products", "packable_operands", "plain_iterators", "reads_inside_box", "replace_load"]
