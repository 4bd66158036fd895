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
    iterators, the same names in every statement, with identical extents."""
    statements = main_statements(scop)
    depth = min(len(s.iterators) for s in statements)
    for p in range(depth):
        names = {s.iterators[p] for s in statements}
        extents = {s.extents[p] for s in statements}
        if any(s.roles[p] is not IteratorRole.OUTPUT for s in statements) or len(names) != 1 or len(extents) != 1:
            return p
    return depth


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
