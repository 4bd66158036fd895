"""GPU schedules: a Scop's shared band mapped to the blocks and threads of a CUDA grid.

The mapping follows PPCG (Verdoolaege et al., "Polyhedral parallel code generation for
CUDA", TACO 2013; ``gpu.c``, ``gpu_tree.c``): the outer permutable band is tiled, the tile
loops are mapped to blocks and the point loops to threads, and operands that are read
many times are staged in shared memory by copy statements grafted into the tree
(``isl_schedule_node_graft_before``) between barriers. As in Tensor Comprehensions'
mapping options, the recipe says the block tile and the points each thread computes.

Loop nest of a MatMul group (``C = 0; C += A*B``) with block tiles 64x64, thread tiles
4x4, a reduction tile of 16 and ``A``, ``B`` staged (``c*`` are isl's AST iterators)::

    before (identity)                  after (one block: 16x16 threads, each 4x4 points of C)
    for d0: for d1: C = 0              mark gpu_blocks c0:y,c1:x
    for d0: for d1: for r0:            for b0 = floor(d0/64): for b1 = floor(d1/64):   <- blockIdx
        C += A*B                         mark gpu_threads c2:y,c3:x
                                         for t0: for t1:                               <- threadIdx
                                           for d0, d1 in the thread's 4x4: C = 0
                                         for k = floor(r0/16):                         (every thread)
                                           mark barrier                                (after the copies)
                                             As[d0 mod 64, r0 mod 16] = A[...]          (threads cyclic)
                                             Bs[r0 mod 16, d1 mod 64] = B[...]
                                           mark barrier                                (after the compute)
                                             mark gpu_threads: for t0: for t1:
                                               for r0 in the tile: for d0, d1 in 4x4:
                                                 C += As[...] * Bs[...]

Every shared dimension is mapped: the innermost to ``x``, so that consecutive threads
touch consecutive addresses, the next to ``y``, the others to ``z``; when more than one
is on ``z`` (a batch of images: ``[N, H, W, C]``) they are folded into one block
coordinate and each thread covers its block's tile of them. Thread coordinates are absolute (``floor((d mod B)/T)``), so an
instance runs on the same thread in every statement of the group: only the dependences
between instances of one thread (kept by the sequential order) and the barriers around
shared memory order the work. Legality: each mapped member carries no dependence (the
blocks and threads marks are checked like parallel marks,
:mod:`polytf.schedules.legality`); the copies read arrays the kernel never writes.

With reduction tiles, the anchor's accumulator is promoted to registers around them
(:func:`~polytf.schedules.gpu_memory.promote_accumulator`, PPCG's private memory). The recipe's data-layout copies
(zero-padding, im2col) are mapped on their own and run as launches before the kernel's
(:attr:`GpuLaunch.prologue`): the stream orders them, as no barrier inside a launch can.

On the CPU the same tree is run with the mapped bands as ordinary loops and barriers as
nothing (the phases they separate run one after the other), which tests mapping,
staging and bounds on every machine.

The grid (tiles, launch configuration, mapping bands) is :mod:`polytf.schedules.gpu_grid`;
the promotion to shared memory and registers :mod:`polytf.schedules.gpu_memory`; this module
builds the tree from them and checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from polytf.errors import ScheduleError
from polytf.islpy_on_demand import isl
from polytf.poly.scop import Scop
from polytf.poly.statement import CopyKind, Statement
from polytf.schedules.data_layout import apply_data_layout, replace_load
from polytf.schedules.gpu_grid import GpuLaunch, GpuTiles, gpu_tiles, insert_band, insert_threads, statement_mappings
from polytf.schedules.gpu_memory import graft_copies, promote_accumulator, shared_array_bytes, stage_operand, stageable_operands
from polytf.schedules.legality import check_legality, dependences_of
from polytf.schedules.marks import BarrierMark, GpuMark
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.structure import anchor_statement, copy_statements, main_statements, shared_band_depth
from polytf.schedules.tree_nodes import insert_statement_sequence, union_domain


def _point_band(scop: Scop, statement: Statement, recipe: ScheduleRecipe, tiles: GpuTiles) -> list[str]:
    """The statement's loops inside its thread: its points of the mapped dimensions and its
    own iterators (the anchor's in ``point_order``)."""
    depth = shared_band_depth(scop)
    inside = [tiles.iterators[k] for k in tiles.mapped] + list(statement.iterators[depth:])
    if statement.name == anchor_statement(scop).name:
        return [it for it in recipe.point_order if it in inside]
    return inside


def _thread_expressions(tiles: GpuTiles) -> list[str]:
    return [f"floor({tiles.iterators[k]}/{tiles.thread_tiles[k]}) - {tiles.threads[k]}*floor({tiles.iterators[k]}/{tiles.block_tiles[k]})" for k in tiles.threaded]


def _block_expressions(tiles: GpuTiles) -> tuple[list[str], tuple[str, ...]]:
    """The blocks band (one member per hardware dimension, z first) and its hardware."""
    members, hardware = [], []
    if tiles.folded:
        members.append(" + ".join(f"{stride}*floor({name}/{tile})" for name, tile, stride in tiles.folded_terms()))
        hardware.append("z")
    for k in tiles.mapped:
        if not (tiles.folded and tiles.hardware[k] == "z"):
            members.append(f"floor({tiles.iterators[k]}/{tiles.block_tiles[k]})")
            hardware.append(tiles.hardware[k])
    return members, tuple(hardware)


def _statement_subtree(node: isl.ScheduleNode, scop: Scop, statement: Statement, recipe: ScheduleRecipe, tiles: GpuTiles) -> isl.ScheduleNode:
    """Below the shared bands: [reduction tile band, barrier mark (where the staging copies
    are grafted),] threads mark, thread band, point band. Returns a node of the new tree."""
    if statement.name == anchor_statement(scop).name:
        reduction_tiles = [f"floor({it}/{size})" for it, size in zip(statement.reduction_iterators, recipe.reduction_tile_sizes) if size > 0]
        if reduction_tiles:
            node = insert_band(node, [statement], reduction_tiles).child(0)
        if recipe.shared_memory:
            node = node.insert_mark(BarrierMark().to_id()).child(0)
    if tiles.threaded:
        node = insert_threads(node, [statement], _thread_expressions(tiles), tuple(tiles.hardware[k] for k in tiles.threaded))
    points = _point_band(scop, statement, recipe, tiles)
    if points:
        node = insert_band(node, [statement], points)
    return node


def _tree(scop: Scop, recipe: ScheduleRecipe, tiles: GpuTiles) -> isl.Schedule:
    statements = list(main_statements(scop))
    node = isl.Schedule.from_domain(union_domain(statements)).get_root().child(0)
    if tiles.mapped:
        blocks, hardware = _block_expressions(tiles)
        node = insert_band(node, statements, blocks, coincident=True)
        node = node.insert_mark(GpuMark("blocks", tuple(range(len(blocks))), hardware).to_id()).child(0).child(0)
    node = insert_statement_sequence(node, statements, lambda below, s: _statement_subtree(below, scop, s, recipe, tiles))
    return node.get_schedule()


@dataclass(frozen=True)
class GpuSchedule:
    """A GPU-mapped kernel: the Scop with its staging copies and shared arrays, its schedule
    tree and its launch configuration."""

    scop: Scop
    schedule: isl.Schedule
    launch: GpuLaunch


def check_thread_locality(scop: Scop, tiles: GpuTiles) -> None:
    """Every dependence between the statements of one launch joins instances of one thread
    (the same block and thread coordinates), so that no barrier is needed between them:
    ``{ (s -> t) in D : coordinates(s) != coordinates(t) } = {}``. Each statement has its own
    threads band, so the parallel-member check of :func:`check_legality` sees only the
    dependences inside one statement; this one sees those between statements (an epilogue
    that would read its producer's value at another thread's point).

    Raises:
        ScheduleError: naming the dependence kind, the statements and one instance pair.
    """
    statements = main_statements(scop)
    shared = tiles.iterators
    coordinates = [f"floor({shared[k]}/{tiles.block_tiles[k]})" for k in tiles.mapped] + [f"floor({shared[k]}/{tiles.thread_tiles[k]})" for k in tiles.threaded]
    if not coordinates:
        return
    pieces = "; ".join(f"{s.name}[{', '.join(s.iterators)}] -> [{', '.join(coordinates)}]" for s in statements)
    where = isl.UnionMap(f"{{ {pieces} }}")
    names = ", ".join(f"x{i}" for i in range(len(coordinates)))
    same = isl.UnionMap(f"{{ [{names}] -> [{names}] }}")
    for kind, dependence in dependences_of(scop).named():
        crossing = dependence.apply_domain(where).apply_range(where).subtract(same)
        if crossing.is_empty():
            continue
        example = None
        for relation in _maps(dependence):
            mapped = isl.UnionMap.from_map(relation).apply_domain(where).apply_range(where).subtract(same)
            if not mapped.is_empty():
                example = relation
                break
        source, sink = example.get_tuple_name(isl.dim_type.in_), example.get_tuple_name(isl.dim_type.out)
        raise ScheduleError(
            f"kernel {scop.name}: the GPU mapping puts the two ends of the {kind} dependence {source} -> {sink} "
            f"(nodes '{scop.statement(source).node}' -> '{scop.statement(sink).node}') on different threads with no barrier "
            f"between them, e.g. {example.wrap().sample_point()}"
        )


def _maps(union: isl.UnionMap) -> list[isl.Map]:
    found: list[isl.Map] = []
    union.foreach_map(found.append)
    return found


def _copy_phase(prepared: Scop, copy: Statement, copy_recipe: Callable[[Scop], ScheduleRecipe]) -> tuple[isl.Schedule, GpuLaunch]:
    """A data-layout copy (zero-padding, im2col) as a launch of its own before the kernel's
    (a grid-wide barrier between them: the stream's order): its output dimensions mapped by
    ``copy_recipe`` of its one-statement Scop."""
    alone = replace(copy, copy_kind=CopyKind.PROLOGUE)  # a main statement of its own Scop (same name and domain)
    phase = Scop(f"{prepared.name}_{copy.name}", (alone,), prepared.arrays, prepared.ops)
    recipe = copy_recipe(phase)
    tiles = gpu_tiles(phase, recipe)
    return _tree(phase, recipe, tiles), GpuLaunch(tiles.grid(), tiles.block_shape(), mappings=tuple(statement_mappings((alone,), tiles)))


def map_to_gpu(scop: Scop, recipe: ScheduleRecipe, copy_recipe: Callable[[Scop], ScheduleRecipe], *, check: bool = True) -> GpuSchedule:
    """Build the GPU schedule tree of a validated GPU recipe (module docstring): the
    recipe's data-layout copies first, one launch each (:attr:`GpuLaunch.prologue`) mapped
    by ``copy_recipe`` of the copy's one-statement Scop (the schedule builder passes the GPU
    search space's default recipe, as for an element-wise kernel), then the kernel's mapped
    tree.

    Raises:
        ScheduleError: a mapped member carries a dependence, or the sequential order of a
            thread reverses one (when ``check``), naming the dependence.
    """
    tiles = gpu_tiles(scop, recipe)
    prepared = apply_data_layout(scop, recipe)
    prepared, private = promote_accumulator(prepared, recipe, tiles)
    try:
        schedule = _tree(prepared, recipe, tiles)
        phases = [_copy_phase(prepared, copy, copy_recipe) for copy in copy_statements(prepared)]
        for tree, _ in reversed(phases):
            schedule = tree.sequence(schedule)
    except isl.Error as error:
        raise ScheduleError(f"kernel {scop.name}: isl could not build the GPU schedule for recipe {recipe.to_json()}: {error}") from None
    if check:
        check_legality(prepared, schedule)
        main = Scop(prepared.name, main_statements(prepared), prepared.arrays, prepared.ops)
        check_thread_locality(main, tiles)
    mappings = statement_mappings(main_statements(prepared), tiles)
    arrays, copies = list(prepared.arrays), []
    shared = ()
    final = prepared
    if recipe.shared_memory:
        anchor = anchor_statement(prepared)
        missing = [a for a in recipe.shared_memory if a not in stageable_operands(prepared)]
        if missing:
            raise ScheduleError(f"kernel {scop.name}: recipe field shared_memory = {list(recipe.shared_memory)} is invalid; allowed: arrays the anchor still reads through plain iterators after the recipe's data layout, not {missing}")
        stagings, value = [], anchor.value
        for array in recipe.shared_memory:
            staging, redirected = stage_operand(prepared, recipe, tiles, arrays, copies, array, anchor)
            (access,) = {a for a in anchor.value.loads() if a.array == array}
            value = replace_load(value, access, redirected)
            stagings.append(staging)
        rewritten = replace(anchor, value=value)
        try:
            schedule, copy_mappings = graft_copies(schedule, anchor, stagings, tiles)
        except isl.Error as error:
            raise ScheduleError(f"kernel {scop.name}: isl could not graft the shared-memory copies of recipe {recipe.to_json()}: {error}") from None
        mappings += copy_mappings
        shared = tuple(s.shared.name for s in stagings)
        statements = tuple(rewritten if s.name == anchor.name else s for s in prepared.statements) + tuple(copies)
        final = Scop(prepared.name, statements, tuple(arrays), prepared.ops)
    shared_bytes = sum(shared_array_bytes(final.array(name)) for name in shared)
    launch = GpuLaunch(tiles.grid(), tiles.block_shape(), shared, shared_bytes, tuple(mappings), private, tuple(p for _, p in phases))
    return GpuSchedule(final, schedule, launch)


__all__ = ["GpuSchedule", "check_thread_locality", "map_to_gpu"]
