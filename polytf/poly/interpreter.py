"""A slow, obviously correct executor of a Scop in program order (tests only).

It enumerates each statement's iteration domain with isl in lexicographic order
and evaluates the body with numpy float32 scalars. Lowerings are checked against
their op's numpy reference with it, independently of any code generator.
"""

from __future__ import annotations

import numpy as np

from polytf.islpy_on_demand import isl
from polytf.poly.expression import evaluate
from polytf.poly.scop import Scop
from polytf.poly.statement import Statement


def lexicographic_points(statement: Statement) -> list[tuple[int, ...]]:
    """Integer points of a statement's domain, lexicographically sorted (isl manual,
    ``isl_set_foreach_point``)."""
    points: list[tuple[int, ...]] = []

    def visit(point) -> None:
        space = point.get_space()
        points.append(tuple(point.get_coordinate_val(isl.dim_type.set, i).to_python() for i in range(space.dim(isl.dim_type.set))))

    statement.domain().foreach_point(visit)
    return sorted(points)


def _unwritten(info) -> np.ndarray:
    """NaN for float arrays (a read of an unwritten element shows), the dtype's minimum otherwise."""
    if np.dtype(info.dtype).kind == "f":
        return np.full(info.shape, np.nan, info.dtype)
    if info.dtype == "bool":
        return np.zeros(info.shape, bool)
    return np.full(info.shape, np.iinfo(info.dtype).min, info.dtype)


def interpret(scop: Scop, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``scop`` on ``arrays`` (by Scop array name); returns all arrays after the run.

    Arrays missing from ``arrays`` (outputs, temporaries) start as NaN, so a statement
    that reads an element nobody wrote shows up as NaN in the result.
    """
    state = {a.name: np.array(arrays[a.name], dtype=a.dtype, copy=True) if a.name in arrays else _unwritten(a) for a in scop.arrays}
    for statement in scop.statements:
        for point in lexicographic_points(statement):
            env = dict(zip(statement.iterators, point))

            def load(access, env=env):
                return state[access.array][tuple(i.evaluate(env) for i in access.index)]

            value = evaluate(statement.value, load)
            state[statement.write.array][tuple(i.evaluate(env) for i in statement.write.index)] = value
    return state
