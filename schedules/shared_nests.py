"""Which statements share one loop nest (the schedule builder's units of fusion).

Two analyses of a Scop's statements, each a loop fusion that keeps every dependence inside
one point of the fused nest, so it is legal by construction (and checked again by
:func:`~polytf.schedules.legality.check_legality`):

* :func:`copy_groups`: data-layout copies over the same points, e.g. the α² input
  transforms of a Winograd kernel, each read of a copied element by a later copy at the
  point that wrote it (the builder gives the group one band over the shared leading
  iterators: a tile's transforms run while its input is in L1);
* :func:`elementwise_units`: the statements after a contraction's anchor over the shared
  dimensions alone, each array they write written at one index and read there only (an
  epilogue after a tiled reduction: one loop body, each value still in a register when the
  next statement reads it). Not a Winograd kernel's m² output transforms, which write one
  array at m² offsets: fused with their epilogue, each iteration read 36 planes of the
  products and wrote 16 rows of the output, and ResNet50 and DenseNet121 ran 4-5% slower in
  the model (A/B in one process), though the kernel alone ran faster.

Source: loop fusion as in Kennedy & McKinley, "Maximizing Loop Parallelism and Improving
Data Locality via Loop Fusion and Distribution" (LCPC 1993).
"""

from __future__ import annotations

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
    """The leading iterators a copy group's nest shares: all of them when no copy of the group
    reads what another writes (one loop body: the α² input transforms of a Winograd kernel,
    each a sum over one tile of the same input, read at one channel), else the shared write
    prefix, with at least one loop left to each copy.

    One loop body for the α² transforms: ResNet50's F(4×4, 3×3) kernel of 28×28×128 took
    732 ms of LLVM optimisation and 359 ms of code generation with 36 loops, 346 and 290 ms
    with one (the loop vectoriser ran once instead of 36 times), and the models ran as fast
    (ResNet50 15.6 and 15.5 ms, InceptionV3 24.4 and 24.5 ms, DenseNet121 12.0 and 12.1 ms,
    medians of three alternating processes, AMD EPYC ``znver5``, 2 threads).
    """
    written = {s.write.array for s in group}
    if len(group) > 1 and not any(access.array in written for s in group for access in s.reads):
        return len(group[0].iterators)
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
    the register-tile ``run`` (:func:`~polytf.schedules.builder.register_tile_run`) as one
    unit, and, after the anchor of a contraction, each longest run of statements over the
    shared dimensions alone (no iterators of their own, no reduction) that write each array
    at one index and read what the run writes only there (so one point of the nest depends
    on that point alone): a fused epilogue of a GEMM whose reduction is tiled; every other
    statement is a unit of its own::

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
    open_unit = False  # units[-1] holds joinable statements only
    for index, statement in enumerate(statements):
        if run and statement in run:
            if statement == run[0]:
                units.append(run)
            open_unit = False
            continue
        # over the shared dimensions alone: the same iterators and extents as every other such statement
        joinable = bool(
            index > position and anchor.reduction_iterators and len(statement.iterators) == depth and not statement.reduction_iterators
        )
        if joinable and open_unit and _touches_each_element_once(units[-1] + (statement,)):
            units[-1] = (*units[-1], statement)
        else:
            units.append((statement,))
        open_unit = joinable
    return units


def _touches_each_element_once(members: tuple[Statement, ...]) -> bool:
    """Whether ``members`` (statements over the same points) may share one nest: each array
    they write written at one index, and read by them only there (so each element is touched
    at one point of the nest, by its one writer and its readers)."""
    writes: dict[str, object] = {}
    for member in members:
        if writes.setdefault(member.write.array, member.write.index) != member.write.index:
            return False
    return all(access.array not in writes or access.index == writes[access.array] for member in members for access in member.reads)
