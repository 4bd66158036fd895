"""The CUDA grid of a GPU recipe: block and thread tiles, launch configurations, mapping bands.

A GPU recipe tiles every shared dimension of a Scop (:mod:`polytf.schedules.gpu_mapping`):
:func:`gpu_tiles` normalises its block and thread tiles and assigns each dimension a
hardware dimension (``x`` the innermost, ``y`` the next, ``z`` the others, folded into one
block coordinate when there are several), :class:`GpuTiles` derives the grid and the block
shape, and :class:`HardwareCoordinate` / :class:`StatementMapping` say on which block and
thread each statement instance runs (what the code generator guards with, and what the CPU
emulation checks). :func:`insert_band` and :func:`insert_threads` add the bands and ``gpu_threads``
marks of a mapping to a schedule tree (isl manual, "Schedule Trees":
``isl_schedule_node_insert_partial_schedule``, ``isl_schedule_node_insert_mark``).

Source: PPCG (Verdoolaege et al., "Polyhedral parallel code generation for CUDA", TACO 2013;
``gpu.c``: the tile loops on blocks, the point loops on threads).
"""

from __future__ import annotations

from dataclasses import dataclass

from polytf.islpy_on_demand import isl
from polytf.poly.scop import Scop
from polytf.schedules.marks import HARDWARE_DIMENSIONS, GpuMark
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.structure import anchor_statement, shared_band_depth
from polytf.schedules.target_limits import round_up
from polytf.schedules.tree_nodes import partial_schedule


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


def constant_expression(text: str):
    return lambda _statement, text=text: text


def insert_band(node: isl.ScheduleNode, statements, expressions: list[str], coincident: bool = False) -> isl.ScheduleNode:
    """Insert a band of ``expressions`` (the same for each statement) at ``node``; returns the band."""
    node = node.insert_partial_schedule(partial_schedule(statements, [constant_expression(e) for e in expressions]))
    if coincident:
        for position in range(len(expressions)):
            node = node.band_member_set_coincident(position, True)
    return node


def insert_threads(node: isl.ScheduleNode, statements, expressions: list[str], hardware: tuple[str, ...], depth_offset: int = 0) -> isl.ScheduleNode:
    """A threads mark and a band of ``expressions`` at ``node``; returns the node below the
    band. ``depth_offset``: schedule dimensions above ``node`` that its tree does not have
    (a graft's, inserted below them later)."""
    band = insert_band(node, statements, expressions, coincident=True)
    depth = band.get_schedule_depth() + depth_offset
    mark = GpuMark("threads", tuple(range(depth, depth + len(expressions))), hardware)
    return band.insert_mark(mark.to_id()).child(0).child(0)


def statement_mappings(statements, tiles: GpuTiles) -> list[StatementMapping]:
    """Block and thread coordinates of statements mapped by ``tiles``."""
    blocks = tuple(
        HardwareCoordinate("z", folded=tiles.folded_terms()) if tiles.folded and h == "z" else HardwareCoordinate(h, tiles.iterators[k], 0, b)
        for k, b, h in zip(tiles.mapped, tiles.block_tiles, tiles.hardware)
        if not (tiles.folded and h == "z" and k != tiles.mapped[0])
    )
    threads = tuple(HardwareCoordinate(tiles.hardware[k], tiles.iterators[k], tiles.block_tiles[k], tiles.thread_tiles[k]) for k in tiles.threaded)
    return [StatementMapping(statement.name, blocks, threads) for statement in statements]


__all__ = [
    "HardwareCoordinate",
    "StatementMapping",
    "GpuLaunch",
    "GpuTiles",
    "gpu_tiles",
    "hardware_of",
    "constant_expression",
    "insert_band",
    "insert_threads",
    "statement_mappings",
]
