"""The search space of one kernel: named dimensions with finite choices.

Dimensions (each an Optuna categorical parameter, values are plain str/int/bool):

- ``tile_d{k}``: tile size of shared dimension k (0 = untiled; powers of two below its extent)
- ``tile_order``: order of the outer loops, e.g. ``"1,0"``
- ``reduction_tile_r{j}``: tile size of the anchor's reduction iterator j (0 = untiled)
- ``point_order``: loop order of the anchor statement, e.g. ``"d0,r0,d1"``
- ``vector_width``, ``unroll``: LLVM loop hints (0 = LLVM decides)
- ``parallel``: outermost loop on all threads

Only legal choices are offered: a tile order may start with a dimension only if that
dimension carries no dependence (isl, :func:`polytf.schedules.legality.carries_no_dependence`),
so ``parallel`` is always legal; loop orders inside the anchor keep the reduction iterators in their original relative
order and only the outermost reduction is tiled, so a reduction accumulates in program
order (polytf does not yet reassociate reductions); isl's check confirms every
candidate.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from polytf.poly.scop import Scop
from polytf.schedules.legality import carries_no_dependence
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.structure import anchor_statement, shared_band_depth

VECTOR_WIDTHS = (0, 1, 4, 8, 16)
UNROLL_COUNTS = (0, 1, 2, 4, 8)
MAX_TILE = 512


def tile_choices(extent: int, minimum: int = 2) -> tuple[int, ...]:
    """0 (untiled), the powers of two in ``[minimum, min(extent, MAX_TILE))`` and the
    extent itself (one tile: the loop moves inside the group's sequence)."""
    sizes = [0]
    size = minimum
    while size < min(extent, MAX_TILE + 1):
        sizes.append(size)
        size *= 2
    if extent <= MAX_TILE and extent not in sizes:
        sizes.append(extent)
    return tuple(sizes)


def _order_text(order) -> str:
    return ",".join(str(x) for x in order)


def _point_orders(iterators: tuple[str, ...]) -> tuple[str, ...]:
    outputs = [it for it in iterators if it.startswith("d")]
    reductions = [it for it in iterators if not it.startswith("d")]
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


@dataclass(frozen=True)
class SearchSpace:
    """The legal recipe choices of one Scop, for a given thread count."""

    dimensions: tuple[tuple[str, tuple], ...]
    depth: int
    reduction_iterators: tuple[str, ...]

    @staticmethod
    def for_scop(scop: Scop, threads: int = 1) -> SearchSpace:
        depth = shared_band_depth(scop)
        anchor = anchor_statement(scop)
        extents = anchor.extents
        dims: list[tuple[str, tuple]] = []
        for k in range(depth):
            dims.append((f"tile_d{k}", tile_choices(extents[k])))
        coincident = [carries_no_dependence(scop, k) for k in range(depth)]
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
        dims.append(("point_order", _point_orders(anchor.iterators)))
        dims.append(("vector_width", VECTOR_WIDTHS))
        dims.append(("unroll", UNROLL_COUNTS))
        parallel_ok = threads > 1 and depth > 0 and any(coincident)
        dims.append(("parallel", (False, True) if parallel_ok else (False,)))
        return SearchSpace(tuple(dims), depth, anchor.reduction_iterators)

    def choices(self, name: str) -> tuple:
        return dict(self.dimensions)[name]

    def size(self) -> int:
        total = 1
        for _, values in self.dimensions:
            total *= len(values)
        return total

    def recipe(self, params: dict) -> ScheduleRecipe:
        """The recipe for one assignment of every dimension."""
        return ScheduleRecipe(
            tile_sizes=tuple(int(params[f"tile_d{k}"]) for k in range(self.depth)),
            tile_order=tuple(int(x) for x in str(params["tile_order"]).split(",")) if self.depth else (),
            reduction_tile_sizes=tuple(int(params[f"reduction_tile_{r}"]) for r in self.reduction_iterators),
            point_order=tuple(str(params["point_order"]).split(",")),
            vector_width=int(params["vector_width"]),
            unroll=int(params["unroll"]),
            parallel=bool(params["parallel"]),
        )

    def params(self, recipe: ScheduleRecipe) -> dict:
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
        return result

    def contains(self, recipe: ScheduleRecipe) -> bool:
        params = self.params(recipe)
        return all(params[name] in values for name, values in self.dimensions)

    def default_recipe(self) -> ScheduleRecipe:
        """The untuned recipe: program order, no tiling, LLVM's own choices; parallel when legal."""
        params = {name: values[0] for name, values in self.dimensions}
        params["parallel"] = self.choices("parallel")[-1]
        return self.recipe(params)

    def heuristic_recipes(self) -> list[ScheduleRecipe]:
        """A few hand-written starting points for the tuner (innermost output dimension
        last and vectorised, reductions just outside it)."""
        orders = self.choices("point_order")
        preferred = [o for o in orders if o.split(",")[-1].startswith("d")]
        result = []
        for order in preferred[-2:] + preferred[:1]:
            for width in (8, 16):
                params = {name: values[0] for name, values in self.dimensions}
                params["point_order"] = order
                params["vector_width"] = width
                params["parallel"] = self.choices("parallel")[-1]
                if self.depth:
                    last = self.choices(f"tile_d{self.depth - 1}")
                    params[f"tile_d{self.depth - 1}"] = 64 if 64 in last else max(last)
                result.append(self.recipe(params))
        return list(dict.fromkeys(result))
