"""The search space of one kernel: named dimensions with finite choices.

Dimensions (each an Optuna categorical parameter, values are plain str/int/bool):

- ``tile_d{k}``: tile size of shared dimension k (0 = untiled; powers of two below its extent)
- ``tile_order``: order of the outer loops, e.g. ``"1,0"``
- ``reduction_tile_r{j}``: tile size of the anchor's reduction iterator j (0 = untiled)
- ``point_order``: loop order of the anchor statement, e.g. ``"d0,r0,d1"``
- ``vector_width``, ``unroll``: LLVM loop hints (0 = LLVM decides the width; unroll 0 =
  only the micro-kernel's reduction loop, :data:`~polytf.targets.microkernel.MICROKERNEL_UNROLL` times)
- ``parallel``: the outermost loop on all threads (offered only when the loop isl generates
  first carries no dependence)
- ``register_tile``: register tile of the last two shared dimensions, e.g. ``"6x16"``
  (``"0x16"``: only the last one; ``"none"``); the last size is a multiple of the
  target's vector lanes and the accumulators fit in its vector registers (and a multiple
  of a grouped convolution's outputs per group where one fits). Cache tiles of
  register-tiled dimensions are rounded to multiples of the register tile.
- ``pack``: ``"none"``, ``"panels"`` (pack the operands indexed by the vectorised
  dimension and reused across another output dimension, e.g. MatMul's B, a filter; an
  operand indexed by every output dimension, such as a global pooling's input, is read
  once per output and a packed copy would only add a pass over it) or ``"all"`` (every
  packable operand)
- ``pad``: zero-pad a Conv2D's input so its domain is a box (only offered for guarded
  sums of products)
- ``algorithm``: ``"direct"`` or ``"im2col"`` (im2col + GEMM; offered for sums of
  products with one windowed read, i.e. convolutions), and Winograd's
  ``"winograd_f2x2_3x3"`` and ``"winograd_f4x4_3x3"`` for 3×3 stride-1 convolutions
  (:func:`polytf.schedules.winograd.winograd_applies`)

Only valid and legal choices are offered: every recipe passes
:func:`polytf.schedules.validation.validate_recipe` for ``TargetLimits(lanes, registers)``;
a tile order may start with a dimension only if that dimension carries no dependence (isl,
:func:`polytf.schedules.legality.carries_no_dependence`), and a recipe is parallel only when
the first loop isl generates is such a dimension, so ``parallel`` is always legal; loop
orders inside the anchor keep the reduction iterators in their original relative order and
only the outermost reduction is tiled, so a reduction accumulates in program order (polytf
does not yet reassociate reductions); isl's check confirms every candidate.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from polytf.poly.affine import AffineExpr
from polytf.poly.scop import Scop
from polytf.poly.statement import Statement
from polytf.schedules.analytic_recipe import AnalyticBlocking, CacheSizes, analytic_blocking, register_column_multiple
from polytf.schedules.data_layout import can_zero_pad, im2col_applies, packable_operands
from polytf.schedules.legality import carries_no_dependence
from polytf.schedules.recipe import CpuRecipe, ScheduleRecipe
from polytf.schedules.structure import anchor_statement, shared_band_depth
from polytf.schedules.target_limits import TargetLimits
from polytf.schedules.winograd import WINOGRAD_ALGORITHMS, preferred_winograd, winograd_applies, winograd_problem, winograd_tiles

VECTOR_WIDTHS = (0, 1, 4, 8, 16)
UNROLL_COUNTS = (0, 1, 2, 4, 8)
MAX_TILE = 512


def tile_choices(extent: int, minimum: int = 2) -> tuple[int, ...]:
    """0 (untiled), the powers of two in ``[minimum, min(extent, MAX_TILE))``, a few
    multiples of 3 (for register tiles of 3 and 6 rows) and the extent itself (one tile:
    the loop moves inside the group's sequence)."""
    sizes = [0]
    size = minimum
    while size < min(extent, MAX_TILE + 1):
        sizes.append(size)
        size *= 2
    sizes += [t for t in (48, 96, 192, 384) if t < extent and t >= minimum]
    if extent <= MAX_TILE and extent not in sizes:
        sizes.append(extent)
    return tuple(sorted(set(sizes)))


def register_tile_choices(outer_extent: int | None, inner_extent: int, lanes: int, registers: int | None = None) -> tuple[str, ...]:
    """Register tiles ``"AxB"`` of the last two shared dimensions: ``B`` a multiple of the
    vector lanes, ``A * B / lanes`` accumulators between a quarter and three quarters of
    the ``registers`` vector registers (the rest hold operands), after Low et al., TOMS 2016.
    ``registers`` None: :class:`~polytf.schedules.target_limits.TargetLimits`' conservative
    default (16)."""
    registers = registers or TargetLimits().vector_registers
    choices = ["none"]
    for b in (lanes, 2 * lanes, 3 * lanes, 4 * lanes):
        if b > max(lanes, inner_extent + lanes - 1):
            continue
        for a in (0, 2, 3, 4, 6, 8, 12, 14):
            if a and (outer_extent is None or a > outer_extent):
                continue
            accumulators = max(a, 1) * b // lanes
            if registers // 4 <= accumulators <= registers * 3 // 4 or (a == 0 and accumulators <= registers // 2):
                choices.append(f"{a}x{b}")
    return tuple(choices)


def _order_text(order) -> str:
    return ",".join(str(x) for x in order)


def _point_orders(anchor: Statement) -> tuple[str, ...]:
    iterators = anchor.iterators
    outputs = list(anchor.output_iterators)
    reductions = list(anchor.reduction_iterators)
    if len(iterators) <= 4:
        orders = [o for o in itertools.permutations(iterators) if [it for it in o if it in reductions] == reductions]
    else:
        orders = [tuple(outputs[:p] + reductions + outputs[p:]) for p in range(len(outputs) + 1)]
        if len(reductions) > 1 and outputs:
            # reductions split around the output dims, innermost output dimension last
            orders += [tuple(outputs[:p] + reductions[:-1] + outputs[p:-1] + reductions[-1:] + outputs[-1:]) for p in range(len(outputs))]
    unique = list(dict.fromkeys(tuple(o) for o in orders))
    natural = tuple(iterators)
    unique.sort(key=lambda o: o != natural)
    return tuple(_order_text(o) for o in unique)


class DimensionChoices:
    """What every search space (the CPU's, :class:`SearchSpace`; the GPU's,
    :class:`~polytf.schedules.gpu_search_space.GpuSearchSpace`) does with its
    ``dimensions``, ``((name, choices), ...)``, and its ``params(recipe)``."""

    dimensions: tuple[tuple[str, tuple], ...]

    def choices(self, name: str) -> tuple:
        return dict(self.dimensions)[name]

    def size(self) -> int:
        """Recipes in the space (the product of the dimensions' choices)."""
        total = 1
        for _, values in self.dimensions:
            total *= len(values)
        return total

    def contains(self, recipe: ScheduleRecipe) -> bool:
        params = self.params(recipe)
        return all(params[name] in values for name, values in self.dimensions)


@dataclass(frozen=True)
class SearchSpace(DimensionChoices):
    """The legal recipe choices of one Scop, for a given thread count."""

    dimensions: tuple[tuple[str, tuple], ...]
    depth: int
    reduction_iterators: tuple[str, ...]
    extents: tuple[int, ...] = ()
    #: ``(array, iterators of its index)`` of the anchor's reads that can be packed.
    packable: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: per shared dimension: it carries no dependence (a loop over it may run in parallel)
    coincident: tuple[bool, ...] = ()
    #: the analytic default's parameters (:mod:`polytf.schedules.analytic_recipe`), or empty
    analytic: tuple[tuple[str, object], ...] = ()
    #: ``(algorithm, parameters)`` of the analytic Winograd recipes
    #: (:func:`~polytf.schedules.winograd.winograd_tiles`), or empty
    winograd: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()
    #: the Winograd algorithm of the default recipe ("" for the direct convolution;
    #: :func:`~polytf.schedules.winograd.preferred_winograd`)
    default_algorithm: str = ""

    @staticmethod
    def for_scop(scop: Scop, threads: int = 1, lanes: int = 8, registers: int | None = None, caches: CacheSizes | None = None) -> SearchSpace:
        """The space of ``scop`` for ``threads`` threads, ``lanes`` float32 vector lanes and
        ``registers`` vector registers (a target's ``vector_lanes`` and ``vector_registers``;
        ``registers`` None: the conservative 16 of :class:`~polytf.schedules.target_limits.TargetLimits`)
        and per-core ``caches`` (a target's ``cache_sizes``; None: :class:`CacheSizes`'
        defaults), which size the analytic default recipe.
        Every recipe of the space passes :func:`~polytf.schedules.validation.validate_recipe`
        with ``TargetLimits(lanes, registers)`` and legality."""
        depth = shared_band_depth(scop)
        anchor = anchor_statement(scop)
        extents = anchor.extents
        registers = registers or TargetLimits().vector_registers
        coincident = [carries_no_dependence(scop, k) for k in range(depth)]
        # int/bool arrays (token ids, masks, casts): loop transformations only, no register
        # tiles, packing or padding, whose micro-kernel computes float32 vectors
        float_only = all(a.dtype == "float32" for a in scop.arrays)
        blocking = _blocking(scop, anchor, depth, lanes, registers, caches or CacheSizes(), threads) if any(coincident) and float_only else None
        dims: list[tuple[str, tuple]] = []
        for k in range(depth):
            dims.append((f"tile_d{k}", tile_choices(extents[k])))
        if depth:
            orders = [o for o in itertools.permutations(range(depth)) if coincident[o[0]]] or list(itertools.permutations(range(depth)))
            if len(orders) > 6:
                orders = [o for o in orders if o[1:] == tuple(sorted(o[1:]))]
            dims.append(("tile_order", tuple(_order_text(o) for o in orders)))
        for position, iterator in enumerate(anchor.reduction_iterators):
            # Only the outermost reduction may be tiled: its tile loop is placed before all
            # reduction loops, which keeps the accumulation order (isl's check would reject
            # a tiled inner reduction as a reversed dependence).
            extent = extents[anchor.iterators.index(iterator)]
            dims.append((f"reduction_tile_{iterator}", tile_choices(extent, minimum=8) if position == 0 else (0,)))
        dims.append(("point_order", _point_orders(anchor)))
        dims.append(("vector_width", VECTOR_WIDTHS))
        dims.append(("unroll", UNROLL_COUNTS))
        parallel_ok = threads > 1 and depth > 0 and any(coincident)
        dims.append(("parallel", (False, True) if parallel_ok else (False,)))
        packable = packable_operands(scop) if float_only else ()
        if depth:
            tiles = register_tile_choices(extents[depth - 2] if depth > 1 else None, extents[depth - 1], lanes, registers) if float_only else ("none",)
            dims.append(("register_tile", _whole_groups(tiles, register_column_multiple(anchor, anchor.iterators[depth - 1]))))
            dims.append(("pack", ("none", "panels", "all") if packable else ("none",)))
        pad_ok = float_only and can_zero_pad(scop)
        dims.append(("pad", (False, True) if pad_ok else (False,)))
        im2col_ok = float_only and im2col_applies(scop)
        winograd = tuple(WINOGRAD_ALGORITHMS) if float_only and winograd_applies(scop) else ()
        dims.append(("algorithm", (("direct", "im2col") if im2col_ok else ("direct",)) + winograd))
        space = SearchSpace(tuple(dims), depth, anchor.reduction_iterators, tuple(extents[:depth]), packable, tuple(coincident))
        if blocking is None:
            return space
        analytic = space._analytic_params(blocking)
        starts = [analytic]
        winograd_params = []
        default_algorithm = ""
        if winograd:  # a 2-D convolution: shared dimensions (n, oh, ow, o)
            problem = winograd_problem(scop)
            default_algorithm = preferred_winograd(problem)
            last_tile = analytic[f"tile_d{depth - 1}"]
            weights_outer = blocking.weights_outer and coincident[depth - 1]
            for algorithm in winograd:
                tiles = winograd_tiles(problem, WINOGRAD_ALGORITHMS[algorithm], last_tile, blocking.register_columns, weights_outer, caches or CacheSizes(), threads)
                params = {**analytic, "algorithm": algorithm, "tile_d1": tiles.rows, f"tile_d{depth - 1}": tiles.channels}
                winograd_params.append((algorithm, tuple(params.items())))
                starts.append(params)
        # the analytic values join the choices, so that the tuner can start from them
        widened = tuple((name, tuple(dict.fromkeys([*values, *(start[name] for start in starts if name in start)]))) for name, values in dims)
        return SearchSpace(
            widened,
            depth,
            anchor.reduction_iterators,
            tuple(extents[:depth]),
            packable,
            tuple(coincident),
            tuple(analytic.items()),
            tuple(winograd_params),
            default_algorithm,
        )

    def _analytic_params(self, blocking: AnalyticBlocking) -> dict:
        """The parameters of the analytic default recipe (see :mod:`polytf.schedules.analytic_recipe`)."""
        params = self._blocked_params()
        last = self.depth - 1
        params["register_tile"] = f"{blocking.register_rows}x{blocking.register_columns}"
        if not blocking.pad:
            params["pad"] = False  # a depthwise convolution's micro-kernel skips the padding taps
        # a tile covering the whole extent is the untiled dimension (0), rounded up to the
        # register tile by recipe(): only tiles inside the extent join the choices
        params[f"tile_d{last}"] = blocking.column_tile if blocking.column_tile < self.extents[last] else 0
        if self.depth > 1:
            params[f"tile_d{last - 1}"] = blocking.row_tile if blocking.row_tile < self.extents[last - 1] else 0
        if self.reduction_iterators:
            params[f"reduction_tile_{self.reduction_iterators[0]}"] = blocking.reduction_tile
        order = list(range(self.depth))
        if blocking.weights_outer and self.coincident[last]:
            order = [last, *order[:last]]
        text = _order_text(order)
        params["tile_order"] = text if text in self.choices("tile_order") else self.choices("tile_order")[0]
        return params

    def _plain_params(self) -> dict:
        """Every dimension's first choice (untiled, program order, LLVM decides), parallel
        when legal."""
        params = {name: values[0] for name, values in self.dimensions}
        params["parallel"] = self.choices("parallel")[-1]
        return params

    def _blocked_params(self) -> dict:
        """:meth:`_plain_params` with the data layout of a blocked contraction: the
        vectorised operand packed into panels and a padded convolution zero-padded, where
        offered (the base of the analytic and the heuristic recipes)."""
        params = self._plain_params()
        params["pad"] = self.choices("pad")[-1]
        if self.depth:
            params["pack"] = "panels" if "panels" in self.choices("pack") else "none"
        return params

    def _shared_iterators(self) -> list[str]:
        """The output iterators of the shared dimensions, outermost first: the first
        ``depth`` iterators of the anchor's own loop order (the first point order)."""
        return str(self.choices("point_order")[0]).split(",")[: self.depth]

    def recipe(self, params: dict) -> CpuRecipe:
        """The recipe for one assignment of every dimension."""
        tiles = [int(params[f"tile_d{k}"]) for k in range(self.depth)]
        registers = [0] * self.depth
        choice = str(params.get("register_tile", "none"))
        if self.depth and choice != "none":
            a, b = (int(v) for v in choice.split("x"))
            registers[self.depth - 1] = b
            if self.depth > 1:
                registers[self.depth - 2] = a
            for k, size in enumerate(registers):
                if size:
                    # round the cache tile to a multiple of the register tile
                    tile = tiles[k] if tiles[k] else -(-self.extents[k] // size) * size
                    tiles[k] = max(size, tile // size * size)
        pack: tuple[str, ...] = ()
        mode = str(params.get("pack", "none"))
        shared = self._shared_iterators()
        tiled = {shared[k] for k, size in enumerate(registers) if size}
        if mode != "none" and tiled:
            last = shared[self.depth - 1]
            for array, iterators in self.packable:
                reused = not set(shared) <= set(iterators)  # some output dimension does not index it
                if mode == "all" and tiled & set(iterators) or mode == "panels" and last in iterators and last in tiled and reused:
                    pack += (array,)
        tile_order = tuple(int(x) for x in str(params["tile_order"]).split(",")) if self.depth else ()
        return CpuRecipe(
            tile_sizes=tuple(tiles),
            tile_order=tile_order,
            reduction_tile_sizes=tuple(int(params[f"reduction_tile_{r}"]) for r in self.reduction_iterators),
            point_order=tuple(str(params["point_order"]).split(",")),
            vector_width=int(params["vector_width"]),
            unroll=int(params["unroll"]),
            parallel=bool(params["parallel"]) and self._parallel_loop_is_free(tiles, tile_order),
            register_tile_sizes=tuple(registers) if any(registers) else (),
            pack=pack,
            pad=bool(params.get("pad", False)),
            algorithm=str(params.get("algorithm", "direct")),
        )

    def _parallel_loop_is_free(self, tiles: list[int], tile_order: tuple[int, ...]) -> bool:
        """Whether the parallel loop (the outermost outer-band member that is a loop: isl
        emits none for a dimension of extent 1 or a tile covering it) carries no dependence."""
        for k in tile_order:
            if self.extents[k] > 1 and not (tiles[k] and tiles[k] >= self.extents[k]):
                return self.coincident[k]
        return False

    def params(self, recipe: CpuRecipe) -> dict:
        """Inverse of :meth:`recipe` (for recipes inside the space)."""
        result = {f"tile_d{k}": recipe.tile_sizes[k] if recipe.tile_sizes else 0 for k in range(self.depth)}
        if self.depth:
            result["tile_order"] = _order_text(recipe.tile_order or range(self.depth))
        for j, r in enumerate(self.reduction_iterators):
            result[f"reduction_tile_{r}"] = recipe.reduction_tile_sizes[j] if recipe.reduction_tile_sizes else 0
        result["point_order"] = ",".join(recipe.point_order) if recipe.point_order else self.choices("point_order")[0]
        result["vector_width"] = recipe.vector_width
        result["unroll"] = recipe.unroll
        result["parallel"] = recipe.parallel and True in self.choices("parallel")
        if self.depth:
            registers = recipe.register_tile_sizes or (0,) * self.depth
            if any(registers):
                result["register_tile"] = f"{registers[self.depth - 2] if self.depth > 1 else 0}x{registers[self.depth - 1]}"
            else:
                result["register_tile"] = "none"
            packable = {array for array, _ in self.packable}
            if not recipe.pack:
                result["pack"] = "none"
            else:
                result["pack"] = "all" if set(recipe.pack) == packable and len(packable) > 1 else "panels"
        result["pad"] = recipe.pad
        result["algorithm"] = recipe.algorithm
        for k, size in enumerate(recipe.register_tile_sizes or ()):
            # a cache tile rounded by recipe(): find the choice that rounds to it
            choices = self.choices(f"tile_d{k}")
            if size and result[f"tile_d{k}"] not in choices:
                rounded = {c: max(size, (c if c else -(-self.extents[k] // size) * size) // size * size) for c in choices}
                result[f"tile_d{k}"] = next((c for c, t in rounded.items() if t == result[f"tile_d{k}"]), result[f"tile_d{k}"])
        return result

    def default_recipe(self) -> CpuRecipe:
        """The untuned recipe: the analytic blocking of :mod:`polytf.schedules.analytic_recipe`
        for kernels with a reduction; otherwise program order, no tiling, LLVM's own
        choices, parallel when legal."""
        if self.default_algorithm:
            return self.recipe(dict(dict(self.winograd)[self.default_algorithm]))
        if self.analytic:
            return self.recipe(dict(self.analytic))
        return self.plain_recipe()

    def plain_recipe(self) -> CpuRecipe:
        """No tiling, LLVM's own choices, parallel when legal; a reduction's loops (a
        pooling window) go just outside the innermost output dimension, so that the
        contiguous loop is innermost and vectorises (program order when that order is
        not offered)."""
        params = self._plain_params()
        natural = str(self.choices("point_order")[0]).split(",")  # the anchor's iterators, in order
        outputs = [it for it in natural if it not in self.reduction_iterators]
        if self.reduction_iterators and outputs:
            inner = _order_text([*outputs[:-1], *self.reduction_iterators, outputs[-1]])
            if inner in self.choices("point_order"):
                params["point_order"] = inner
        return self.recipe(params)

    def heuristic_recipes(self) -> list[CpuRecipe]:
        """Hand-written starting points for the tuner, best guesses first: for a
        convolution, one recipe per algorithm (im2col with the first BLIS-like recipe's
        tiles, Winograd F(2,3) and F(4,3) with their analytic ones: the tuner compares the
        algorithms before variations of one, as cuDNN's algorithm search does, so that a
        short budget still reaches them); then for contractions, BLIS-like recipes
        (register tile, packed panels, cache tiles of the last dimension and the
        reduction); then the innermost output dimension last and vectorised."""
        result = []
        algorithms: list[CpuRecipe] = []
        registers = [c for c in (self.choices("register_tile") if self.depth else ()) if c != "none"]
        preferred_registers = [c for c in ("6x16", "4x16", "6x32", "8x32", "4x24", "0x16", "3x16", "2x16", "0x8", "4x8", "0x32") if c in registers]
        if self.depth and preferred_registers:
            base = self._blocked_params()
            orders = self.choices("point_order")
            # outer loops: innermost output dimension outermost, so that one packed panel of
            # the vectorised operand stays in L1/L2 across the register tiles of a cache tile
            # (the jr-outside-ir order of BLIS)
            outputs = self._shared_iterators()
            blis = ",".join([outputs[-1], *outputs[:-1], *self.reduction_iterators])
            base["point_order"] = blis if blis in orders else orders[0]
            for r in self.reduction_iterators[:1]:
                extent_choices = self.choices(f"reduction_tile_{r}")
                base[f"reduction_tile_{r}"] = 256 if 256 in extent_choices and max(extent_choices) > 256 else 0
            last = self.depth - 1
            for register in preferred_registers[:3]:
                for inner_tile, outer_tile in ((256, 96), (512, 48)):
                    params = dict(base)
                    params["register_tile"] = register
                    params[f"tile_d{last}"] = inner_tile if inner_tile in self.choices(f"tile_d{last}") else 0
                    if self.depth > 1:
                        params[f"tile_d{last - 1}"] = outer_tile if outer_tile in self.choices(f"tile_d{last - 1}") else 0
                    result.append(self.recipe(params))
            analytic_winograd = dict(self.winograd)
            for algorithm in ("im2col", *WINOGRAD_ALGORITHMS):
                if algorithm in analytic_winograd:
                    algorithms.append(self.recipe(dict(analytic_winograd[algorithm])))
                elif algorithm in self.choices("algorithm") and result:
                    params = dict(self.params(result[0]))
                    params["algorithm"] = algorithm
                    algorithms.append(self.recipe(params))
            result[:0] = algorithms
        orders = self.choices("point_order")
        preferred = [o for o in orders if o.split(",")[-1] not in self.reduction_iterators]
        for order in preferred[-2:] + preferred[:1]:
            for width in (8, 16):
                params = self._plain_params()
                params["point_order"] = order
                params["vector_width"] = width
                if self.depth:
                    last_choices = self.choices(f"tile_d{self.depth - 1}")
                    params[f"tile_d{self.depth - 1}"] = 64 if 64 in last_choices else max(last_choices)
                result.append(self.recipe(params))
        return list(dict.fromkeys(result))


def _whole_groups(tiles: tuple[str, ...], multiple: int) -> tuple[str, ...]:
    """The register tiles ``"AxB"`` whose ``B`` is a multiple of ``multiple`` (a grouped
    convolution's outputs per group: the micro-kernel then reads an affine group index,
    :func:`~polytf.schedules.analytic_recipe.register_column_multiple`), when there are
    any; otherwise all of them (a tile across groups is correct, through generic loops)."""
    whole = tuple(tile for tile in tiles if tile == "none" or int(tile.split("x")[1]) % multiple == 0)
    return whole if len(whole) > 1 else tiles


def _index_names(access) -> set[str]:
    names: set[str] = set()
    for index in access.index:
        if isinstance(index, AffineExpr):
            names.update(name for name, _ in index.terms)
        else:
            names.add("?")
    return names


def _blocking(scop: Scop, anchor, depth: int, lanes: int, registers: int, caches: CacheSizes, threads: int) -> AnalyticBlocking | None:
    """The analytic blocking of ``scop``'s anchor, with its reads split into those indexed
    by the vectorised dimension and no other output dimension (the weights: a filter, a
    MatMul's right operand) and the others (the activations: a depthwise convolution's
    or a pooling's input is indexed by every output dimension)."""
    if depth == 0 or (anchor.constraints and not can_zero_pad(scop)):
        return None  # a window-guarded domain that cannot be padded into a box stays plain
    vectorised, others = [], []
    last, rows = anchor.iterators[depth - 1], set(anchor.iterators[: depth - 1])
    for array in dict.fromkeys(access.array for access in anchor.value.loads() if access.array != anchor.write.array):
        info = scop.array(array)
        size = math.prod(info.shape) * 4
        names = set().union(*(_index_names(a) for a in anchor.value.loads() if a.array == array))
        (vectorised if last in names and not names & rows else others).append((array, size))
    multiple = register_column_multiple(anchor, last)
    return analytic_blocking(anchor, depth, lanes, registers, caches, threads, tuple(vectorised), tuple(others), multiple)
