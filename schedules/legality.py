"""Legality of a schedule with respect to a Scop's dependences.

A schedule is legal when every dependence source runs before its sink, i.e. the
schedule maps each dependence to a lexicographically positive pair; the outermost
loop may run in parallel when no dependence is carried by it (equal first schedule
coordinate for every dependence). Source: isl manual, "Schedule Trees" and
"Dependence Analysis"; Feautrier 1992.
"""

from __future__ import annotations

from functools import lru_cache

import islpy as isl

from polytf.errors import ScheduleError
from polytf.poly.dependences import Dependences, compute_dependences
from polytf.poly.scop import Scop


@lru_cache(maxsize=256)
def dependences_of(scop: Scop) -> Dependences:
    """Dependences of ``scop`` (memoised: Scops are immutable)."""
    return compute_dependences(scop)


def _scheduled(dependence: isl.UnionMap, schedule_map: isl.UnionMap) -> isl.UnionMap:
    return dependence.apply_domain(schedule_map).apply_range(schedule_map)


def _dimension_count(schedule_map: isl.UnionMap) -> int:
    counts = set()
    schedule_map.foreach_map(lambda m: counts.add(m.dim(isl.dim_type.out)))
    if len(counts) > 1:
        raise ScheduleError(f"schedule has ranges of different dimensions {sorted(counts)}")
    return counts.pop() if counts else 0


def _relation(text_condition: str, n: int) -> isl.UnionMap:
    xs = ", ".join(f"x{i}" for i in range(n))
    ys = ", ".join(f"y{i}" for i in range(n))
    return isl.UnionMap(f"{{ [{xs}] -> [{ys}] : {text_condition} }}")


def _lex_positive(n: int) -> isl.UnionMap:
    clauses = []
    for i in range(n):
        equal = [f"x{j} = y{j}" for j in range(i)]
        clauses.append("(" + " and ".join(equal + [f"x{i} < y{i}"]) + ")")
    return _relation(" or ".join(clauses) if clauses else "false", n)


def _root_is_sequence(schedule: isl.Schedule) -> bool:
    root = schedule.get_root()
    return root.n_children() > 0 and root.child(0).get_type() == isl.schedule_node_type.sequence


def check_legality(scop: Scop, schedule: isl.Schedule, *, parallel: bool = False) -> None:
    """Raise :class:`ScheduleError` if ``schedule`` violates a dependence of ``scop``.

    Args:
        parallel: also require that the outermost schedule dimension carries no dependence
            (for a sequence of loop nests: the outermost loop of each nest).

    Raises:
        ScheduleError: naming the violated dependence kind (RAW/WAR/WAW), the statements
            and TensorFlow nodes involved, and one violating instance pair.
    """
    schedule_map = schedule.get_map().intersect_domain(scop.domain)
    n = _dimension_count(schedule_map)
    positive = _lex_positive(n)
    same_outer = None
    if n and _root_is_sequence(schedule):
        # A sequence of loop nests (copy statements first): each nest's outer loop runs in
        # parallel, with a barrier between nests, so only dependences inside one nest count.
        same_outer = _relation("x0 < y0 or x0 > y0 or x1 = y1", n) if n > 1 else None
    elif n:
        same_outer = _relation("x0 = y0", n)
    for kind, dependence in dependences_of(scop).named():
        violations: list[tuple[isl.Map, str]] = []

        def visit(relation: isl.Map, kind=kind) -> None:
            mapped = _scheduled(isl.UnionMap.from_map(relation), schedule_map)
            if not mapped.subtract(positive).is_empty():
                violations.append((relation, "schedule reverses"))
            elif parallel and same_outer is not None and not mapped.subtract(same_outer).is_empty():
                violations.append((relation, "parallel outer loop carries"))

        dependence.foreach_map(visit)
        if violations:
            relation, what = violations[0]
            source = relation.get_tuple_name(isl.dim_type.in_)
            sink = relation.get_tuple_name(isl.dim_type.out)
            raise ScheduleError(
                f"kernel {scop.name}: the {what} the {kind} dependence {source} -> {sink} "
                f"(nodes '{scop.statement(source).node}' -> '{scop.statement(sink).node}'): {relation}"
            )


def carries_no_dependence(scop: Scop, dimension: int) -> bool:
    """True when shared dimension ``d{dimension}`` carries no dependence under program
    order, so a loop over it may run in parallel."""
    schedule_map = scop.original_schedule()
    n = _dimension_count(schedule_map)
    same = _relation(f"x{dimension + 1} = y{dimension + 1}", n)
    return _scheduled(dependences_of(scop).all(), schedule_map).is_subset(same)
