"""The one validation of a :class:`ScheduleRecipe` against its kernel and target.

Every path to code generation (compiling a kernel, ``polytf show``, a tuning candidate,
a recipe read from a cache record) goes through :func:`validate_recipe`, which
:func:`polytf.schedules.builder.schedule_scop` calls before anything else. It checks
what the schedule builder, the data-layout transformations and the code generator
assume, so that a recipe can make polytf neither crash nor compute wrong values:

- types, exactly (:data:`polytf.schedules.recipe.FIELD_TYPES`: a bool is not an int,
  ``"3"`` and ``3.0`` are not ints);
- lengths: one tile size per shared dimension, one reduction tile per reduction iterator
  of the anchor statement;
- ranges and caps: ``unroll`` at most :data:`MAX_UNROLL`; ``vector_width`` one of
  :data:`VECTOR_WIDTHS`; a cache tile at most its dimension's extent (rounded up to a
  multiple of the register tile, as :meth:`SearchSpace.recipe` rounds it); a reduction
  tile at most its iterator's extent; a register tile at most the extent (the vectorised,
  innermost one: the extent rounded up to the vector lanes), with its accumulators, one
  vector register per ``lanes`` values, fitting the target's vector registers
  (:class:`TargetLimits`), which also bounds the unrolled micro-kernel;
- names: ``tile_order`` a permutation of the shared dimensions, ``point_order`` a
  permutation of the anchor statement's iterators, ``pack`` distinct arrays among those
  the anchor may pack (kernel inputs it reads through a permutation of its iterators,
  one of them register-tiled: never an array the kernel writes), ``pad`` only for a sum
  of products whose guards only keep its reads in bounds, ``algorithm`` one of
  :data:`~polytf.schedules.data_layout.ALGORITHMS` (``im2col`` only for a sum of products
  with one windowed read);
- ``parallel`` only with a shared outer band to distribute.

Dependences are checked afterwards, on the schedule tree (:mod:`polytf.schedules.legality`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from polytf.errors import ScheduleError
from polytf.poly.scop import Scop
from polytf.schedules.data_layout import ALGORITHMS, can_zero_pad, im2col_applies, packable_operands
from polytf.schedules.recipe import FIELD_TYPES, ScheduleRecipe, field_type_error
from polytf.schedules.structure import anchor_statement, shared_band_depth

#: Largest ``unroll`` count (LLVM's own unroller takes it as is; larger ones only bloat code).
MAX_UNROLL = 32
#: blocks a CUDA grid may have along x, y, z
GRID_LIMITS = (2**31 - 1, 65535, 65535)
#: Allowed ``vector_width`` values (0: LLVM decides; 1: no vectorisation).
VECTOR_WIDTHS = (0, 1, 2, 4, 8, 16)


@dataclass(frozen=True)
class TargetLimits:
    """What recipe validation needs to know of the target.

    The defaults are conservative: x86-64 with AVX2 (8 float32 lanes, 16 vector
    registers), whose caps also hold on AVX-512 machines.

    Attributes:
        vector_lanes: float32 lanes of a vector register (16 with AVX-512, 8 with AVX2).
        vector_registers: vector registers (32 with AVX-512, 16 with AVX2).
    """

    vector_lanes: int = 8
    vector_registers: int = 16
    #: GPU: threads per block and shared memory per block (bytes) a launch may use
    max_threads_per_block: int = 1024
    shared_memory_per_block: int = 48 * 1024

    def accumulators(self, register_sizes: tuple[int, ...]) -> int:
        """Vector registers the accumulators of a register tile take: the product of its
        sizes, the innermost (vectorised) one counted in vectors of ``vector_lanes``."""
        sizes = [size for size in register_sizes if size]
        if not sizes:
            return 0
        count = -(-sizes[-1] // self.vector_lanes)
        for size in sizes[:-1]:
            count *= size
        return count


def _invalid(scop: Scop, field: str, value, allowed: str) -> ScheduleError:
    shown = list(value) if isinstance(value, tuple) else value
    return ScheduleError(f"kernel {scop.name}: recipe field {field} = {shown!r} is invalid; allowed: {allowed}")


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is at least ``value``."""
    return -(-value // multiple) * multiple


def _check_types(scop: Scop, recipe: ScheduleRecipe) -> ScheduleRecipe:
    """The recipe with list fields as tuples, or ScheduleError naming the first mistyped field."""
    values = {}
    for name in FIELD_TYPES:
        value = getattr(recipe, name)
        problem = field_type_error(name, value)
        if problem:
            raise ScheduleError(f"kernel {scop.name}: recipe field {problem}")
        values[name] = tuple(value) if FIELD_TYPES[name][1] else value
    return ScheduleRecipe(**values)


def _check_register_tiles(scop: Scop, registers: tuple[int, ...], extents: list[int], limits: TargetLimits) -> None:
    tiled = [k for k, size in enumerate(registers) if size]
    for k, (size, extent) in enumerate(zip(registers, extents)):
        vectorised = bool(tiled) and k == tiled[-1]
        largest = round_up(extent, limits.vector_lanes) if vectorised else extent
        if not 0 <= size <= largest:
            what = "the vectorised innermost register tile: the extent rounded up to the vector lanes" if vectorised else "the extent"
            raise _invalid(scop, "register_tile_sizes", registers, f"0 to {largest} for d{k} (extent {extent}; {what})")
    if limits.accumulators(registers) > limits.vector_registers:
        raise _invalid(
            scop,
            "register_tile_sizes",
            registers,
            f"tiles whose accumulators fit {limits.vector_registers} vector registers of {limits.vector_lanes} float32 lanes "
            f"(rows x ceil(columns / {limits.vector_lanes}) <= {limits.vector_registers}); this one needs {limits.accumulators(registers)}",
        )


def _check_tiles(scop: Scop, tiles: tuple[int, ...], registers: tuple[int, ...], extents: list[int]) -> None:
    for k, (size, register, extent) in enumerate(zip(tiles, registers, extents)):
        if register:
            largest = round_up(extent, register)
            if not register <= size <= largest or size % register:
                raise _invalid(scop, "tile_sizes", tiles, f"a multiple of d{k}'s register tile {register} from {register} to {largest} (extent {extent})")
        elif not 0 <= size <= extent:
            raise _invalid(scop, "tile_sizes", tiles, f"0 to {extent} for d{k} (0: untiled)")


def _check_data_layout(scop: Scop, recipe: ScheduleRecipe, register_tiles: tuple[int, ...]) -> None:
    anchor = anchor_statement(scop)
    if recipe.algorithm not in ALGORITHMS:
        raise _invalid(scop, "algorithm", recipe.algorithm, ", ".join(ALGORITHMS))
    if recipe.algorithm == "im2col" and not im2col_applies(scop):
        raise _invalid(scop, "algorithm", recipe.algorithm, f"direct (statement {anchor.name} is not a sum of products with one windowed read)")
    if recipe.pad and not can_zero_pad(scop):
        raise _invalid(scop, "pad", True, f"false (statement {anchor.name} is not a sum of products whose guards only keep its reads in bounds)")
    operands = packable_operands(scop) if recipe.pack else ()  # isl work: only when a recipe packs
    registers = {f"d{k}" for k, size in enumerate(register_tiles) if size}
    packable = [array for array, iterators in operands if registers & set(iterators)]
    if len(set(recipe.pack)) != len(recipe.pack) or any(name not in packable for name in recipe.pack):
        every = [array for array, _ in operands]
        raise _invalid(
            scop,
            "pack",
            recipe.pack,
            f"distinct arrays among {packable} (the kernel inputs {every} that statement {anchor.name} reads through a "
            f"permutation of its iterators, with a register tile on one of them)",
        )


def _check_gpu(scop: Scop, recipe: ScheduleRecipe, depth: int, extents: list[int], limits: TargetLimits) -> tuple[int, ...]:
    """The checks of a GPU recipe (:mod:`polytf.schedules.gpu_mapping`); returns its thread tiles."""
    from polytf.schedules.gpu_mapping import gpu_tiles, hardware_of, stageable_operands

    for name, value, cpu_only in (
        ("register_tile_sizes", any(recipe.register_tile_sizes), "all 0"),
        ("pack", bool(recipe.pack), "[]"),
        ("parallel", recipe.parallel, "false"),
    ):
        if value:
            raise _invalid(scop, name, getattr(recipe, name), f"{cpu_only} in a GPU recipe (a CPU transformation)")
    if recipe.tile_order and tuple(recipe.tile_order) != tuple(range(depth)):
        raise _invalid(scop, "tile_order", recipe.tile_order, f"{list(range(depth))} (the natural order) in a GPU recipe")
    threads = recipe.thread_tile_sizes or (0,) * depth
    if len(threads) != depth:
        raise _invalid(scop, "thread_tile_sizes", threads, f"{depth} entries, one per shared dimension")
    tiles = recipe.tile_sizes or (0,) * depth
    hardware = hardware_of(depth)
    folded = hardware.count("z") > 1
    for k in range(depth):
        thread, tile = threads[k], tiles[k]
        if folded and hardware[k] == "z":
            if thread:
                raise _invalid(scop, "thread_tile_sizes", threads, f"0 for d{k} (the dimensions folded into the grid's z get no threads)")
            if not 0 <= tile <= extents[k]:
                raise _invalid(scop, "tile_sizes", tiles, f"0 to {extents[k]} for d{k} (extent {extents[k]})")
            continue
        if not 0 <= thread <= extents[k]:
            raise _invalid(scop, "thread_tile_sizes", threads, f"0 to {extents[k]} for d{k} (extent {extents[k]})")
        thread = max(1, thread)
        if not 0 <= tile <= round_up(extents[k], thread) or tile % thread:
            raise _invalid(scop, "tile_sizes", tiles, f"0 or a multiple of d{k}'s thread tile {thread} up to {round_up(extents[k], thread)}")
    normalised_tiles = gpu_tiles(scop, ScheduleRecipe(tile_sizes=tiles, thread_tile_sizes=threads, gpu=True))
    block = normalised_tiles.block_shape()
    if block[0] * block[1] * block[2] > limits.max_threads_per_block:
        raise _invalid(
            scop, "thread_tile_sizes", threads, f"tiles giving at most {limits.max_threads_per_block} threads per block (block tile / thread tile per dimension); these give {block}"
        )
    for name, blocks, most in zip("xyz", normalised_tiles.grid(), GRID_LIMITS):
        if blocks > most:
            raise _invalid(scop, "tile_sizes", tiles, f"tiles giving at most {most} blocks along {name}; these give {blocks}")
    if recipe.shared_memory and (recipe.pad or recipe.algorithm != "direct"):
        from polytf.schedules.data_layout import apply_data_layout

        stageable = stageable_operands(apply_data_layout(scop, recipe))
    else:
        stageable = stageable_operands(scop) if recipe.shared_memory else ()
    if len(set(recipe.shared_memory)) != len(recipe.shared_memory) or any(a not in stageable for a in recipe.shared_memory):
        raise _invalid(scop, "shared_memory", recipe.shared_memory, f"distinct arrays among {list(stageable)} (float32 inputs the anchor reads through plain iterators, with a reduction)")
    return threads


def validate_recipe(scop: Scop, recipe: ScheduleRecipe, limits: TargetLimits | None = None) -> ScheduleRecipe:
    """Check ``recipe`` against ``scop`` and the target; return it normalised: tuples for
    the list fields, empty fields filled with their defaults (natural orders, zero tiles).

    Args:
        scop: the kernel, before data-layout transformations.
        recipe: the recipe to check.
        limits: the target's vector lanes and registers (default: :class:`TargetLimits`'s
            conservative ones).

    Raises:
        ScheduleError: naming the kernel, the field, the value and what is allowed.
    """
    if not isinstance(recipe, ScheduleRecipe):
        raise ScheduleError(f"kernel {scop.name}: a recipe must be a ScheduleRecipe, not {type(recipe).__name__}")
    limits = limits or TargetLimits()
    recipe = _check_types(scop, recipe)
    depth = shared_band_depth(scop)
    anchor = anchor_statement(scop)
    extents = [int(extent) for extent in anchor.extents[:depth]]
    reductions = anchor.reduction_iterators
    tiles = recipe.tile_sizes or (0,) * depth
    registers = recipe.register_tile_sizes or (0,) * depth
    reduction_tiles = recipe.reduction_tile_sizes or (0,) * len(reductions)
    for name, value, count, each in (
        ("tile_sizes", tiles, depth, "shared dimension"),
        ("register_tile_sizes", registers, depth, "shared dimension"),
        ("reduction_tile_sizes", reduction_tiles, len(reductions), f"reduction iterator of {list(reductions)}"),
    ):
        if len(value) != count:
            raise _invalid(scop, name, value, f"{count} entries, one per {each}")
    _check_data_layout(scop, recipe, registers)
    _check_register_tiles(scop, registers, extents, limits)
    if not recipe.gpu:  # a GPU block tile may round the extent up to its thread tile (_check_gpu)
        _check_tiles(scop, tiles, registers, extents)
    reduction_extents = dict(zip(anchor.iterators, anchor.extents))
    for iterator, size in zip(reductions, reduction_tiles):
        if not 0 <= size <= reduction_extents[iterator]:
            raise _invalid(scop, "reduction_tile_sizes", reduction_tiles, f"0 to {reduction_extents[iterator]} for {iterator} (0: untiled)")
    tile_order = recipe.tile_order or tuple(range(depth))
    if sorted(tile_order) != list(range(depth)):
        raise _invalid(scop, "tile_order", tile_order, f"a permutation of {list(range(depth))}")
    point_order = recipe.point_order or anchor.iterators
    if sorted(point_order) != sorted(anchor.iterators):
        raise _invalid(scop, "point_order", point_order, f"a permutation of statement {anchor.name}'s iterators {list(anchor.iterators)}")
    if recipe.vector_width not in VECTOR_WIDTHS:
        raise _invalid(scop, "vector_width", recipe.vector_width, ", ".join(map(str, VECTOR_WIDTHS)))
    if not 0 <= recipe.unroll <= MAX_UNROLL:
        raise _invalid(scop, "unroll", recipe.unroll, f"0 to {MAX_UNROLL} (0: LLVM decides)")
    if recipe.parallel and depth == 0:
        raise _invalid(scop, "parallel", True, "false (the kernel has no shared outer loop to distribute)")
    threads = ()
    if recipe.gpu:
        threads = _check_gpu(scop, recipe, depth, extents, limits)
    elif any(recipe.thread_tile_sizes) or recipe.shared_memory:
        field = "thread_tile_sizes" if any(recipe.thread_tile_sizes) else "shared_memory"
        raise _invalid(scop, field, getattr(recipe, field), "empty without gpu (a GPU transformation)")
    normalised = ScheduleRecipe(
        tile_sizes=tiles,
        tile_order=tile_order,
        reduction_tile_sizes=reduction_tiles,
        point_order=point_order,
        vector_width=recipe.vector_width,
        unroll=recipe.unroll,
        parallel=recipe.parallel,
        register_tile_sizes=registers,
        pack=recipe.pack,
        pad=recipe.pad,
        algorithm=recipe.algorithm,
        gpu=recipe.gpu,
        thread_tile_sizes=threads,
        shared_memory=recipe.shared_memory,
    )
    if recipe.shared_memory:
        from polytf.schedules.gpu_mapping import shared_memory_bytes

        needed = shared_memory_bytes(scop, normalised)
        if needed > limits.shared_memory_per_block:
            raise _invalid(scop, "shared_memory", recipe.shared_memory, f"arrays whose tiles fit {limits.shared_memory_per_block} bytes of shared memory per block; these need {needed}")
    return normalised


assert {f.name for f in fields(ScheduleRecipe)} == set(FIELD_TYPES), "recipe.FIELD_TYPES must name every recipe field"

__all__ = ["MAX_UNROLL", "VECTOR_WIDTHS", "TargetLimits", "round_up", "validate_recipe"]
