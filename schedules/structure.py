"""Structure of a fusion group's loop nest: the shared outer band and the anchor.

Statements follow the iterator convention of :mod:`polytf.poly.statement`: ``d*``
iterators index the written tensor, ``r*`` are reductions. Statements of one fusion
group that start with the same ``d0..d{p-1}`` over the same extents can share an outer
band of depth ``p`` (producer-consumer fusion at the granularity of output elements).

Every function is memoised per Scop (Scops are immutable values), so that the schedule
builder may ask for the anchor of each statement's band without quadratic cost.
"""

from __future__ import annotations

from functools import lru_cache

from polytf.poly.scop import Scop
from polytf.poly.statement import Statement

#: ``Statement.op`` of the copy statements added by data-layout transformations
#: (:mod:`polytf.schedules.data_layout`); they run before the loop nest.
COPY_OP = "polytf.copy"


@lru_cache(maxsize=1024)
def main_statements(scop: Scop) -> tuple[Statement, ...]:
    """The statements of the fusion group itself (without data-layout copy statements)."""
    return tuple(s for s in scop.statements if s.op != COPY_OP)


@lru_cache(maxsize=1024)
def copy_statements(scop: Scop) -> tuple[Statement, ...]:
    """The data-layout copy statements, in program order."""
    return tuple(s for s in scop.statements if s.op == COPY_OP)


@lru_cache(maxsize=1024)
def shared_band_depth(scop: Scop) -> int:
    """Largest ``p`` such that every statement's first ``p`` iterators are
    ``d0..d{p-1}`` with identical extents."""
    statements = main_statements(scop)
    depth = min(len(s.output_iterators) for s in statements)
    for p in range(depth):
        names = {s.iterators[p] for s in statements}
        extents = {s.extents[p] for s in statements}
        if names != {f"d{p}"} or len(extents) != 1:
            return p
    return depth


def shared_extents(scop: Scop) -> tuple[int, ...]:
    """Extents of the shared band's dimensions."""
    depth = shared_band_depth(scop)
    return tuple(main_statements(scop)[0].extents[:depth])


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
