"""The search space of GPU recipes (:mod:`polytf.schedules.gpu_mapping`) of one Scop.

Dimensions, as Tensor Comprehensions' mapping options and the cuDNN-style algorithm
search of the issue name them: per mapped shared dimension a block tile and a thread
tile; a tile of the anchor's first reduction; shared-memory staging on or off per
operand; the order of each thread's loops; an unroll count. Every recipe
:meth:`GpuSearchSpace.recipe` returns passes validation for the limits it was built with
(threads per block, shared memory per block, grid extents) and is legal: a dimension that
carries a dependence gets one thread and one block along it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from polytf.poly.scop import Scop
from polytf.schedules.data_layout import can_zero_pad, im2col_applies
from polytf.schedules.gpu_grid import gpu_tiles, hardware_of
from polytf.schedules.gpu_memory import shared_memory_bytes, stageable_operands
from polytf.schedules.legality import carries_no_dependence
from polytf.schedules.recipe import GpuRecipe
from polytf.schedules.search_space import DimensionChoices, _order_text, _point_orders
from polytf.schedules.structure import anchor_statement, shared_band_depth
from polytf.schedules.target_limits import GRID_LIMITS, TargetLimits, round_up

#: block tile choices (points of a dimension per block); 0 covers the extent
BLOCK_TILES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
THREAD_TILES = (1, 2, 4, 8)
REDUCTION_TILES = (0, 1, 2, 4, 8, 16, 32, 64)
UNROLL_COUNTS = (0, 1, 2, 4, 8)
#: threads per block of the default recipe
DEFAULT_THREADS = 256
#: extent from which a contraction's default thread tile is 8x8 (else 4x4)
LARGE_EXTENT = 2048
#: fewest threads per block the default recipe gives up to spread work over the SMs
MIN_THREADS = 64
#: SMs assumed without a device (an A100 has 108, an H100 SXM 132)
DEFAULT_MULTIPROCESSORS = 108


def _power_of_two_at_least(value: int) -> int:
    result = 1
    while result < value:
        result *= 2
    return result


@dataclass(frozen=True)
class GpuSearchSpace(DimensionChoices):
    """The GPU recipe choices of one Scop (same interface as
    :class:`~polytf.schedules.search_space.SearchSpace`: ``dimensions``, :meth:`recipe`,
    :meth:`params`, :meth:`default_recipe`, :meth:`heuristic_recipes`)."""

    dimensions: tuple[tuple[str, tuple], ...]
    depth: int
    mapped: tuple[int, ...]
    extents: tuple[int, ...]
    coincident: tuple[bool, ...]
    reduction_iterators: tuple[str, ...]
    stageable: tuple[str, ...]
    limits: TargetLimits
    scop: Scop
    multiprocessors: int = 0

    @staticmethod
    def for_scop(scop: Scop, limits: TargetLimits | None = None, multiprocessors: int = 0) -> GpuSearchSpace:
        """The space of ``scop`` for a GPU with ``limits`` (threads and shared memory per block)
        and ``multiprocessors`` SMs (0: unknown), which the default recipe fills."""
        limits = limits or TargetLimits()
        depth = shared_band_depth(scop)
        anchor = anchor_statement(scop)
        extents = tuple(int(e) for e in anchor.extents[:depth])
        coincident = tuple(carries_no_dependence(scop, k) for k in range(depth))
        mapped = tuple(range(depth))
        hardware = hardware_of(depth)
        folded = hardware.count("z") > 1
        dims: list[tuple[str, tuple]] = []
        for k in mapped:
            if folded and hardware[k] == "z":  # folded into the grid's z: a block tile, no threads
                dims.append((f"block_tile_d{k}", tuple(t for t in BLOCK_TILES if t < extents[k]) + (0,) if coincident[k] else (0,)))
                dims.append((f"thread_tile_d{k}", (0,)))
            elif coincident[k]:
                dims.append((f"block_tile_d{k}", tuple(t for t in BLOCK_TILES if t < extents[k]) + (0,)))
                dims.append((f"thread_tile_d{k}", tuple(t for t in THREAD_TILES if t <= extents[k])))
            else:  # carries a dependence: one block and one thread along it
                dims.append((f"block_tile_d{k}", (0,)))
                dims.append((f"thread_tile_d{k}", (extents[k],)))
        for position, iterator in enumerate(anchor.reduction_iterators):
            extent = anchor.extents[anchor.iterators.index(iterator)]
            dims.append((f"reduction_tile_{iterator}", tuple(t for t in REDUCTION_TILES if t < extent) if position == 0 else (0,)))
        stageable = stageable_operands(scop) if all(a.dtype == "float32" for a in scop.arrays) else ()
        for array in stageable:
            dims.append((f"shared_{array}", (False, True)))
        dims.append(("point_order", _point_orders(anchor)))
        dims.append(("unroll", UNROLL_COUNTS))
        float_only = all(a.dtype == "float32" for a in scop.arrays)
        # zero-padding and im2col: a copy launch before the kernel's
        dims.append(("pad", (False, True) if float_only and can_zero_pad(scop) else (False,)))
        dims.append(("algorithm", ("direct", "im2col") if float_only and im2col_applies(scop) else ("direct",)))
        return GpuSearchSpace(tuple(dims), depth, mapped, extents, coincident, anchor.reduction_iterators, stageable, limits, scop, multiprocessors)

    def recipe(self, params: dict) -> GpuRecipe:
        """The recipe for one assignment of every dimension, made to fit the limits: thread
        tiles grow until a block has at most ``max_threads_per_block`` threads and the grid
        fits CUDA's extents; staging is dropped when it does not fit in shared memory."""
        tiles = [0] * self.depth
        threads = [0] * self.depth
        for k in self.mapped:
            thread = int(params[f"thread_tile_d{k}"])
            block = int(params[f"block_tile_d{k}"])
            if thread == 0:  # folded: the block tile as it is
                tiles[k] = block
                continue
            block = round_up(self.extents[k], thread) if block == 0 or block >= self.extents[k] else round_up(max(block, thread), thread)
            tiles[k], threads[k] = block, thread
        self._fit(tiles, threads)
        for k in self.mapped:
            if tiles[k] >= self.extents[k]:
                tiles[k] = 0
        recipe = GpuRecipe(
            tile_sizes=tuple(tiles),
            reduction_tile_sizes=tuple(int(params[f"reduction_tile_{r}"]) for r in self.reduction_iterators),
            point_order=tuple(str(params["point_order"]).split(",")),
            unroll=int(params["unroll"]),
            pad=bool(params.get("pad", False)),
            algorithm=str(params.get("algorithm", "direct")),
            thread_tile_sizes=tuple(threads),
            shared_memory=tuple(a for a in self.stageable if params.get(f"shared_{a}")),
        )
        if recipe.shared_memory and shared_memory_bytes(self.scop, recipe) > self.limits.shared_memory_per_block:
            recipe = replace(recipe, shared_memory=())
        return recipe

    def _fit(self, tiles: list[int], threads: list[int]) -> None:
        """Grow thread tiles (then block tiles) in place until the block and grid fit."""

        def normalised():
            return gpu_tiles(self.scop, GpuRecipe(tile_sizes=tuple(tiles), thread_tile_sizes=tuple(threads)))

        shape = normalised()
        while shape.block_shape()[0] * shape.block_shape()[1] * shape.block_shape()[2] > self.limits.max_threads_per_block:
            k = max(shape.threaded, key=lambda m: shape.threads[m])
            threads[k] *= 2
            tiles[k] = round_up(shape.block_tiles[k], threads[k])
            shape = normalised()
        for position, most in enumerate(GRID_LIMITS):
            while shape.grid()[position] > most:
                k = max((m for m in shape.mapped if shape.hardware[m] == "xyz"[position]), key=lambda m: shape.block_counts()[m])
                tiles[k] = shape.block_tiles[k] * 2
                shape = normalised()

    def params(self, recipe: GpuRecipe) -> dict:
        """Inverse of :meth:`recipe` (for recipes inside the space)."""
        result = {}
        for k in self.mapped:
            tile = recipe.tile_sizes[k] if recipe.tile_sizes else 0
            result[f"block_tile_d{k}"] = tile
            folded = self.choices(f"thread_tile_d{k}") == (0,)
            result[f"thread_tile_d{k}"] = 0 if folded else max(1, recipe.thread_tile_sizes[k]) if recipe.thread_tile_sizes else 1
        for j, r in enumerate(self.reduction_iterators):
            result[f"reduction_tile_{r}"] = recipe.reduction_tile_sizes[j] if recipe.reduction_tile_sizes else 0
        for array in self.stageable:
            result[f"shared_{array}"] = array in recipe.shared_memory
        result["point_order"] = ",".join(recipe.point_order) if recipe.point_order else self.choices("point_order")[0]
        result["unroll"] = recipe.unroll
        result["pad"] = recipe.pad
        result["algorithm"] = recipe.algorithm
        return result

    def default_recipe(self) -> GpuRecipe:
        """The untuned recipe: about :data:`DEFAULT_THREADS` threads per block. A contraction
        (an anchor with a reduction) gets 4x4 points per thread over the two innermost
        dimensions (8x8 from :data:`LARGE_EXTENT`), 16x16 threads, a reduction tile of 16 and its operands staged in shared
        memory (the classic tiled SGEMM; a reduction of at most 16, e.g. a convolution's filter
        rows, tiles of 1); other kernels one point per thread, the innermost
        dimension across the threads of a warp. Dimensions folded into z get one block per
        value. Then, while the grid has fewer than two blocks per SM and a block more than
        :data:`MIN_THREADS` threads, the block tiles of y (then x) are halved."""
        contraction = bool(self.reduction_iterators) and self.depth >= 2
        # a large GEMM: 8x8 points per thread (128x128 blocks) still leaves a block per SM
        large = contraction and min(self.extents[-2:]) >= LARGE_EXTENT
        params: dict = {}
        budget = DEFAULT_THREADS
        for position, k in enumerate(reversed(self.mapped)):
            if self.choices(f"thread_tile_d{k}") == (0,):  # folded into z
                params[f"block_tile_d{k}"], params[f"thread_tile_d{k}"] = (1 if self.coincident[k] else 0), 0
                continue
            if not self.coincident[k]:
                params[f"block_tile_d{k}"], params[f"thread_tile_d{k}"] = 0, self.extents[k]
                continue
            thread = (8 if large else 4) if contraction and position < 2 and self.extents[k] >= 16 else 1
            wanted = 16 if contraction else budget
            count = max(1, min(wanted, budget, _power_of_two_at_least(-(-self.extents[k] // thread))))
            params[f"block_tile_d{k}"], params[f"thread_tile_d{k}"] = count * thread, thread
            budget //= count
        self._spread(params)
        for position, r in enumerate(self.reduction_iterators):
            # 16 (a tiled SGEMM's), else one value at a time (a convolution's filter row)
            choices = self.choices(f"reduction_tile_{r}")
            params[f"reduction_tile_{r}"] = 16 if 16 in choices else 1 if 1 in choices and contraction else 0
        for array in self.stageable:
            params[f"shared_{array}"] = contraction
        natural = str(self.choices("point_order")[0]).split(",")
        outputs = [it for it in natural if it not in self.reduction_iterators]
        if anchor_statement(self.scop).constraints and not self.choices("pad")[-1]:
            # guarded reductions (a padded convolution): their bounds depend on the output
            # point, so the output points go outside, where their loops keep constant trip
            # counts and unroll (the accumulators stay in registers)
            order = [*outputs, *self.reduction_iterators]
        else:  # a register tile: each reduction step an outer product over the thread's points
            order = [*self.reduction_iterators, *outputs]
        params["point_order"] = _order_text(order)
        params["unroll"] = 0
        params["algorithm"] = "direct"
        # a zero-padded copy of a convolution's input (one cheap launch) takes the guards off
        # its reduction loops: the thread's points unroll without predicates
        params["pad"] = self.choices("pad")[-1]
        return self.recipe(params)

    def _spread(self, params: dict) -> None:
        """Halve y's (then x's) threads per block in ``params`` until the grid has two blocks
        per SM or a block would fall below :data:`MIN_THREADS` threads."""
        wanted = 2 * (self.multiprocessors or DEFAULT_MULTIPROCESSORS)
        threaded = [k for k in reversed(self.mapped) if params[f"thread_tile_d{k}"] and self.coincident[k]][:2]
        while True:
            recipe = self.recipe({**params, "point_order": self.choices("point_order")[0], "unroll": 0, "pad": False, "algorithm": "direct", **self._no_staging(), **self._no_reduction_tiles()})
            shape = gpu_tiles(self.scop, recipe)
            grid, block = shape.grid(), shape.block_shape()
            if grid[0] * grid[1] * grid[2] >= wanted or block[0] * block[1] * block[2] <= MIN_THREADS:
                return
            for k in reversed(threaded):  # y first
                thread = params[f"thread_tile_d{k}"]
                tile = params[f"block_tile_d{k}"] or round_up(self.extents[k], thread)
                if tile // thread > 1:
                    params[f"block_tile_d{k}"] = tile // thread // 2 * thread
                    break
            else:
                return

    def _no_staging(self) -> dict:
        return {f"shared_{a}": False for a in self.stageable}

    def _no_reduction_tiles(self) -> dict:
        return {f"reduction_tile_{r}": 0 for r in self.reduction_iterators}

    def heuristic_recipes(self) -> list[GpuRecipe]:
        """Starting points for the tuner: the default, then larger and smaller thread tiles
        and reduction tiles around it."""
        base = self.params(self.default_recipe())
        result = [self.default_recipe()]
        for thread in (2, 8):
            params = dict(base)
            for k in self.mapped[-2:]:
                if self.coincident[k] and thread in self.choices(f"thread_tile_d{k}"):
                    params[f"thread_tile_d{k}"] = thread
                    params[f"block_tile_d{k}"] = 16 * thread if 16 * thread < self.extents[k] else 0
            result.append(self.recipe(params))
        for r in self.reduction_iterators[:1]:
            for size in (8, 32):
                if size in self.choices(f"reduction_tile_{r}"):
                    params = dict(base)
                    params[f"reduction_tile_{r}"] = size
                    result.append(self.recipe(params))
        return list(dict.fromkeys(result))



def default_gpu_recipe(scop: Scop) -> GpuRecipe:
    """The default recipe of ``scop``'s GPU search space with the default limits (how the
    schedule builder maps a data-layout copy's own launch)."""
    return GpuSearchSpace.for_scop(scop).default_recipe()


__all__ = ["GpuSearchSpace", "BLOCK_TILES", "THREAD_TILES", "REDUCTION_TILES", "default_gpu_recipe"]
