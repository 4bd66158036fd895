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

With register tiles (``register_tile_sizes``), the anchor's inner band holds its
reduction tile loops and the register-tile loops ``floor(d/R)``; below it a mark node
``microkernel`` holds a band of the reduction points and, innermost, a band of the
register-tile points (the micro-kernel the code generator emits with explicit vectors,
after Gareev et al., TACO 2018)::

    for d0/64: for d1/256:                   (outer band, cache tiles)
      C = 0 ...
      for r0/256: for d0/6: for d1/16:       (anchor band)
        mark microkernel:
          for r0: for d0 (6): for d1 (16): C += A*B
      D = C + b ...

Copy statements of data-layout transformations (packing, zero-padding, im2col, Winograd
input transforms) come first, each as its own band over its written index, in a sequence
before that tree; copies over the same points (:func:`~polytf.schedules.shared_nests.copy_groups`)
share one band over their common leading iterators, each copy below it over the rest. After
the anchor of a contraction, statements over the shared dimensions alone that touch each
element at one point (:func:`~polytf.schedules.shared_nests.elementwise_units`) share one
inner band instead of a sweep of the cache tile each.

With ``parallel``, a ``parallel`` mark (:class:`~polytf.schedules.marks.ParallelMark`) names
the loops that may run on all threads: in the outer band, the first member that is a loop
(split into a band of its own, see :func:`mark_parallel_loop`); in each copy nest, every
member of its band. Legality proves exactly these members free of loop-carried
dependences, and the code generator distributes only their loops::

    band [floor(d0/4), d1, d2]               band [floor(d0/4), d1]   (d0 < 4: one tile; d1 < 1:
                                      ->       mark "parallel c2"        isl generates no loop)
                                                 band [d2]               (the loop distributed)

A GPU recipe (:class:`~polytf.schedules.recipe.GpuRecipe`) gets the tree of :mod:`polytf.schedules.gpu_mapping`
instead: blocks and threads marks over the tiled shared band, shared-memory copies
grafted between barriers.

