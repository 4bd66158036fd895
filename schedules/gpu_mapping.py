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
(:func:`_promote_accumulator`, PPCG's private memory). The recipe's data-layout copies
(zero-padding, im2col) are mapped on their own and run as launches before the kernel's
(:attr:`GpuLaunch.prologue`): the stream orders them, as no barrier inside a launch can.

On the CPU the same tree is run with the mapped bands as ordinary loops and barriers as
nothing (the phases they separate run one after the other), which tests mapping,
staging and bounds on every machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import islpy as isl

from polytf.errors import ScheduleError
from polytf.poly.affine import AffineExpr, Modulo
from polytf.poly.expression import Access, Load
from polytf.poly.scop import ArrayInfo, Scop
from polytf.poly.statement import CopyKind, Statement
from polytf.schedules.data_layout import SCRATCH, _replace_load, anchor_roles, apply_data_layout, plain_iterators
from polytf.schedules.legality import check_legality, dependences_of
from polytf.schedules.marks import HARDWARE_DIMENSIONS, BarrierMark, GpuMark
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.structure import anchor_statement, copy_statements, main_statements, shared_band_depth
from polytf.schedules.target_limits import round_up
from polytf.schedules.tree_nodes import insert_statement_sequence, partial_schedule, union_domain


@dataclass(frozen=True)
class HardwareCoordinate:
    """The block or thread coordinate along ``hardware`` of a statement instance:
    ``floor(residue / divisor)``, taken modulo ``cycle`` when ``cycle`` is not 0, where
    ``residue`` is ``iterator mod modulus`` (``iterator`` when ``modulus`` is 0). An empty
    ``iterator`` means the coordinate is 0 (the statement uses one thread along it), unless
    ``folded`` gives ``(iterator, divisor, stride)`` terms: the coordinate is then
    ``sum(floor(iterator / divisor) * stride)`` (outer dimensions sharing the grid's z)."""

    hardware: str
    iterator: str = ""
    modulus: int = 0
    divisor: int = 1
    cycle: int = 0
    folded: tuple[tuple[str, int, int], ...] = ()

    def evaluate(self, point: dict[str, int]) -> int:
        if self.folded:
            return sum(point[name] // divisor * stride for name, divisor, stride in self.folded)
        if not self.iterator:
            return 0
        residue = point[self.iterator] % self.modulus if self.modulus else point[self.iterator]
        value = residue // self.divisor
        return value % self.cycle if self.cycle else value


@dataclass(frozen=True)
class StatementMapping:
    """Where the instances of one statement run: block coordinates (empty for a staging
    copy, which every block runs into its own shared memory) and thread coordinates."""

    statement: str
    blocks: tuple[HardwareCoordinate, ...]
    threads: tuple[HardwareCoordinate, ...]


@dataclass(frozen=True)
class GpuLaunch:
    """The launch configuration of a GPU-mapped kernel.

    Attributes:
        grid: blocks along x, y, z.
        block: threads per block along x, y, z.
        shared_arrays: arrays of the scheduled Scop that live in shared memory (one copy
            per block; on the GPU they are not kernel arguments).
        shared_memory_bytes: dynamic shared memory per block, bytes.
        private_arrays: ``(array, tile)`` of each array that lives in a thread's registers
            (an accumulator promoted around the reduction tiles): the Scop gives it the
            shape of the array it stands for, indexed by the same iterators; on the GPU each
            thread keeps only its ``tile`` of it (index ``d_k mod tile_k``).
        mappings: per statement, its block and thread coordinates (the code generator
            guards an instance whose mapped loop isl did not generate with them).
        prologue: the launches of the recipe's data-layout copies (zero-padding, im2col),
            which run first, in order, each a kernel of its own (the AST's first top-level
            nodes); this launch is the last node's.
    """

    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    shared_arrays: tuple[str, ...] = ()
    shared_memory_bytes: int = 0
    mappings: tuple[StatementMapping, ...] = ()
    private_arrays: tuple[tuple[str, tuple[int, ...]], ...] = ()
    prologue: tuple[GpuLaunch, ...] = ()

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def mapping_of(self, statement: str) -> StatementMapping | None:
        for mapping in self.mappings:
            if mapping.statement == statement:
                return mapping
        return None


@dataclass(frozen=True)
class GpuTiles:
    """A GPU recipe's tiles, normalised, per shared dimension (outermost first): block tile
    ``B``, thread tile ``T`` (``B`` a multiple of ``T``) and hardware dimension (``x`` the
    innermost, ``y`` the next, ``z`` the others). When more than one dimension is on ``z``
    they are *folded*: one block coordinate ``sum(floor(d_k / B_k) * stride_k)``, and each
    thread computes the whole block tile along them (``T = B``). ``iterators[k]`` is the
    output iterator of shared dimension ``k`` (the same in every statement of the band)."""

    mapped: tuple[int, ...]
    block_tiles: tuple[int, ...]
    thread_tiles: tuple[int, ...]
    hardware: tuple[str, ...]
    extents: tuple[int, ...] = ()
    iterators: tuple[str, ...] = ()

    @property
    def folded(self) -> bool:
        return self.hardware.count("z") > 1

    @property
    def threads(self) -> tuple[int, ...]:
        """Threads along each dimension (``B / T``)."""
        return tuple(b // t for b, t in zip(self.block_tiles, self.thread_tiles))

    @property
    def threaded(self) -> tuple[int, ...]:
        """The dimensions with a thread coordinate (all but folded ones)."""
        return tuple(k for k, h in zip(self.mapped, self.hardware) if not (self.folded and h == "z"))

    def block_counts(self) -> tuple[int, ...]:
        """Blocks along each dimension."""
        return tuple(-(-e // b) for e, b in zip(self.extents, self.block_tiles))

    def folded_terms(self) -> tuple[tuple[str, int, int], ...]:
        """``(iterator, block tile, stride)`` of the dimensions on z (strides row-major over
        their block counts)."""
        on_z = [k for k, h in zip(self.mapped, self.hardware) if h == "z"]
        counts = self.block_counts()
        terms, stride = [], 1
        for k in reversed(on_z):
            terms.append((self.iterators[k], self.block_tiles[k], stride))
            stride *= counts[k]
        return tuple(reversed(terms))

    def block_shape(self) -> tuple[int, int, int]:
        """Threads per block along x, y, z."""
        counts = {self.hardware[k]: self.threads[k] for k in self.threaded}
        return tuple(counts.get(h, 1) for h in HARDWARE_DIMENSIONS)

    def grid(self) -> tuple[int, int, int]:
        """Blocks along x, y, z."""
        counts = dict.fromkeys(HARDWARE_DIMENSIONS, 1)
        for k, count in zip(self.mapped, self.block_counts()):
            counts[self.hardware[k]] *= count
        return tuple(counts[h] for h in HARDWARE_DIMENSIONS)


def hardware_of(depth: int) -> tuple[str, ...]:
    """The hardware dimension of each of ``depth`` shared dimensions: ``x`` the innermost,
    ``y`` the next, ``z`` every other."""
    return tuple("x" if k == depth - 1 else "y" if k == depth - 2 else "z" for k in range(depth))


def gpu_tiles(scop: Scop, recipe: ScheduleRecipe) -> GpuTiles:
    """The normalised tiles of a validated GPU recipe: a block tile of 0 (or beyond the
    extent) covers the extent, rounded up to the thread tile; a folded dimension's thread
    tile is its block tile."""
    depth = shared_band_depth(scop)
    anchor = anchor_statement(scop)
    extents = tuple(int(e) for e in anchor.extents[:depth])
    hardware = hardware_of(depth)
    folded = hardware.count("z") > 1
    block_tiles, thread_tiles = [], []
    for k in range(depth):
        thread = max(1, recipe.thread_tile_sizes[k])
        size = recipe.tile_sizes[k]
        if folded and hardware[k] == "z":
            block = extents[k] if size == 0 or size >= extents[k] else size
            thread = block
        else:
            block = round_up(extents[k], thread) if size == 0 or size >= extents[k] else size
        block_tiles.append(block)
        thread_tiles.append(thread)
    return GpuTiles(tuple(range(depth)), tuple(block_tiles), tuple(thread_tiles), hardware, extents, anchor.iterators[:depth])


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


def _constant(text: str):
    return lambda _statement, text=text: text


def _insert_band(node: isl.ScheduleNode, statements, expressions: list[str], coincident: bool = False) -> isl.ScheduleNode:
    """Insert a band of ``expressions`` (the same for each statement) at ``node``; returns the band."""
    node = node.insert_partial_schedule(partial_schedule(statements, [_constant(e) for e in expressions]))
    if coincident:
        for position in range(len(expressions)):
            node = node.band_member_set_coincident(position, True)
    return node


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


def _insert_threads(node: isl.ScheduleNode, statements, expressions: list[str], hardware: tuple[str, ...], depth_offset: int = 0) -> isl.ScheduleNode:
    """A threads mark and a band of ``expressions`` at ``node``; returns the node below the
    band. ``depth_offset``: schedule dimensions above ``node`` that its tree does not have
    (a graft's, inserted below them later)."""
    band = _insert_band(node, statements, expressions, coincident=True)
    depth = band.get_schedule_depth() + depth_offset
    mark = GpuMark("threads", tuple(range(depth, depth + len(expressions))), hardware)
    return band.insert_mark(mark.to_id()).child(0).child(0)


def _statement_subtree(node: isl.ScheduleNode, scop: Scop, statement: Statement, recipe: ScheduleRecipe, tiles: GpuTiles) -> isl.ScheduleNode:
    """Below the shared bands: [reduction tile band, barrier mark (where the staging copies
    are grafted),] threads mark, thread band, point band. Returns a node of the new tree."""
    if statement.name == anchor_statement(scop).name:
        reduction_tiles = [f"floor({it}/{size})" for it, size in zip(statement.reduction_iterators, recipe.reduction_tile_sizes) if size > 0]
        if reduction_tiles:
            node = _insert_band(node, [statement], reduction_tiles).child(0)
        if recipe.shared_memory:
            node = node.insert_mark(BarrierMark().to_id()).child(0)
    if tiles.threaded:
        node = _insert_threads(node, [statement], _thread_expressions(tiles), tuple(tiles.hardware[k] for k in tiles.threaded))
    points = _point_band(scop, statement, recipe, tiles)
    if points:
        node = _insert_band(node, [statement], points)
    return node


def _tree(scop: Scop, recipe: ScheduleRecipe, tiles: GpuTiles) -> isl.Schedule:
    statements = list(main_statements(scop))
    node = isl.Schedule.from_domain(union_domain(statements)).get_root().child(0)
    if tiles.mapped:
        blocks, hardware = _block_expressions(tiles)
        node = _insert_band(node, statements, blocks, coincident=True)
        node = node.insert_mark(GpuMark("blocks", tuple(range(len(blocks))), hardware).to_id()).child(0).child(0)
    node = insert_statement_sequence(node, statements, lambda below, s: _statement_subtree(below, scop, s, recipe, tiles))
    return node.get_schedule()


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
class _Staging:
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


def _stage(scop: Scop, recipe: ScheduleRecipe, tiles: GpuTiles, arrays: list[ArrayInfo], copies: list[Statement], array: str, anchor: Statement) -> tuple[_Staging, Access]:
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
    return _Staging(array, shared, tuple(kinds), copy), redirected


#: float32 words a thread copies at once into shared memory (one 128-bit access)
VECTOR_LANES = 4


def _vector_copy(staging: _Staging) -> bool:
    """Whether each thread copies :data:`VECTOR_LANES` consecutive words of the innermost
    dimension (a 128-bit load and store where LLVM can prove 16-byte alignment): its tile
    and the array's rows are multiples of 4 words, and the tile's rows are not padded."""
    kind, size = staging.local[-1]
    source_row = int(staging.copy.extents[-1])
    tile_row = size if kind == "mod" else source_row
    return kind != "zero" and tile_row % VECTOR_LANES == 0 and source_row % VECTOR_LANES == 0 and staging.shared.shape[-1] == tile_row


def _copy_threads(staging: _Staging, tiles: GpuTiles) -> tuple[list[str], list[str], tuple[str, ...], tuple[HardwareCoordinate, ...]]:
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


def _graft_copies(schedule: isl.Schedule, anchor: Statement, stagings: list[_Staging], tiles: GpuTiles) -> tuple[isl.Schedule, list[StatementMapping]]:
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
            place = _insert_threads(place, [staging.copy], threads, hardware, target.get_schedule_depth())
        if sequential:
            place = _insert_band(place, [staging.copy], sequential)
        node = _up_to_sequence(place) if len(stagings) > 1 else place
    while node.get_type() != isl.schedule_node_type.extension:
        node = node.parent()
    node = node.child(0).insert_mark(BarrierMark().to_id())
    while node.get_type() != isl.schedule_node_type.extension:
        node = node.parent()
    return target.graft_before(node).get_schedule(), mappings


def _promote_accumulator(scop: Scop, recipe: ScheduleRecipe, tiles: GpuTiles) -> tuple[Scop, tuple[tuple[str, tuple[int, ...]], ...]]:
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
    rewritten = replace(anchor, write=access, value=_replace_load(anchor.value, anchor.write, access))
    statements = []
    for statement in scop.statements:
        statements += [load, rewritten, store] if statement.name == anchor.name else [statement]
    thread_tiles = dict(zip((tiles.iterators[k] for k in tiles.mapped), tiles.thread_tiles))
    tile = tuple(thread_tiles.get(name, 1) for name in names)
    return Scop(scop.name, tuple(statements), (*scop.arrays, private), scop.ops), ((private.name, tile),)


@dataclass(frozen=True)
class GpuSchedule:
    """A GPU-mapped kernel: the Scop with its staging copies and shared arrays, its schedule
    tree and its launch configuration."""

    scop: Scop
    schedule: isl.Schedule
    launch: GpuLaunch


def _mappings(statements, tiles: GpuTiles) -> list[StatementMapping]:
    """Block and thread coordinates of statements mapped by ``tiles``."""
    blocks = tuple(
        HardwareCoordinate("z", folded=tiles.folded_terms()) if tiles.folded and h == "z" else HardwareCoordinate(h, tiles.iterators[k], 0, b)
        for k, b, h in zip(tiles.mapped, tiles.block_tiles, tiles.hardware)
        if not (tiles.folded and h == "z" and k != tiles.mapped[0])
    )
    threads = tuple(HardwareCoordinate(tiles.hardware[k], tiles.iterators[k], tiles.block_tiles[k], tiles.thread_tiles[k]) for k in tiles.threaded)
    return [StatementMapping(statement.name, blocks, threads) for statement in statements]


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
    return _tree(phase, recipe, tiles), GpuLaunch(tiles.grid(), tiles.block_shape(), mappings=tuple(_mappings((alone,), tiles)))


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
    prepared, private = _promote_accumulator(prepared, recipe, tiles)
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
    mappings = _mappings(main_statements(prepared), tiles)
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
            staging, redirected = _stage(prepared, recipe, tiles, arrays, copies, array, anchor)
            (access,) = {a for a in anchor.value.loads() if a.array == array}
            value = _replace_load(value, access, redirected)
            stagings.append(staging)
        rewritten = replace(anchor, value=value)
        try:
            schedule, copy_mappings = _graft_copies(schedule, anchor, stagings, tiles)
        except isl.Error as error:
            raise ScheduleError(f"kernel {scop.name}: isl could not graft the shared-memory copies of recipe {recipe.to_json()}: {error}") from None
        mappings += copy_mappings
        shared = tuple(s.shared.name for s in stagings)
        statements = tuple(rewritten if s.name == anchor.name else s for s in prepared.statements) + tuple(copies)
        final = Scop(prepared.name, statements, tuple(arrays), prepared.ops)
    shared_bytes = sum(shared_array_bytes(final.array(name)) for name in shared)
    launch = GpuLaunch(tiles.grid(), tiles.block_shape(), shared, shared_bytes, tuple(mappings), private, tuple(p for _, p in phases))
    return GpuSchedule(final, schedule, launch)


def shared_memory_bytes(scop: Scop, recipe: ScheduleRecipe) -> int:
    """Shared memory per block a validated GPU recipe stages, bytes (without building the tree)."""
    tiles = gpu_tiles(scop, recipe)
    prepared = apply_data_layout(scop, recipe)
    arrays: list[ArrayInfo] = []
    anchor = anchor_statement(prepared)
    for array in recipe.shared_memory:
        _stage(prepared, recipe, tiles, arrays, [], array, anchor)
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
    "HardwareCoordinate",
    "StatementMapping",
    "GpuLaunch",
    "GpuTiles",
    "GpuSchedule",
    "gpu_tiles",
    "hardware_of",
    "stageable_operands",
    "map_to_gpu",
    "shared_memory_bytes",
    "SHARED_ALIGNMENT",
    "shared_array_bytes",
]
