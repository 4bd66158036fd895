"""Which statements share one loop nest (the schedule builder's units of fusion).

Two analyses of a Scop's statements, each a loop fusion that keeps every dependence inside
one point of the fused nest, so it is legal by construction (and checked again by
:func:`~polytf.schedules.legality.check_legality`):

* :func:`copy_groups`: data-layout copies over the same points, e.g. the α² input
  transforms of a Winograd kernel, each read of a copied element by a later copy at the
  point that wrote it (the builder gives the group one band over the shared leading
  iterators: a tile's transforms run while its input is in L1);
* :func:`elementwise_units`: the statements after a contraction's anchor over the shared
  dimensions alone, each reading what the others write only at the point that writes it
  (an epilogue after a tiled reduction, a Winograd kernel's output transform and its
  bias/activation: one loop body, each value still in a register when the next statement
  reads it).

Source: loop fusion as in Kennedy & McKinley, "Maximizing Loop Parallelism and Improving
Data Locality via Loop Fusion and Distribution" (LCPC 1993); element images with isl sets
(isl manual, "Sets and Relations").
"""

from __future__ import annotations

from functools import lru_cache

import islpy as isl

from polytf.poly.affine import AffineExpr
from polytf.poly.scop import Scop
from polytf.poly.statement import Statement
from polytf.schedules.structure import anchor_statement, main_statements, shared_band_depth

__all__ = ["copy_groups", "elementwise_units", "group_depth"]


def _shared_write_prefix(statement: Statement) -> int:
    """How many leading indices of ``statement``'s write are its leading iterators, in order."""
    count = 0
    for index, iterator in zip(statement.write.index, statement.iterators):
        if not isinstance(index, AffineExpr) or index != AffineExpr.of(iterator):
            break
        count += 1
    return count


def copy_groups(copies: tuple[Statement, ...]) -> list[tuple[Statement, ...]]:
    """The copy statements split into groups that share one nest, in program order: a run of
    copies over the same iterators and extents (no constraints) whose writes all begin with
    the same ``k >= 1`` leading iterators, and which read what an earlier copy of the run
    wrote only at that same prefix, is one group (e.g. the α² copies of a Winograd input
    transform ``V[n, th, tw, e, c]``, all over ``(n, th, tw, c)``); every other copy is a
    group of its own."""
    groups: list[tuple[Statement, ...]] = []
    for copy in copies:
        if groups and _joins(groups[-1], copy):
            groups[-1] = (*groups[-1], copy)
        else:
            groups.append((copy,))
    return groups


def group_depth(group: tuple[Statement, ...]) -> int:
    """The leading iterators a copy group's nest shares (at least one loop is left to each copy)."""
    return min(min(_shared_write_prefix(s) for s in group), len(group[0].iterators) - 1)


def _joins(group: tuple[Statement, ...], copy: Statement) -> bool:
    first = group[0]
    if copy.iterators != first.iterators or copy.extents != first.extents or copy.constraints or first.constraints:
        return False
    depth = group_depth((*group, copy))
    if depth < 1:
        return False
    prefix = tuple(AffineExpr.of(it) for it in first.iterators[:depth])
    written = {s.write.array for s in group}
    for statement in (*group, copy):
        if any(a.array in written and tuple(a.index[:depth]) != prefix for a in statement.reads):
            return False
    return True


def elementwise_units(scop: Scop, run: tuple[Statement, ...] = ()) -> list[tuple[Statement, ...]]:
    """The main statements in program order, split into the units that share one loop nest:
    the register-tile ``run`` (:func:`register_tile_run`) as one unit, and, after the anchor of
    a contraction, each longest run of statements over the shared dimensions alone (no
    iterators of their own, no reduction) that read what the run's earlier statements wrote
    only at the index written (so one point of the nest depends on that point alone): a
    fused epilogue of a GEMM whose reduction is tiled, or a Winograd kernel's output
    transform and its epilogue; every other statement is a unit of its own::

        before                                   after
        for tile: for d1: D = C + b              for tile: for d1:
        for tile: for d1: E = relu(D)              D = C + b
                                                   E = relu(D)
    """
    statements = main_statements(scop)
    anchor = anchor_statement(scop)
    depth = shared_band_depth(scop)
    units: list[tuple[Statement, ...]] = []
    position = statements.index(anchor)
    for index, statement in enumerate(statements):
        if run and statement in run:
            if statement == run[0]:
                units.append(run)
            continue
        joinable = (
            index > position
            and anchor.reduction_iterators
            and len(statement.iterators) == depth
            and not statement.reduction_iterators
        )
        if joinable and units and units[-1] != run and _joins_unit(units[-1], statement, position, statements, depth):
            units[-1] = (*units[-1], statement)
        else:
            units.append((statement,))
    return units


def _joins_unit(unit: tuple[Statement, ...], statement: Statement, position: int, statements, depth: int) -> bool:
    """Whether ``statement`` may share the nest of ``unit``: the same iterators and extents;
    every read of an array the unit writes is at one of its write indices (the same point's
    element); writes to one array at different indices never meet (isl: their images are
    disjoint), so each element is written at one point only. The unit itself passed these
    checks when it was built: only ``statement`` against it is checked here."""
    first = unit[0]
    if statements.index(first) <= position or len(first.iterators) != depth or first.reduction_iterators:
        return False
    if first.iterators != statement.iterators or first.extents != statement.extents:
        return False
    members = (*unit, statement)
    writes: dict[str, set] = {}
    for member in members:
        writes.setdefault(member.write.array, set()).add(member.write.index)
    for member in members:
        for access in member.reads:
            if access.array in writes and access.index not in writes[access.array]:
                return False
    image = _write_image(statement)
    for member in unit:
        if member.write.array == statement.write.array and member.write.index != statement.write.index:
            if not _write_image(member).intersect(image).is_empty():
                return False
    return True


@lru_cache(maxsize=4096)
def _write_image(statement: Statement) -> isl.Set:
    """The elements ``statement`` writes over its domain."""
    return statement.access_map(statement.write).intersect_domain(statement.domain()).range()
