"""Builds the isl schedule tree of a Scop from a :class:`ScheduleRecipe`.

Tree shape (isl manual, "Schedule Trees")::

    domain
      band   outer: per shared dimension k, in tile_order,  floor(d_k / T_k)  or  d_k if untiled
        sequence        (program order; omitted for one statement)
          filter S_i
            band   inner: [floor(r / R) for tiled reductions of the anchor]
                          + tiled shared d_k and the statement's own iterators (anchor: point_order)

Example: MatMul + BiasAdd with tile_sizes (0, 64), point_order (r0, d1)::

    before (identity)                       after
    for d0: for d1: C = 0                   for d0: for t1 in d1/64:
    for d0: for d1: for r0: C += A*B            for d1 in tile: C = 0
    for d0: for d1: D = C + b                   for r0: for d1 in tile: C += A*B
                                                for d1 in tile: D = C + b

Each call checks the recipe against the Scop's dependences
(:func:`polytf.schedules.legality.check_legality`).
"""

from __future__ import annotations

import islpy as isl

from polytf.errors import ScheduleError
from polytf.poly.scop import Scop
from polytf.poly.statement import Statement
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.structure import anchor_statement, shared_band_depth


def normalize_recipe(scop: Scop, recipe: ScheduleRecipe) -> ScheduleRecipe:
    """Fill empty fields with their defaults and check the recipe fits ``scop``.

    Raises:
        ScheduleError: a field has the wrong length, a tile order or point order is not a
            permutation, or a size is negative.
    """
    depth = shared_band_depth(scop)
    anchor = anchor_statement(scop)
    reductions = anchor.reduction_iterators
    tile_sizes = recipe.tile_sizes or (0,) * depth
    tile_order = recipe.tile_order or tuple(range(depth))
    reduction_tiles = recipe.reduction_tile_sizes or (0,) * len(reductions)
    point_order = recipe.point_order or anchor.iterators
    if len(tile_sizes) != depth:
        raise ScheduleError(f"kernel {scop.name}: tile_sizes has {len(tile_sizes)} entries, the shared band has {depth} dimensions")
    if sorted(tile_order) != list(range(depth)):
        raise ScheduleError(f"kernel {scop.name}: tile_order {tile_order} is not a permutation of 0..{depth - 1}")
    if len(reduction_tiles) != len(reductions):
        raise ScheduleError(f"kernel {scop.name}: reduction_tile_sizes has {len(reduction_tiles)} entries, the anchor has {len(reductions)} reduction iterators")
    if sorted(point_order) != sorted(anchor.iterators):
        raise ScheduleError(f"kernel {scop.name}: point_order {point_order} is not a permutation of {anchor.iterators}")
    if any(t < 0 for t in tile_sizes + reduction_tiles) or recipe.vector_width < 0 or recipe.unroll < 0:
        raise ScheduleError(f"kernel {scop.name}: negative size in recipe {recipe}")
    return ScheduleRecipe(tile_sizes, tile_order, reduction_tiles, point_order, recipe.vector_width, recipe.unroll, recipe.parallel)


def _is_tiled(size: int, extent: int) -> bool:
    # A tile as large as the extent is still a tile: its point loop moves to the inner band.
    return size > 0


def _member(statements: list[Statement], expression_of) -> isl.MultiUnionPwAff:
    parts = "; ".join(f"{s.name}[{', '.join(s.iterators)}] -> [({expression_of(s)})]" for s in statements)
    return f"{{ {parts} }}"


def _band(statements: list[Statement], expressions: list) -> isl.MultiUnionPwAff:
    members = ", ".join(_member(statements, e) for e in expressions)
    return isl.MultiUnionPwAff(f"[{members}]")


def inner_band_expressions(scop: Scop, statement: Statement, recipe: ScheduleRecipe) -> list[str]:
    """The inner-band schedule expressions of ``statement`` (outermost first)."""
    depth = shared_band_depth(scop)
    extents = statement.extents
    tiled_shared = [f"d{k}" for k in range(depth) if _is_tiled(recipe.tile_sizes[k], extents[k])]
    own = list(statement.iterators[depth:])
    in_band = set(tiled_shared + own)
    if statement is anchor_statement(scop):
        expressions = []
        for iterator, size in zip(statement.reduction_iterators, recipe.reduction_tile_sizes):
            extent = extents[statement.iterators.index(iterator)]
            if _is_tiled(size, extent):
                expressions.append(f"floor(({iterator})/{size})")
        return expressions + [it for it in recipe.point_order if it in in_band]
    return tiled_shared + own


def build_schedule(scop: Scop, recipe: ScheduleRecipe, *, check: bool = True) -> isl.Schedule:
    """The schedule tree of ``scop`` under ``recipe``.

    Raises:
        ScheduleError: the recipe does not fit the Scop, or (when ``check``) it violates a
            dependence; the message names the dependence.
    """
    recipe = normalize_recipe(scop, recipe)
    statements = list(scop.statements)
    depth = shared_band_depth(scop)
    extents = statements[0].extents[:depth]
    try:
        schedule = isl.Schedule.from_domain(scop.domain)
        node = schedule.get_root().child(0)
        if depth:
            outer = []
            for k in recipe.tile_order:
                size = recipe.tile_sizes[k]
                outer.append((lambda s, k=k, size=size: f"floor((d{k})/{size})") if _is_tiled(size, extents[k]) else (lambda s, k=k: f"d{k}"))
            node = node.insert_partial_schedule(_band(statements, outer))
            for position in range(depth):
                node = node.band_member_set_coincident(position, True)
            node = node.child(0)
        if len(statements) > 1:
            filters = isl.UnionSetList.alloc(isl.DEFAULT_CONTEXT, len(statements))
            for s in statements:
                filters = filters.add(isl.UnionSet.from_set(s.domain()))
            node = node.insert_sequence(filters)
            for index, s in enumerate(statements):
                expressions = inner_band_expressions(scop, s, recipe)
                node = node.child(index).child(0)
                if expressions:
                    node = node.insert_partial_schedule(_band([s], [lambda _, e=e: e for e in expressions]))
                node = node.parent().parent()
        else:
            expressions = inner_band_expressions(scop, statements[0], recipe)
            if expressions:
                node = node.insert_partial_schedule(_band(statements, [lambda _, e=e: e for e in expressions]))
        result = node.get_schedule()
    except isl.Error as error:
        raise ScheduleError(f"kernel {scop.name}: isl could not build the schedule for recipe {recipe.to_json()}: {error}") from None
    if check:
        from polytf.schedules.legality import check_legality

        check_legality(scop, result, parallel=recipe.parallel)
    return result


def build_ast(schedule: isl.Schedule) -> isl.AstNode:
    """Loop AST of a schedule (isl's AST generator, Grosser et al., TOPLAS 2015)."""
    build = isl.AstBuild.from_context(isl.Set("{ : }"))
    return build.node_from_schedule(schedule)
