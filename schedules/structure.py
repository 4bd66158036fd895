"""Structure of a fusion group's loop nest: the shared outer band and the anchor.

Statements follow the iterator convention of :mod:`polytf.poly.statement`: ``d*``
iterators index the written tensor, ``r*`` are reductions. Statements of one fusion
group that start with the same ``d0..d{p-1}`` over the same extents can share an outer
band of depth ``p`` (producer-consumer fusion at the granularity of output elements).
"""

from __future__ import annotations

from polytf.poly.scop import Scop
from polytf.poly.statement import Statement


def shared_band_depth(scop: Scop) -> int:
    """Largest ``p`` such that every statement's first ``p`` iterators are
    ``d0..d{p-1}`` with identical extents."""
    depth = min(len(s.output_iterators) for s in scop.statements)
    for p in range(depth):
        names = {s.iterators[p] for s in scop.statements}
        extents = {s.extents[p] for s in scop.statements}
        if names != {f"d{p}"} or len(extents) != 1:
            return p
    return depth


def shared_extents(scop: Scop) -> tuple[int, ...]:
    """Extents of the shared band's dimensions."""
    depth = shared_band_depth(scop)
    return tuple(scop.statements[0].extents[:depth])


def anchor_statement(scop: Scop) -> Statement:
    """The statement with the most iterators (first in program order among equals):
    the MatMul or Conv2D update of a contraction group, the heaviest loop nest."""
    return max(scop.statements, key=lambda s: (len(s.iterators), -scop.statements.index(s)))
