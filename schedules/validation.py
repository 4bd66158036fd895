"""The one validation of a recipe against its kernel and target.

Every path to code generation (compiling a kernel, ``polytf show``, a tuning candidate,
a recipe read from a cache record) goes through :func:`validate_recipe`, which
:func:`polytf.schedules.builder.schedule_scop` calls before anything else. It checks
what the schedule builder, the data-layout transformations and the code generator
assume, so that a recipe can make polytf neither crash nor compute wrong values. Every
recipe (:class:`~polytf.schedules.recipe.ScheduleRecipe`'s core):

- types, exactly (the kind's :attr:`~polytf.schedules.recipe.ScheduleRecipe.FIELD_TYPES`:
  a bool is not an int, ``"3"`` and ``3.0`` are not ints);
- lengths: one tile size per shared dimension, one reduction tile per reduction iterator
  of the anchor statement;
- ranges and caps: ``unroll`` at most :data:`MAX_UNROLL`; a reduction tile at most its
  iterator's extent;
- names: ``point_order`` a permutation of the anchor statement's iterators, ``pad`` only
  for a sum of products whose guards only keep its reads in bounds, ``algorithm`` one of
  :data:`~polytf.schedules.data_layout.ALGORITHMS` (``im2col`` only for a sum of products
  with one windowed read).

A :class:`~polytf.schedules.recipe.CpuRecipe` (:func:`_check_cpu`): ``vector_width`` one
of :data:`VECTOR_WIDTHS`; a cache tile at most its dimension's extent (rounded up to a
multiple of the register tile, as :meth:`SearchSpace.recipe` rounds it); a register tile
at most the extent (the vectorised, innermost one: the extent rounded up to the vector
lanes), with its accumulators, one vector register per ``lanes`` values, fitting the
target's vector registers (:class:`~polytf.schedules.target_limits.TargetLimits`), which
also bounds the unrolled micro-kernel; ``tile_order`` a permutation of the shared
dimensions; ``pack`` distinct arrays among those the anchor may pack (kernel inputs it
reads through a permutation of its iterators, one of them register-tiled: never an array
the kernel writes); ``parallel`` only with a shared outer band to distribute.

A :class:`~polytf.schedules.recipe.GpuRecipe` (:func:`_check_gpu`): one thread tile per
shared dimension (none for the dimensions folded into the grid's z), a block tile a
multiple of it, the block's threads and the grid within the target's limits, and
``shared_memory`` distinct stageable arrays whose tiles fit the block's shared memory.

Dependences are checked afterwards, on the schedule tree (:mod:`polytf.schedules.legality`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from polytf.errors import ScheduleError
from polytf.poly.scop import Scop
from polytf.poly.statement import Statement
from polytf.schedules.data_layout import ALGORITHMS, apply_data_layout, can_zero_pad, im2col_applies, packable_operands
from polytf.schedules.gpu_grid import gpu_tiles, hardware_of
from polytf.schedules.gpu_memory import shared_memory_bytes, stageable_operands
from polytf.schedules.recipe import CpuRecipe, GpuRecipe, ScheduleRecipe, field_type_error
from polytf.schedules.structure import anchor_statement, shared_band_depth
from polytf.schedules.target_limits import GRID_LIMITS, TargetLimits, round_up
from polytf.schedules.winograd import WINOGRAD_ALGORITHMS, why_not_winograd, winograd_applies, winograd_recipe, winograd_scop

__all__ = ["MAX_UNROLL", "VECTOR_WIDTHS", "validate_recipe"]

#: Largest ``unroll`` count (LLVM's own unroller takes it as is; larger ones only bloat code).
MAX_UNROLL = 32
#: Allowed ``vector_width`` values (0: LLVM decides; 1: no vectorisation).
VECTOR_WIDTHS = (0, 1, 2, 4, 8, 16)


@dataclass(frozen=True)
class _Core:
    """The core of a recipe checked against its kernel, empty fields filled in.

    Attributes:
        depth: shared dimensions; extents: their extents (the anchor's).
        tiles: one tile size per shared dimension.
        reduction_tiles: one tile size per reduction iterator of the anchor.
        point_order: a permutation of the anchor's iterators.
    """

    anchor: Statement
    depth: int
    extents: list[int]
    tiles: tuple[int, ...]
    reduction_tiles: tuple[int, ...]
    point_order: tuple[str, ...]

    def filled(self) -> dict[str, tuple]:
        """The core's list fields with empty ones filled in (natural order, zero tiles)."""
        return {"tile_sizes": self.tiles, "reduction_tile_sizes": self.reduction_tiles, "point_order": self.point_order}


def _invalid(scop: Scop, field: str, value, allowed: str) -> ScheduleError:
    shown = list(value) if isinstance(value, tuple) else value
    return ScheduleError(f"kernel {scop.name}: recipe field {field} = {shown!r} is invalid; allowed: {allowed}")


def _check_types(scop: Scop, recipe: ScheduleRecipe) -> ScheduleRecipe:
    """The recipe with list fields as tuples, or ScheduleError naming the first mistyped field."""
    values = {}
    for name, (_, is_list) in recipe.FIELD_TYPES.items():
        value = getattr(recipe, name)
        problem = field_type_error(name, value, recipe.FIELD_TYPES)
        if problem:
            raise ScheduleError(f"kernel {scop.name}: recipe field {problem}")
        values[name] = tuple(value) if is_list else value
    return type(recipe)(**values)


def _check_lengths(scop: Scop, value: tuple[int, ...], name: str, count: int, each: str) -> tuple[int, ...]:
    """``value``, or zeros when it is empty; ScheduleError unless it has ``count`` entries."""
    value = value or (0,) * count
    if len(value) != count:
        raise _invalid(scop, name, value, f"{count} entries, one per {each}")
    return value


def _check_core(scop: Scop, recipe: ScheduleRecipe) -> _Core:
    """The checks of every recipe (module docstring) but the tile sizes' ranges, which
    depend on the kind."""
    depth = shared_band_depth(scop)
    anchor = anchor_statement(scop)
    reductions = anchor.reduction_iterators
    tiles = _check_lengths(scop, recipe.tile_sizes, "tile_sizes", depth, "shared dimension")
    reduction_tiles = _check_lengths(scop, recipe.reduction_tile_sizes, "reduction_tile_sizes", len(reductions), f"reduction iterator of {list(reductions)}")
    if recipe.algorithm not in ALGORITHMS:
        raise _invalid(scop, "algorithm", recipe.algorithm, ", ".join(ALGORITHMS))
    if recipe.algorithm in WINOGRAD_ALGORITHMS and (isinstance(recipe, GpuRecipe) or not winograd_applies(scop)):
        why = "a GPU recipe" if isinstance(recipe, GpuRecipe) else why_not_winograd(scop)
        raise _invalid(scop, "algorithm", recipe.algorithm, f"direct or im2col (Winograd does not apply: {why})")
    if recipe.algorithm == "im2col" and not im2col_applies(scop):
        raise _invalid(scop, "algorithm", recipe.algorithm, f"direct (statement {anchor.name} is not a sum of products with one windowed read)")
    if recipe.pad and not can_zero_pad(scop):
        raise _invalid(scop, "pad", True, f"false (statement {anchor.name} is not a sum of products whose guards only keep its reads in bounds)")
    reduction_extents = dict(zip(anchor.iterators, anchor.extents))
    for iterator, size in zip(reductions, reduction_tiles):
        if not 0 <= size <= reduction_extents[iterator]:
            raise _invalid(scop, "reduction_tile_sizes", reduction_tiles, f"0 to {reduction_extents[iterator]} for {iterator} (0: untiled)")
    point_order = recipe.point_order or anchor.iterators
    if sorted(point_order) != sorted(anchor.iterators):
        raise _invalid(scop, "point_order", point_order, f"a permutation of statement {anchor.name}'s iterators {list(anchor.iterators)}")
    if not 0 <= recipe.unroll <= MAX_UNROLL:
        raise _invalid(scop, "unroll", recipe.unroll, f"0 to {MAX_UNROLL} (0: polytf decides)")
    extents = [int(extent) for extent in anchor.extents[:depth]]
    return _Core(anchor, depth, extents, tiles, reduction_tiles, tuple(point_order))


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


def _check_pack(scop: Scop, pack: tuple[str, ...], register_tiles: tuple[int, ...]) -> None:
    operands = packable_operands(scop) if pack else ()  # isl work: only when a recipe packs
    shared = anchor_statement(scop).output_iterators  # the shared dimensions, outermost first
    registers = {shared[k] for k, size in enumerate(register_tiles) if size}
    packable = [array for array, iterators in operands if registers & set(iterators)]
    if len(set(pack)) != len(pack) or any(name not in packable for name in pack):
        every = [array for array, _ in operands]
        raise _invalid(
            scop,
            "pack",
            pack,
            f"distinct arrays among {packable} (the kernel inputs {every} that statement {anchor_statement(scop).name} reads through a "
            f"permutation of its iterators, with a register tile on one of them)",
        )


def _check_cpu(scop: Scop, recipe: CpuRecipe, core: _Core, limits: TargetLimits) -> CpuRecipe:
    """The checks of a CPU recipe beyond the core's; returns it normalised."""
    registers = _check_lengths(scop, recipe.register_tile_sizes, "register_tile_sizes", core.depth, "shared dimension")
    _check_pack(scop, recipe.pack, registers)
    _check_register_tiles(scop, registers, core.extents, limits)
    _check_tiles(scop, core.tiles, registers, core.extents)
    tile_order = recipe.tile_order or tuple(range(core.depth))
    if sorted(tile_order) != list(range(core.depth)):
        raise _invalid(scop, "tile_order", tile_order, f"a permutation of {list(range(core.depth))}")
    if recipe.vector_width not in VECTOR_WIDTHS:
        raise _invalid(scop, "vector_width", recipe.vector_width, ", ".join(map(str, VECTOR_WIDTHS)))
    if recipe.parallel and core.depth == 0:
        raise _invalid(scop, "parallel", True, "false (the kernel has no shared outer loop to distribute)")
    return replace(recipe, **core.filled(), tile_order=tile_order, register_tile_sizes=registers)


def _check_gpu(scop: Scop, recipe: GpuRecipe, core: _Core, limits: TargetLimits) -> GpuRecipe:
    """The checks of a GPU recipe (:mod:`polytf.schedules.gpu_mapping`) beyond the core's;
    returns it normalised."""
    depth, extents, tiles = core.depth, core.extents, core.tiles
    threads = _check_lengths(scop, recipe.thread_tile_sizes, "thread_tile_sizes", depth, "shared dimension")
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
    normalised_tiles = gpu_tiles(scop, GpuRecipe(tile_sizes=tiles, thread_tile_sizes=threads))
    block = normalised_tiles.block_shape()
    if block[0] * block[1] * block[2] > limits.max_threads_per_block:
        raise _invalid(
            scop, "thread_tile_sizes", threads, f"tiles giving at most {limits.max_threads_per_block} threads per block (block tile / thread tile per dimension); these give {block}"
        )
    for name, blocks, most in zip("xyz", normalised_tiles.grid(), GRID_LIMITS):
        if blocks > most:
            raise _invalid(scop, "tile_sizes", tiles, f"tiles giving at most {most} blocks along {name}; these give {blocks}")
    if recipe.shared_memory and (recipe.pad or recipe.algorithm != "direct"):
        stageable = stageable_operands(apply_data_layout(scop, recipe))
    else:
        stageable = stageable_operands(scop) if recipe.shared_memory else ()
    if len(set(recipe.shared_memory)) != len(recipe.shared_memory) or any(a not in stageable for a in recipe.shared_memory):
        raise _invalid(scop, "shared_memory", recipe.shared_memory, f"distinct arrays among {list(stageable)} (float32 inputs the anchor reads through plain iterators, with a reduction)")
    normalised = replace(recipe, **core.filled(), thread_tile_sizes=threads)
    if recipe.shared_memory:
        needed = shared_memory_bytes(scop, normalised)
        if needed > limits.shared_memory_per_block:
            raise _invalid(scop, "shared_memory", recipe.shared_memory, f"arrays whose tiles fit {limits.shared_memory_per_block} bytes of shared memory per block; these need {needed}")
    return normalised


def validate_recipe(scop: Scop, recipe: ScheduleRecipe, limits: TargetLimits | None = None) -> CpuRecipe | GpuRecipe:
    """Check ``recipe`` against ``scop`` and the target; return it normalised (of the same
    kind): tuples for the list fields, empty fields filled with their defaults (natural
    orders, zero tiles).

    Args:
        scop: the kernel, before data-layout transformations.
        recipe: the recipe to check (a :class:`CpuRecipe` or a :class:`GpuRecipe`).
        limits: the target's vector lanes and registers, threads and shared memory per
            block (default: :class:`TargetLimits`'s conservative ones).

    Raises:
        ScheduleError: naming the kernel, the field, the value and what is allowed.
    """
    if not isinstance(recipe, (CpuRecipe, GpuRecipe)):
        raise ScheduleError(f"kernel {scop.name}: a recipe must be a CpuRecipe or a GpuRecipe, not {type(recipe).__name__}")
    limits = limits or TargetLimits()
    recipe = _check_types(scop, recipe)
    core = _check_core(scop, recipe)
    if isinstance(recipe, GpuRecipe):
        return _check_gpu(scop, recipe, core, limits)
    if recipe.algorithm in WINOGRAD_ALGORITHMS:
        # checked in the convolution's terms, then in those of its Winograd form, which
        # the builder schedules (polytf.schedules.winograd.winograd_recipe)
        _check_cpu(scop, recipe, core, limits)
        rewritten = winograd_scop(scop, recipe.algorithm)
        translated = winograd_recipe(scop, recipe, limits)
        return _check_cpu(rewritten, translated, _check_core(rewritten, replace(translated, algorithm="direct")), limits)
    return _check_cpu(scop, recipe, core, limits)
