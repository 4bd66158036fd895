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

from functools import lru_cache

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
    return _legal_depth(scop, depth) if depth and len(statements) > 1 else depth


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
