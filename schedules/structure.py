"""Structure of a fusion group's loop nest: the shared outer band and the anchor.

Statements of one fusion group whose leading iterators are output iterators
(:attr:`polytf.poly.statement.IteratorRole.OUTPUT`) of the same names over the same
extents can share an outer band over them (producer-consumer fusion at the granularity of
output elements). The data-layout copy statements the schedules add
(:attr:`polytf.poly.statement.CopyKind.DATA_LAYOUT`) run before the loop nest and take no
part in it.

Every function is memoised per Scop (Scops are immutable values), so that the schedule
builder may ask for the anchor of each statement's band without quadratic cost.
"""

from __future__ import annotations

import re
from functools import lru_cache

from polytf.poly.affine import AffineExpr
from polytf.poly.scop import Scop
from polytf.poly.statement import CopyKind, IteratorRole, Statement


@lru_cache(maxsize=1024)
def main_statements(scop: Scop) -> tuple[Statement, ...]:
    """The statements of the fusion group itself (without data-layout copy statements)."""
    return tuple(s for s in scop.statements if s.copy_kind is not CopyKind.DATA_LAYOUT)


@lru_cache(maxsize=1024)
def copy_statements(scop: Scop) -> tuple[Statement, ...]:
    """The data-layout copy statements, in program order."""
    return tuple(s for s in scop.statements if s.copy_kind is CopyKind.DATA_LAYOUT)


@lru_cache(maxsize=1024)
def shared_band_depth(scop: Scop) -> int:
    """Largest ``p`` such that every main statement's first ``p`` iterators are output
    iterators, the same names in every statement, with identical extents, and one band over
    them (the statements in program order inside) keeps every dependence between the
    statements (:func:`_legal_depth`)."""
    statements = main_statements(scop)
    depth = min(len(s.iterators) for s in statements)
    for p in range(depth):
        names = {s.iterators[p] for s in statements}
        extents = {s.extents[p] for s in statements}
        if any(s.roles[p] is not IteratorRole.OUTPUT for s in statements) or len(names) != 1 or len(extents) != 1:
            depth = p
            break
    if not depth or len(statements) == 1:
        return depth
    if _pieces_of_one_nest(statements, depth):
        depth -= 1
    return depth if _aligned(statements, depth) else _legal_depth(scop, depth)


def _pieces_of_one_nest(statements: tuple[Statement, ...], depth: int) -> bool:
    """Whether the statements are pieces of one loop nest over the same ``depth`` iterators
    with different domains that leave the innermost iterator alone (the phases of a
    ``DepthToSpace`` or a ``ResizeBilinear`` over the output, ``y mod 2 = 1``; a ``Pad``'s halo
    and interior): the innermost loop then stays out of the shared band, so that each
    statement gets a loop of its own below the guards that pick it, once per row, instead
    of a chain of guards at every point of one loop that LLVM cannot vectorise (a 2x
    bilinear upsampling of ``[1, 64, 64, 64]`` with a ReLU: 1.1 ms with the guards in the
    innermost loop, 2 threads)."""
    if any(len(statement.iterators) != depth for statement in statements) or len({statement.constraints for statement in statements}) == 1:
        return False
    innermost = {statement.iterators[-1] for statement in statements}
    return not any(name in innermost for statement in statements for constraint in statement.constraints for name in _NAMES.findall(constraint))


#: the names in an isl constraint
_NAMES = re.compile(r"[A-Za-z_]\w*")