Every call first validates the recipe (:func:`polytf.schedules.validation.validate_recipe`)
and, unless told not to, checks the tree against the Scop's dependences
(:func:`polytf.schedules.legality.check_legality`).
"""

from __future__ import annotations

from dataclasses import dataclass

from polytf.errors import ScheduleError
from polytf.islpy_on_demand import isl
from polytf.poly.affine import AffineExpr
from polytf.poly.scop import Scop
from polytf.poly.statement import Statement
from polytf.schedules.data_layout import apply_data_layout
from polytf.schedules.gpu_grid import GpuLaunch
from polytf.schedules.gpu_mapping import map_to_gpu
from polytf.schedules.gpu_search_space import default_gpu_recipe
from polytf.schedules.legality import check_legality
from polytf.schedules.marks import MicrokernelMark, ParallelMark
from polytf.schedules.recipe import GpuRecipe, ScheduleRecipe
from polytf.schedules.shared_nests import copy_groups, elementwise_units, group_depth
from polytf.schedules.structure import anchor_statement, copy_statements, main_statements, shared_band_depth
from polytf.schedules.target_limits import TargetLimits
from polytf.schedules.tree_nodes import insert_statement_sequence, insert_unit_sequence, partial_schedule, union_domain
from polytf.schedules.validation import validate_recipe


@dataclass(frozen=True)
class InnerBand:
    """Schedule expressions of one statement below the shared outer band.

    Attributes:
        band: the statement's inner band (outermost first).
        microkernel_reductions: reduction points inside the micro-kernel (anchor only).
        microkernel_registers: register-tile points, innermost (anchor only; empty when
            the recipe has no register tile).
        register_sizes: the register tile of each of ``microkernel_registers``.
    """

    band: tuple[str, ...]
    microkernel_reductions: tuple[str, ...] = ()
    microkernel_registers: tuple[str, ...] = ()
    register_sizes: tuple[int, ...] = ()

    def microkernel_mark(self) -> MicrokernelMark:
        """The mark above the micro-kernel: register sizes and the statement iterators they
        tile, outer first (e.g. ``"microkernel 6x16 d0,d1"``)."""
        return MicrokernelMark(self.register_sizes, self.microkernel_registers)


def inner_band(scop: Scop, statement: Statement, recipe: ScheduleRecipe) -> InnerBand:
    """The inner band (and micro-kernel bands) of ``statement`` under a normalised recipe."""
    depth = shared_band_depth(scop)
    tiled_shared = [statement.iterators[k] for k in range(depth) if recipe.tile_sizes[k] > 0]
    own = list(statement.iterators[depth:])
    in_band = set(tiled_shared + own)
    if statement.name != anchor_statement(scop).name:  # by name: the analyses are memoised per equal Scop
        return InnerBand(_contiguous_innermost(statement, tiled_shared, own))
    expressions = []
    for iterator, size in zip(statement.reduction_iterators, recipe.reduction_tile_sizes):
        if size > 0:
            expressions.append(f"floor(({iterator})/{size})")
    register = {statement.iterators[k]: size for k, size in enumerate(recipe.register_tile_sizes) if size}
    if not register:
        return InnerBand(tuple(expressions + [it for it in recipe.point_order if it in in_band]))
    reductions = set(statement.reduction_iterators)
    for iterator in recipe.point_order:
        if iterator in register:
            expressions.append(f"floor(({iterator})/{register[iterator]})")
        elif iterator in in_band and iterator not in reductions:
            expressions.append(iterator)
    return InnerBand(
        tuple(expressions),
        tuple(it for it in recipe.point_order if it in reductions),
        # Register points in the statement's own order: the innermost output dimension is the
        # contiguous one, which the micro-kernel vectorises.
        tuple(it for it in statement.iterators if it in register),
        tuple(register[it] for it in statement.iterators if it in register),
    )


def _contiguous_innermost(statement: Statement, tiled_shared: list[str], own: list[str]) -> tuple[str, ...]:
    """The inner band of a statement other than the anchor: its tiled shared iterators, then
    its own; but when its innermost tiled shared iterator alone indexes the contiguous
    (last) dimension of its write and none of its own does, its own iterators go before
    that one, so the innermost loop stores contiguously (it vectorises). A Winograd kernel's
    zero fill ``M[n, th, tw, e, o] = 0`` over ``(n, th, tw, o, e)`` runs ``for tw: for e:
    for o`` instead of ``for tw: for o: for e`` (a store every α² floats).
    Statements with reductions keep their order (it is their summation order's loop nest)."""
    if not own or not tiled_shared or statement.reduction_iterators:
        return tuple(tiled_shared + own)
    last = statement.write.index[-1] if statement.write.index else None
    innermost = tiled_shared[-1]
    if not isinstance(last, AffineExpr) or last != AffineExpr.of(innermost):
        return tuple(tiled_shared + own)
    return tuple(tiled_shared[:-1] + own + [innermost])


def _insert_band(node: isl.ScheduleNode, statements, expressions) -> isl.ScheduleNode:
    """Insert a band of ``expressions`` (the same for every statement) at ``node``; returns the node below it."""
    return node.insert_partial_schedule(partial_schedule(statements, [lambda _, e=e: e for e in expressions])).child(0)


def _insert_points(node: isl.ScheduleNode, statement: Statement, band: InnerBand, microkernel: bool) -> isl.ScheduleNode:
    """Insert ``statement``'s register-tile points at ``node``, below the micro-kernel mark and
    the reduction points when ``microkernel`` (the anchor); returns the node at the same place."""
    levels = 0
    if microkernel:
        node = node.insert_mark(band.microkernel_mark().to_id()).child(0)
        levels += 1
        if band.microkernel_reductions:
            node = _insert_band(node, [statement], band.microkernel_reductions)
            levels += 1
    node = _insert_band(node, [statement], band.microkernel_registers)
    for _ in range(levels + 1):
        node = node.parent()
    return node


def _insert_inner(node: isl.ScheduleNode, scop: Scop, statement: Statement, recipe: ScheduleRecipe) -> isl.ScheduleNode:
    """Insert the inner bands of ``statement`` at ``node``; returns the node at the same place."""
    band = inner_band(scop, statement, recipe)
    if band.band:
        node = _insert_band(node, [statement], band.band)
    if band.microkernel_registers:
        node = _insert_points(node, statement, band, microkernel=True)
    return node.parent() if band.band else node


def register_tile_run(scop: Scop, recipe: ScheduleRecipe) -> tuple[Statement, ...]:
    """The statements that run once per register tile of the anchor, with it: the longest run
    of main statements around the anchor, in program order, over the anchor's output
    iterators exactly (an accumulator's zero fill before it, a fused epilogue after it: bias,
    activation, residual add; a Winograd kernel's zero fill of its products ``M[n, th, tw, e,
    o]``, over the transformed point ``e`` that its output transform does not share), when
    each element any of them writes is only ever accessed by
    them at the index of its write (so each tile's statements depend on that tile alone). Empty
    when the recipe has no register tile, tiles a reduction (the epilogue would run before the
    sum is complete) or the anchor's inner band has a loop the others do not have.

    The run shares the anchor's register-tile band; below it each statement runs over the
    tile's points (the anchor as its micro-kernel), so the output block a tile writes is still
    in L1 when its epilogue reads it, where before the fill, the micro-kernels and the epilogue
    each swept the whole cache tile::

        before                                   after
        for cache tile:                          for cache tile:
          for d0: for d1: C = 0                    for d0/6: for d1/16:
          for d0/6: for d1/16: micro-kernel          for d0 (6): for d1 (16): C = 0
          for d0: for d1: D = relu(C + b)            micro-kernel
                                                     for d0 (6): for d1 (16): D = relu(C + b)
    """
    if not any(recipe.register_tile_sizes) or any(recipe.reduction_tile_sizes):
        return ()
    statements = main_statements(scop)
    anchor = anchor_statement(scop)
    depth = shared_band_depth(scop)
    shared = set(anchor.iterators[:depth])
    band = inner_band(scop, anchor, recipe)
    registers = dict(zip(band.microkernel_registers, band.register_sizes))
    outputs = anchor.output_iterators
    allowed = shared | set(outputs) | {f"floor(({iterator})/{size})" for iterator, size in registers.items()}
    if not band.microkernel_registers or not set(band.band) <= allowed:
        return ()
    position = statements.index(anchor)
    start = position
    while start > 0 and statements[start - 1].iterators == outputs:
        start -= 1
    end = position + 1
    while end < len(statements) and statements[end].iterators == outputs:
        end += 1
    run = statements[start:end]
    if len(run) < 2:
        return ()
    writes = {}
    for statement in run:
        if writes.setdefault(statement.write.array, statement.write.index) != statement.write.index:
            return ()
    for statement in run:
        if any(access.array in writes and access.index != writes[access.array] for access in statement.reads):
            return ()
    return run


def _insert_register_tile_run(node: isl.ScheduleNode, scop: Scop, run: tuple[Statement, ...], recipe: ScheduleRecipe) -> isl.ScheduleNode:
    """Insert the band of :func:`register_tile_run` and, below it, each statement's points
    (the anchor's micro-kernel); returns the node at the same place."""
    anchor = anchor_statement(scop)
    band = inner_band(scop, anchor, recipe)
    node = _insert_band(node, run, band.band)

    def points(below: isl.ScheduleNode, statement: Statement) -> isl.ScheduleNode:
        return _insert_points(below, statement, band, microkernel=statement.name == anchor.name)

    node = insert_statement_sequence(node, run, points)
    while node.get_type() != isl.schedule_node_type.band:
        node = node.parent()
    return node


def _main_schedule(scop: Scop, recipe: ScheduleRecipe) -> isl.Schedule:
    statements = list(main_statements(scop))
    depth = shared_band_depth(scop)
    schedule = isl.Schedule.from_domain(union_domain(statements))
    node = schedule.get_root().child(0)
    if depth:
        outer = []
        for k in recipe.tile_order:
            size = recipe.tile_sizes[k]
            outer.append((lambda s, k=k, size=size: f"floor(({s.iterators[k]})/{size})") if size > 0 else (lambda s, k=k: s.iterators[k]))
        node = node.insert_partial_schedule(partial_schedule(statements, outer))
        for position in range(depth):
            node = node.band_member_set_coincident(position, True)
        node = mark_parallel_loop(node) if recipe.parallel else node.child(0)
    run = register_tile_run(scop, recipe)
    units = elementwise_units(scop, run)

    def subtree(below: isl.ScheduleNode, unit: tuple[Statement, ...]) -> isl.ScheduleNode:
        if run and unit == run:
            return _insert_register_tile_run(below, scop, unit, recipe)
        if len(unit) > 1:
            return _insert_elementwise_unit(below, scop, unit, recipe)
        return _insert_inner(below, scop, unit[0], recipe)

    return insert_unit_sequence(node, units, subtree).get_schedule()


def _insert_elementwise_unit(node: isl.ScheduleNode, scop: Scop, unit: tuple[Statement, ...], recipe: ScheduleRecipe) -> isl.ScheduleNode:
    """Insert one band of an :func:`elementwise_units` unit's tiled shared iterators and, below
    it, its statements in program order; returns the node at the same place."""
    band = inner_band(scop, unit[0], recipe).band
    if band:
        node = _insert_band(node, unit, band)
    node = insert_statement_sequence(node, unit, lambda below, _: below)
    while node.get_type() != isl.schedule_node_type.band and band:
        node = node.parent()
    return node.parent() if band else node


def _copy_schedule(statement: Statement, parallel: bool = False) -> isl.Schedule:
    """A copy statement iterates in the order of the index it writes (contiguous stores)."""
    schedule = isl.Schedule.from_domain(isl.UnionSet.from_set(statement.domain()))
    expressions = [index.to_isl() for index in statement.write.index]
    node = schedule.get_root().child(0).insert_partial_schedule(partial_schedule([statement], [lambda _, e=e: e for e in expressions]))
    for position in range(len(expressions)):
        node = node.band_member_set_coincident(position, True)
    isolated = _full_rows(statement, node.band_get_partial_schedule())
    if isolated is not None:
        # "isolate" (isl manual, AST generation options): the full panels get code of
        # their own with constant inner bounds (so it vectorises); the last, partial panel
        # of a packed array is generated apart.
        option = isl.Map.from_domain_and_range(isl.Set("{ [] }"), isolated).wrap().set_tuple_name("isolate")
        node = node.band_set_ast_build_options(isl.UnionSet.from_set(option))
    if parallel:
        # Every member may be the parallel loop: a copy writes each element once and reads
        # arrays nothing in its nest writes (legality checks each member). Where isl cuts
        # the nest into parts (the isolated full panels, the last partial one), each part's
        # outermost loop is distributed.
        members = tuple(range(node.get_schedule_depth(), node.get_schedule_depth() + len(expressions)))
        node = node.insert_mark(ParallelMark(members).to_id())
    return node.get_schedule()


def _copy_group_schedule(group: tuple[Statement, ...], parallel: bool = False) -> isl.Schedule:
    """Copies of one :func:`copy_groups` group in one nest: a band over their shared leading
    iterators (:func:`group_depth`: all of them when no copy reads another's, and the copies
    are then one loop body), then each copy in program order over the rest of the index it
    writes, so what one copy writes is still in cache when the next reads it::

        before                                       after
        for n, th, tw, ξ, c: T[.., 0, ξ, c] = ...    for n, th, tw:
        ...                                            for ξ, c: T[.., 0, ξ, c] = ...
        for n, th, tw, ν, c: V[.., ν, c] = ...T...     ...
                                                       for ν, c: V[.., ν, c] = ...T...
    """
    depth = group_depth(group)
    schedule = isl.Schedule.from_domain(union_domain(group))
    node = schedule.get_root().child(0)
    node = node.insert_partial_schedule(partial_schedule(group, [lambda s, k=k: s.iterators[k] for k in range(depth)]))
    for position in range(depth):
        node = node.band_member_set_coincident(position, True)
    if parallel:
        node = node.insert_mark(ParallelMark(tuple(range(node.get_schedule_depth(), node.get_schedule_depth() + depth))).to_id()).child(0)

    def rest(below: isl.ScheduleNode, statement: Statement) -> isl.ScheduleNode:
        if depth == len(statement.iterators):  # every loop shared: the copies are one loop body
            return below
        expressions = [index.to_isl() for index in statement.write.index[depth:]]
        return _insert_band(below, [statement], expressions).parent()

    node = insert_statement_sequence(node.child(0), group, rest)
    return node.get_schedule()


def _single_valued_members(band: isl.ScheduleNode) -> list[bool]:
    """Per member of ``band``: True when it takes one value on the band's domain (isl
    generates no loop for it)."""
    image = isl.Set.from_union_set(band.get_domain().apply(isl.UnionMap.from_multi_union_pw_aff(band.band_get_partial_schedule())))
    members = image.dim(isl.dim_type.set)
    result = []
    for position in range(members):
        values = image.project_out(isl.dim_type.set, position + 1, members - position - 1).project_out(isl.dim_type.set, 0, position)
        result.append(values.is_singleton())
    return result


def mark_parallel_loop(band: isl.ScheduleNode) -> isl.ScheduleNode:
    """Put a :class:`~polytf.schedules.marks.ParallelMark` on the outermost member of
    ``band`` that is a loop (the members before it take one value each, so isl emits no
    loop for them), splitting the band around it; returns the node below the band.

    Before and after, for a band ``[floor(d0/4), d1]`` over ``d0 < 4`` (one tile)::

        for d1:                       mark "parallel c1":
          ...                           for d1:   <- the loop distributed over threads
                                          ...

    The mark names the schedule dimension (``c1``): legality proves exactly that member
    free of loop-carried dependences, and the code generator distributes only the ``for``
    node of that dimension. A band with no loop gets no mark.
    """
    single = _single_valued_members(band)
    if all(single):
        return band.child(0)
    first = single.index(False)
    node = band
    if first > 0:
        node = node.band_split(first).child(0)
    rest = node.band_n_member() > 1
    if rest:
        node = node.band_split(1)
    node = node.insert_mark(ParallelMark((node.get_schedule_depth(),)).to_id()).child(0).child(0)
    return node.child(0) if rest else node


def _full_rows(statement: Statement, band: isl.MultiUnionPwAff) -> isl.Set | None:
    """The band points whose innermost row is complete: ``{ x : (x_0..x_{n-2}) x L ⊆ I }``
    with ``I`` the band's image of the domain and ``L`` every innermost value in ``I``;
    None when every row is complete (or the band has one member)."""
    image = isl.UnionSet.from_set(statement.domain()).apply(isl.UnionMap.from_multi_union_pw_aff(band))
    image = isl.Set.from_union_set(image)
    members = image.dim(isl.dim_type.set)
    if members < 2:
        return None
    prefixes = image.project_out(isl.dim_type.set, members - 1, 1)
    innermost = image.project_out(isl.dim_type.set, 0, members - 1)
    missing = prefixes.flat_product(innermost).subtract(image)
    if missing.is_empty():
        return None
    complete = prefixes.subtract(missing.project_out(isl.dim_type.set, members - 1, 1))
    return complete.flat_product(innermost)


@dataclass(frozen=True)
class ScheduledScop:
    """A Scop after the recipe's data-layout transformations, with its schedule tree.

    Attributes:
        scop: the transformed Scop (copy statements and scratch arrays added).
        recipe: the normalised recipe.
        schedule: the schedule tree of ``scop``.
        constant_copies: copy statements that read only constant arrays (packing a
            weight into register-tile panels): they are not in ``scop`` nor in the
            schedule; the runtime runs them once, when the model is built
            (:mod:`polytf.plan.constant_layout`), and passes their results as
            read-only arguments.
        launch: for a GPU recipe, the grid, block and shared memory of the launch
            (:class:`polytf.schedules.gpu_grid.GpuLaunch`); None on the CPU.
    """

    scop: Scop
    recipe: ScheduleRecipe
    schedule: isl.Schedule
    constant_copies: tuple[Statement, ...] = ()
    launch: GpuLaunch | None = None


def schedule_scop(
    scop: Scop, recipe: ScheduleRecipe, *, check: bool = True, limits: TargetLimits | None = None, constant_arrays: frozenset[str] = frozenset()
) -> ScheduledScop:
    """Validate the recipe (:func:`polytf.schedules.validation.validate_recipe`), apply its
    data-layout transformations and build the schedule tree.

    Args:
        limits: the target's vector lanes and registers, for the recipe's caps.
        constant_arrays: input arrays that hold constants (weights): copy statements that
            read only them leave the kernel (:attr:`ScheduledScop.constant_copies`).

    Raises:
        ScheduleError: the recipe is invalid for the Scop or the target (naming the field
            and the allowed values), or (when ``check``) it violates a dependence (naming
            the dependence).
    """
    recipe = validate_recipe(scop, recipe, limits)
    if isinstance(recipe, GpuRecipe):
        mapped = map_to_gpu(scop, recipe, default_gpu_recipe, check=check)
        return ScheduledScop(mapped.scop, recipe, mapped.schedule, (), mapped.launch)
    prepared = apply_data_layout(scop, recipe)
    ahead = tuple(c for c in copy_statements(prepared) if c.reads and all(a.array in constant_arrays for a in c.reads))
    if ahead:
        prepared = Scop(prepared.name, tuple(s for s in prepared.statements if s not in ahead), prepared.arrays, prepared.ops)
    try:
        result = _main_schedule(prepared, recipe)
        for group in reversed(copy_groups(copy_statements(prepared))):
            copies = _copy_schedule(group[0], recipe.parallel) if len(group) == 1 else _copy_group_schedule(group, recipe.parallel)
            result = copies.sequence(result)
    except isl.Error as error:
        raise ScheduleError(f"kernel {scop.name}: isl could not build the schedule for recipe {recipe.to_json()}: {error}") from None
    if check:
        check_legality(prepared, result)
    return ScheduledScop(prepared, recipe, result, ahead)


def build_schedule(scop: Scop, recipe: ScheduleRecipe, *, check: bool = True, limits: TargetLimits | None = None) -> isl.Schedule:
    """The schedule tree of ``scop`` under ``recipe`` (of the transformed Scop when the
    recipe packs or pads: see :func:`schedule_scop`).

    Raises:
        ScheduleError: the recipe does not fit the Scop, or (when ``check``) it violates a
            dependence; the message names the dependence.
    """
    return schedule_scop(scop, recipe, check=check, limits=limits).schedule


def build_ast(schedule: isl.Schedule) -> isl.AstNode:
    """Loop AST of a schedule (isl's AST generator, Grosser et al., TOPLAS 2015)."""
    build = isl.AstBuild.from_context(isl.Set("{ : }"))
    return build.node_from_schedule(schedule)
