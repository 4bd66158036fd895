"""Memory promotion of a GPU kernel: operands staged in shared memory, the accumulator in registers.

Shared memory (PPCG's ``gpu_group.c``, ``add_copies_group``): an operand the anchor reads
many times over its reduction (a MatMul's ``A`` and ``B``) is copied, one block tile and
reduction tile at a time, into a shared array by a copy statement (:class:`CopyKind.SHARED_MEMORY`)
whose instances are the operand's footprint in that tile; the copies are grafted into the
schedule tree before the anchor's compute (``isl_schedule_node_graft_before``) between two
barriers, the threads of the block copying cyclically, 4 consecutive words at a time where
alignment allows, and rows read down a column by consecutive threads are padded against
bank conflicts::

    for k-tile:                             for k-tile:
      for r in tile: C[d] += A[..] * B[..]     As[..] = A[..]; Bs[..] = B[..]   (all threads)
                                               barrier
                                               for r in tile: C[d] += As[..] * Bs[..]
                                               barrier

Registers (PPCG's promotion to private memory): :func:`promote_accumulator` keeps the
anchor's accumulator in a private array across its reduction tiles.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from polytf.islpy_on_demand import isl
from polytf.poly.affine import AffineExpr, Modulo
from polytf.poly.expression import Access, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import CopyKind, Statement
from polytf.schedules.data_layout import SCRATCH, anchor_roles, apply_data_layout, plain_iterators, replace_load
from polytf.schedules.gpu_grid import GpuTiles, HardwareCoordinate, StatementMapping, gpu_tiles, insert_band, insert_threads
from polytf.schedules.marks import HARDWARE_DIMENSIONS, BarrierMark
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.structure import anchor_statement, copy_statements, shared_band_depth


def stageable_operands(scop: Scop) -> tuple[str, ...]:
    """Arrays the anchor statement may read from shared memory: kernel inputs, or the
    results of data-layout copies (written by an earlier launch), that it reads through one
    access whose every index is a distinct plain iterator (``A[d0, r0]``), when it has a
    reduction to reuse them over."""
    anchor = anchor_statement(scop)
    if not anchor.reduction_iterators:
        return ()
    copied = {s.write.array for s in copy_statements(scop)}
    written = {s.write.array for s in scop.statements} - copied
    accesses: dict[str, set[Access]] = {}
    for access in anchor.value.loads():
        if access != anchor.write:
            accesses.setdefault(access.array, set()).add(access)
    return tuple(
        array
        for array, reads in accesses.items()
        if len(reads) == 1
        and (scop.array(array).role == "input" or array in copied)
        and array not in written
        and scop.array(array).dtype == "float32"
        and plain_iterators(next(iter(reads))) is not None
    )


def _up_to_sequence(node: isl.ScheduleNode) -> isl.ScheduleNode:
    while node.get_type() != isl.schedule_node_type.sequence:
        node = node.parent()
    return node


def _find_barrier(schedule: isl.Schedule) -> isl.ScheduleNode | None:
    pending = [schedule.get_root()]
    while pending:
        node = pending.pop()
        if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() == BarrierMark().name():
            return node
        pending.extend(node.child(i) for i in range(node.n_children()))
    return None


@dataclass(frozen=True)
class Staging:
    """One operand staged in shared memory: the kernel array, its shared array, how each of
    its index dimensions maps into the shared tile, and the copy statement that fills it."""

    array: str
    shared: ArrayInfo
    local: tuple[tuple[str, int], ...]  # per index dimension of the array: ("mod", B) / ("id", 0) / ("zero", 0)
    copy: Statement


def _local_index(kind: tuple[str, int], iterator: str):
    what, size = kind
    if what == "mod":
        return Modulo(AffineExpr.of(iterator), size)
    if what == "zero":
        return AffineExpr.of(0)
    return AffineExpr.of(iterator)


def _local_text(kind: tuple[str, int], iterator: str) -> str:
    what, size = kind
    return f"({iterator} mod {size})" if what == "mod" else ("0" if what == "zero" else iterator)


def stage_operand(scop: Scop, recipe: ScheduleRecipe, tiles: GpuTiles, arrays: list[ArrayInfo], copies: list[Statement], array: str, anchor: Statement) -> tuple[Staging, Access]:
    """The shared copy of ``array``: its shape over one block and reduction tile, the copy
    statement (over the array's index space) and the anchor's read redirected to it."""
    (access,) = {a for a in anchor.value.loads() if a.array == array}
    iterators = plain_iterators(access)
    extents = dict(zip(anchor.iterators, anchor.extents))
    mapped = dict(zip((tiles.iterators[k] for k in tiles.mapped), tiles.block_tiles))
    reduction_tiles = dict(zip(anchor.reduction_iterators, recipe.reduction_tile_sizes))
    kinds, shape = [], []
    for it in iterators:
        extent = extents[it]
        size = mapped.get(it, reduction_tiles.get(it, 0))
        if it in mapped and size == 1:  # one value per block: fixed inside each block
            kinds.append(("zero", 0))
            shape.append(1)
        elif 0 < size < extent:
            kinds.append(("mod", size))
            shape.append(size)
        else:
            kinds.append(("id", 0))
            shape.append(int(scop.array(array).shape[len(kinds) - 1]))
    x_dimension = tiles.iterators[tiles.mapped[-1]] if tiles.mapped else None
    if len(shape) > 1 and shape[-1] % 32 == 0 and x_dimension in iterators[:-1]:
        # consecutive threads (x) read down a column: a padded row puts them in different
        # banks. (Along a row they read consecutive words, or one word: no conflict, and
        # rows stay 16-byte aligned for vector loads.)
        shape[-1] += 1
    source = scop.array(array)
    shared = ArrayInfo(f"{array}_shared", tuple(shape), source.dtype, SCRATCH, f"{source.tensor} (shared memory)")
    arrays.append(shared)
    names = tuple(f"a{j}" for j in range(len(iterators)))
    copy = Statement(
        f"Stage{len(copies)}",
        names,
        tuple(source.shape),
        Access(shared.name, tuple(_local_index(k, n) for k, n in zip(kinds, names))),
        Load(Access(array, tuple(AffineExpr.of(n) for n in names))),
        node=anchor.node,
        roles=anchor_roles(anchor, tuple(iterators)),
        copy_kind=CopyKind.SHARED_MEMORY,
    )
    copies.append(copy)
    redirected = Access(shared.name, tuple(_local_index(k, it) for k, it in zip(kinds, iterators)))
    return Staging(array, shared, tuple(kinds), copy), redirected


#: float32 words a thread copies at once into shared memory (one 128-bit access)
VECTOR_LANES = 4


def _vector_copy(staging: Staging) -> bool:
    """Whether each thread copies :data:`VECTOR_LANES` consecutive words of the innermost
    dimension (a 128-bit load and store where LLVM can prove 16-byte alignment): its tile
    and the array's rows are multiples of 4 words, and the tile's rows are not padded."""
    kind, size = staging.local[-1]
    source_row = int(staging.copy.extents[-1])
    tile_row = size if kind == "mod" else source_row
    return kind != "zero" and tile_row % VECTOR_LANES == 0 and source_row % VECTOR_LANES == 0 and staging.shared.shape[-1] == tile_row


def _copy_threads(staging: Staging, tiles: GpuTiles) -> tuple[list[str], list[str], tuple[str, ...], tuple[HardwareCoordinate, ...]]:
    """Thread band, sequential band, hardware dimensions and thread coordinates of a copy:
    its varying local dimensions, innermost first, cyclically over x, y, z; along the
    innermost, in runs of :data:`VECTOR_LANES` words when :func:`_vector_copy` allows
    (consecutive threads still read consecutive 16-byte chunks: coalesced)."""
    block = dict(zip(HARDWARE_DIMENSIONS, tiles.block_shape()))
    free = [h for h in HARDWARE_DIMENSIONS if block[h] > 1]
    names = staging.copy.iterators
    assigned: dict[int, str] = {}
    for j in reversed(range(len(names))):
        if staging.local[j][0] != "zero" and free:
            assigned[j] = free.pop(0)
    threads, sequential, hardware, coordinates = [], [], [], []
    vector = _vector_copy(staging)
    for j, name in enumerate(names):
        kind = staging.local[j]
        if kind[0] == "zero":
            continue
        local = _local_text(kind, name)
        if j in assigned:
            count = block[assigned[j]]
            width = VECTOR_LANES if vector and j == len(names) - 1 else 1
            threads.append(f"floor(({local})/{width}) mod {count}" if width > 1 else f"({local}) mod {count}")
            sequential.append(f"floor(({local})/{width * count})")
            hardware.append(assigned[j])
            coordinates.append(HardwareCoordinate(assigned[j], name, kind[1] if kind[0] == "mod" else 0, width, count))
        else:
            sequential.append(local)
    if vector and len(names) - 1 in assigned:  # innermost: the 4 consecutive words of one thread
        sequential.append(f"({_local_text(staging.local[-1], names[-1])}) mod {VECTOR_LANES}")
    used = set(hardware)
    coordinates += [HardwareCoordinate(h) for h in HARDWARE_DIMENSIONS if block[h] > 1 and h not in used]
    return threads, sequential, tuple(hardware), tuple(coordinates)


def graft_copies(schedule: isl.Schedule, anchor: Statement, stagings: list[Staging], tiles: GpuTiles) -> tuple[isl.Schedule, list[StatementMapping]]:
    """Graft the copy statements before the barrier-marked compute of the anchor: an
    extension ``{ [outer schedule] -> Stage[a] : a read by the anchor there }`` (the
    footprint, as PPCG's ``add_copies_group``), a barrier after the copies."""
    target = _find_barrier(schedule)
    prefix = target.get_prefix_schedule_union_map().intersect_domain(isl.UnionSet.from_set(anchor.domain()))
    extensions = []
    for staging in stagings:
        (access,) = {a for a in anchor.value.loads() if a.array == staging.array}
        read = isl.UnionMap.from_map(anchor.access_map(access))
        footprint = read.apply_domain(prefix)
        extensions.append(isl.UnionMap.from_map(isl.Map.from_union_map(footprint).set_tuple_name(isl.dim_type.out, staging.copy.name)))
    extension = extensions[0]
    for more in extensions[1:]:
        extension = extension.union(more)
    graft = isl.ScheduleNode.from_extension(extension)
    node = graft.child(0)
    mappings = []
    if len(stagings) > 1:
        filters = isl.UnionSetList.alloc(isl.DEFAULT_CONTEXT, len(stagings))
        for staging in stagings:
            filters = filters.add(isl.UnionSet(f"{{ {staging.copy.name}[{', '.join(staging.copy.iterators)}] }}"))
        node = node.insert_sequence(filters)
    for index, staging in enumerate(stagings):
        place = node.child(index).child(0) if len(stagings) > 1 else node
        threads, sequential, hardware, coordinates = _copy_threads(staging, tiles)
        mappings.append(StatementMapping(staging.copy.name, (), coordinates))
        if threads:
            place = insert_threads(place, [staging.copy], threads, hardware, target.get_schedule_depth())
        if sequential:
            place = insert_band(place, [staging.copy], sequential)
        node = _up_to_sequence(place) if len(stagings) > 1 else place
    while node.get_type() != isl.schedule_node_type.extension:
        node = node.parent()
    node = node.child(0).insert_mark(BarrierMark().to_id())
    while node.get_type() != isl.schedule_node_type.extension:
        node = node.parent()
    return target.graft_before(node).get_schedule(), mappings


def promote_accumulator(scop: Scop, recipe: ScheduleRecipe, tiles: GpuTiles) -> tuple[Scop, tuple[tuple[str, tuple[int, ...]], ...]]:
    """Keep the anchor's accumulator in registers across its reduction tiles (PPCG's
    promotion to private memory): ``P = C`` before the anchor, the anchor accumulates into
    ``P``, ``C = P`` after it, each a statement over the shared dimensions with the same
    thread mapping. Only for an anchor that updates ``C[d...]`` (a permutation of the shared
    dimensions) over tiled reductions, whose tile loops (with their barriers) would
    otherwise read and write ``C`` in global memory once per tile::

        for k-tile: barrier; for r in tile: C[d] += ...        (C in global memory)
        P[d] = C[d]; for k-tile: ...: P[d] += ...; C[d] = P[d] (P in registers)
    """
    anchor = anchor_statement(scop)
    depth = shared_band_depth(scop)
    names = plain_iterators(anchor.write)
    if not (any(recipe.reduction_tile_sizes) and anchor.is_reduction and names is not None):
        return scop, ()
    shared = anchor.iterators[:depth]
    if sorted(names) != sorted(shared) or scop.array(anchor.write.array).dtype != "float32":
        return scop, ()
    source = scop.array(anchor.write.array)
    private = ArrayInfo(f"{source.name}_private", source.shape, source.dtype, SCRATCH, f"{source.tensor} (registers)")
    access = Access(private.name, anchor.write.index)
    extents = anchor.extents[:depth]
    load = Statement("PrivateLoad", shared, extents, access, Load(anchor.write), node=anchor.node, copy_kind=CopyKind.PRIVATE)
    store = Statement("PrivateStore", shared, extents, anchor.write, Load(access), node=anchor.node, copy_kind=CopyKind.PRIVATE)
    rewritten = replace(anchor, write=access, value=replace_load(anchor.value, anchor.write, access))
    statements = []
    for statement in scop.statements:
        statements += [load, rewritten, store] if statement.name == anchor.name else [statement]
    thread_tiles = dict(zip((tiles.iterators[k] for k in tiles.mapped), tiles.thread_tiles))
    tile = tuple(thread_tiles.get(name, 1) for name in names)
    return Scop(scop.name, tuple(statements), (*scop.arrays, private), scop.ops), ((private.name, tile),)


def shared_memory_bytes(scop: Scop, recipe: ScheduleRecipe) -> int:
    """Shared memory per block a validated GPU recipe stages, bytes (without building the tree)."""
    tiles = gpu_tiles(scop, recipe)
    prepared = apply_data_layout(scop, recipe)
    arrays: list[ArrayInfo] = []
    anchor = anchor_statement(prepared)
    for array in recipe.shared_memory:
        stage_operand(prepared, recipe, tiles, arrays, [], array, anchor)
    return sum(shared_array_bytes(a) for a in arrays)


#: alignment of each shared array in the block's shared memory, bytes (128-bit accesses)
SHARED_ALIGNMENT = 16


def shared_array_bytes(array: ArrayInfo) -> int:
    """Bytes of a float32 shared array, rounded up to :data:`SHARED_ALIGNMENT` (its slice of
    the block's shared memory: the next one starts there)."""
    count = 1
    for extent in array.shape:
        count *= int(extent)
    return -(-count * 4 // SHARED_ALIGNMENT) * SHARED_ALIGNMENT


__all__ = [
    "Staging",
    "stageable_operands",
    "stage_operand",
    "graft_copies",
    "promote_accumulator",
    "shared_memory_bytes",
    "SHARED_ALIGNMENT",
    "shared_array_bytes",
    "VECTOR_LANES",
]