def _aligned(statements: tuple[Statement, ...], depth: int) -> bool:
    """Whether every dependence between the main statements stays at one point of the first
    ``depth`` shared dimensions, shown without isl: each write names every shared dimension
    ``d_q`` in an index of its own (``a·d_q + b``, as an output shifted by a folded padding
    writes ``[d0, d1 + 1, ..]``), and every access to a written array repeats those indices
    up to a shift that never reaches another point (:func:`_same_point`; the common case: a
    contraction and its epilogue, LayerNorm's statistics read back at ``[d0, d1, 0]``). A load from a warm cache builds every kernel's recipe and does no isl
    work; only the kernels this test cannot clear pay for :func:`_legal_depth`."""
    shared = {statement.iterators[q] for statement in statements for q in range(depth)}
    layouts: dict[str, set[tuple[tuple[int, object], ...]]] = {}
    for statement in statements:
        layout = []
        for position, index in enumerate(statement.write.index):
            names = {name for name, _ in index.terms} if isinstance(index, AffineExpr) else set()
            if names & shared:
                if len(index.terms) != 1:
                    return False  # two dimensions in one index: ask isl
                layout.append((position, index))
        if {name for _, index in layout for name, _ in index.terms} != set(statement.iterators[:depth]):
            return False  # a write that does not tell every shared dimension apart: ask isl
        layouts.setdefault(statement.write.array, set()).add(tuple(layout))
    for statement in statements:
        for access in (statement.write, *statement.reads):
            for layout in layouts.get(access.array, ()):
                if not all(_same_point(access.index[position], index) for position, index in layout):
                    return False
    return True


def _same_point(read: object, written: AffineExpr) -> bool:
    """Whether index ``read`` meets index ``written`` (``a·d + b``) only where both are at the same
    ``d``: the same term, and constants less than ``|a|`` apart (Winograd's output tile writes
    ``4·th + i`` for each ``i < 4``: a statement of one ``i`` reads only its own)."""
    return (
        isinstance(read, AffineExpr)
        and read.terms == written.terms
        and abs(read.constant - written.constant) < abs(written.terms[0][1])
    )


def _legal_depth(scop: Scop, depth: int) -> int:
    """The largest ``p <= depth`` such that the band ``S[d0, ..] -> [d0, .., d{p-1}, k]`` (``k``
    the statement's position) maps every dependence between main statements to a pair in
    lexicographic order. Same names and extents do not make the same dimension: after
    LayerNorm over ``[tokens, channels]`` a mean over the tokens iterates ``[channels;
    tokens]``, its ``d1`` the producer's channel where the producer's ``d1`` is a token, and
    a band over ``d1`` would read a token before it is written. Source: Feautrier 1992; the
    isl manual, "Dependence Analysis"."""
    import islpy as isl

    from polytf.schedules.legality import dependences_of  # legality imports this module's callers

    statements = main_statements(scop)
    dependences = dependences_of(scop).all()
    for p in range(1, depth + 1):
        band = isl.UnionMap("{ " + "; ".join(f"{s.name}[{', '.join(s.iterators)}] -> [{', '.join(s.iterators[:p])}, {k}]" for k, s in enumerate(statements)) + " }")
        among = band.domain()  # the main statements: copies run before the band
        scheduled = dependences.intersect_domain(among).intersect_range(among).apply_domain(band).apply_range(band)
        if not scheduled.is_subset(_in_order(p)):
            return p - 1
    return depth


@lru_cache(maxsize=16)
def _in_order(p: int):
    """``{ [x0..x{p-1}, k] -> [y0..y{p-1}, l] }`` where ``x`` precedes ``y`` lexicographically, or
    equals it and ``k <= l`` (a statement before a later one, or the same statement, whose
    own loops inside the band keep its order)."""
    import islpy as isl

    xs, ys = [f"x{q}" for q in range(p)], [f"y{q}" for q in range(p)]
    before = [" and ".join([*(f"{xs[r]} = {ys[r]}" for r in range(q)), f"{xs[q]} < {ys[q]}"]) for q in range(p)]
    same = " and ".join([*(f"{x} = {y}" for x, y in zip(xs, ys)), "k <= l"])
    return isl.UnionMap(f"{{ [{', '.join(xs)}, k] -> [{', '.join(ys)}, l] : {' or '.join([*before, same])} }}")


@lru_cache(maxsize=1024)
def anchor_statement(scop: Scop) -> Statement:
    """The statement with the most iterators (first in program order among equals):
    the MatMul or Conv2D update of a contraction group, the heaviest loop nest.

    Memoised per Scop (Scops are immutable); one pass over the statements."""
    best = None
    for statement in main_statements(scop):
        if best is None or len(statement.iterators) > len(best.iterators):
            best = statement
    return best
