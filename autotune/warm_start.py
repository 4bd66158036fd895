"""Warm starts between kernels that differ only in shape.

A model often holds kernels with the same ops and the same search-space dimensions but
other shapes (the convolutions of a ResNet stage, the projections of a Transformer).
The best recipe of one is a good first guess for the others, as in Ansor's task scheduler
(Zheng et al., OSDI 2020, §6: similar tasks share what they learned). The best recipe
of a similar kernel is mapped into this kernel's space — its parameters
(:meth:`~polytf.schedules.search_space.SearchSpace.params`), each value moved to the
nearest choice this kernel's space offers — checked with
:func:`~polytf.schedules.validation.validate_recipe`, and enqueued into this kernel's
study ahead of the sampler's own proposals.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from polytf.errors import ScheduleError
from polytf.lowering.lowered_kernel import LoweredKernel
from polytf.schedules.recipe import ScheduleRecipe
from polytf.schedules.search_space import SearchSpace
from polytf.schedules.target_limits import TargetLimits
from polytf.schedules.validation import validate_recipe

_NUMBER = re.compile(r"\d+")


def kernel_family(kernel: LoweredKernel, space: SearchSpace) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What similar kernels share: ``(op types of the kernel, dimension names of its space)``,
    e.g. ``(("Conv2D", "BiasAdd", "Relu"), ("tile_d0", ..., "algorithm"))``."""
    return tuple(op for _, op in kernel.scop.ops), tuple(name for name, _ in space.dimensions)


def nearest_choice(value: object, choices: Sequence[object]) -> object:
    """The choice closest to ``value``: ``value`` itself when offered; for a number (not a
    bool), the nearest number (ties: the earlier choice); for a text with numbers in it
    (``"6x16"``, ``"1,0"``, ``"d1,r0,d0"``), the choice of the same form whose numbers are
    nearest (sum of absolute differences); otherwise the first choice."""
    for choice in choices:
        if type(choice) is type(value) and choice == value:
            return choice
    if isinstance(value, bool) or not choices:
        return choices[0] if choices else value
    if isinstance(value, (int, float)):
        numbers = [choice for choice in choices if isinstance(choice, (int, float)) and not isinstance(choice, bool)]
        return min(numbers, key=lambda choice: abs(choice - value)) if numbers else choices[0]
    if isinstance(value, str):
        form = _NUMBER.sub("#", value)
        digits = [int(number) for number in _NUMBER.findall(value)]
        similar = [choice for choice in choices if isinstance(choice, str) and _NUMBER.sub("#", choice) == form]
        if similar and digits:
            return min(similar, key=lambda choice: sum(abs(a - int(b)) for a, b in zip(digits, _NUMBER.findall(choice))))
    return choices[0]


def map_params(params: Mapping[str, object], space: SearchSpace) -> dict:
    """``params`` of another kernel's space moved into ``space``: every dimension of
    ``space`` gets :func:`nearest_choice` of the value of the same name (the first choice
    where ``params`` has none)."""
    return {name: nearest_choice(params[name], choices) if name in params else choices[0] for name, choices in space.dimensions}


def warm_start_params(recipe: ScheduleRecipe, source: SearchSpace, space: SearchSpace, kernel: LoweredKernel, limits: TargetLimits | None = None) -> dict | None:
    """Parameters of ``space`` (the kernel ``kernel``'s) nearest to ``recipe``, a recipe of
    the similar kernel whose space is ``source``; None when the mapped recipe fails
    validation for ``kernel`` and ``limits`` (the target's)."""
    params = map_params(source.params(recipe), space)
    try:
        validate_recipe(kernel.scop, space.recipe(params), limits)
    except ScheduleError:
        return None
    return params


@dataclass
class _Best:
    family: tuple
    space: SearchSpace
    recipe: ScheduleRecipe


class WarmStarts:
    """The best recipes of a model's tasks so far, offered to their similar tasks.

    Args:
        limits: the target's limits, for validation.
    """

    def __init__(self, limits: TargetLimits | None = None) -> None:
        self.limits = limits
        self._best: dict[int, _Best] = {}
        self._offered: dict[int, set[tuple]] = {}

    def record(self, task: int, family: tuple, space: SearchSpace, recipe: ScheduleRecipe) -> None:
        """``recipe`` is now the best of ``task`` (whose family and space are given)."""
        self._best[task] = _Best(family, space, recipe)

    def offers(self, task: int, family: tuple, space: SearchSpace, kernel: LoweredKernel, limit: int) -> list[dict]:
        """At most ``limit`` parameter sets for ``task`` from the best recipes of its similar
        tasks that it was not offered yet, the tasks of nearest shapes (extents of the
        shared dimensions, on a log scale) first; those that fail validation are left out.
        Each offer is made once."""
        offered = self._offered.setdefault(task, set())
        similar = [(other, best) for other, best in self._best.items() if other != task and best.family == family]
        similar.sort(key=lambda item: (_shape_distance(item[1].space, space), item[0]))
        result = []
        for _, best in similar:
            if len(result) >= limit:
                break
            params = warm_start_params(best.recipe, best.space, space, kernel, self.limits)
            if params is None:
                continue
            identity = tuple(sorted((name, repr(value)) for name, value in params.items()))
            if identity not in offered:
                offered.add(identity)
                result.append(params)
        return result


def _shape_distance(first: SearchSpace, second: SearchSpace) -> float:
    if len(first.extents) != len(second.extents):
        return math.inf
    return sum(abs(math.log2(max(a, 1)) - math.log2(max(b, 1))) for a, b in zip(first.extents, second.extents))


__all__ = ["WarmStarts", "kernel_family", "map_params", "nearest_choice", "warm_start_params"]
