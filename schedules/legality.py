"""Legality of a schedule with respect to a Scop's dependences.

A schedule is legal when every dependence source runs before its sink, i.e. the
schedule maps each dependence to a lexicographically positive pair; a loop may run in
parallel when no dependence is carried by it. The loops that run in parallel are the
band members below parallel marks, which the schedule builder places and the code
generator follows (:mod:`polytf.schedules.marks`). Source: isl manual, "Schedule Trees" and
"Dependence Analysis"; Feautrier 1992.
"""

from __future__ import annotations

from functools import lru_cache

from polytf.errors import ScheduleError
from polytf.islpy_on_demand import isl
from polytf.poly.dependences import Dependences, compute_dependences
from polytf.poly.scop import Scop
from polytf.schedules.marks import GpuMark, ParallelMark, mark_of


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


def parallel_members(schedule: isl.Schedule) -> list[tuple[int, isl.ScheduleNode, int]]:
    """Every band member a parallel mark or a GPU blocks or threads mark of ``schedule``
    names (all run in parallel): ``(schedule dimension,
    band node directly below the mark, position of the member in that band)``.

    Raises:
        ScheduleError: a parallel mark that is not directly above a band holding the
            dimensions it names (the builder never writes one).
    """
    found = []
    pending = [schedule.get_root()]
    while pending:
        node = pending.pop()
        mark = mark_of(node)
        if isinstance(mark, (ParallelMark, GpuMark)):
            band = node.child(0)
            depth = band.get_schedule_depth()
            positions = [k - depth for k in mark.dimensions]
            if band.get_type() != isl.schedule_node_type.band or any(not 0 <= p < band.band_n_member() for p in positions):
                raise ScheduleError(f"parallel mark {mark.name()} is not above a band with those members")
            found.extend((k, band, p) for k, p in zip(mark.dimensions, positions))
        pending.extend(node.child(i) for i in range(node.n_children()))
    return found


def _member_map(band: isl.ScheduleNode, position: int) -> isl.UnionMap:
    return isl.UnionMap.from_union_pw_aff(band.band_get_partial_schedule().get_at(position))


def _carried_by(band: isl.ScheduleNode, position: int, dependence: isl.UnionMap) -> isl.UnionMap:
    """The instance pairs of ``dependence`` that the loop of member ``position`` of ``band``
    carries: both instances reach the band, have the same prefix schedule (the same
    iteration of every loop and sequence position around the member, the band's earlier
    members included) and different values of the member.

    The test maps the dependence into the schedule space ``[prefix, member]`` (one space,
    whatever the number of statements); only when it finds a carried pair does it go back
    to the statement pairs, to name one."""
    domain = band.get_domain()
    inside = dependence.intersect_domain(domain).intersect_range(domain)
    if inside.is_empty():
        return inside
    prefix = band.get_prefix_schedule_union_map().intersect_domain(domain)
    for earlier in range(position):
        prefix = prefix.flat_range_product(_member_map(band, earlier).intersect_domain(domain))
    member = _member_map(band, position).intersect_domain(domain)
    schedule = prefix.flat_range_product(member)
    mapped = inside.apply_domain(schedule).apply_range(schedule)
    depth = _dimension_count(prefix)
    names = ", ".join(f"p{i}" for i in range(depth))
    outer = f"{names}, " if depth else ""
    carried_values = isl.UnionMap(f"{{ [{outer}x] -> [{outer}y] : x < y or x > y }}")
    if mapped.intersect(carried_values).is_empty():
        return isl.UnionMap.empty(inside.get_space())
    same_value = member.apply_range(member.reverse())
    same_prefix = prefix.apply_range(prefix.reverse())
    return inside.intersect(same_prefix).subtract(same_value)


def check_legality(scop: Scop, schedule: isl.Schedule) -> None:
    """Raise :class:`ScheduleError` if ``schedule`` violates a dependence of ``scop``.

    Two conditions (isl manual, "Schedule Trees" and "Dependence Analysis"; Feautrier
    1992): every dependence maps to a lexicographically positive pair of schedule
    vectors (sources run before sinks), and each band member a parallel mark names
    (:class:`~polytf.schedules.marks.ParallelMark`: the only loops the code generator runs
    on all threads) carries no dependence:
    ``{ (s -> t) in D : prefix(s) = prefix(t) and member(s) != member(t) } = {}``.

    Raises:
        ScheduleError: naming the violated dependence kind (RAW/WAR/WAW), the statements
            and TensorFlow nodes involved, and one violating instance pair.
    """
    schedule_map = schedule.get_map().intersect_domain(scop.domain)
    n = _dimension_count(schedule_map)
    positive = _lex_positive(n)
    members = parallel_members(schedule)
    for kind, dependence in dependences_of(scop).named():
        violations: list[tuple[isl.Map, str]] = []

        def visit(relation: isl.Map, kind=kind) -> None:
            mapped = _scheduled(isl.UnionMap.from_map(relation), schedule_map)
            if not mapped.subtract(positive).is_empty():
                violations.append((relation, "schedule reverses"))

        if not _scheduled(dependence, schedule_map).is_subset(positive):
            dependence.foreach_map(visit)  # only to name one violating pair
        for dimension, band, position in members:
            carried = _carried_by(band, position, dependence)
            if not carried.is_empty():
                carried.foreach_map(lambda relation, k=dimension: violations.append((relation, f"parallel loop c{k} carries")))
        if violations:
            relation, what = violations[0]
            source = relation.get_tuple_name(isl.dim_type.in_)
            sink = relation.get_tuple_name(isl.dim_type.out)
            example = relation.wrap().sample_point()
            raise ScheduleError(
                f"kernel {scop.name}: the {what} the {kind} dependence {source} -> {sink} "
                f"(nodes '{scop.statement(source).node}' -> '{scop.statement(sink).node}'), e.g. {example}"
            )


@lru_cache(maxsize=256)
def _dependences_in_program_order(scop: Scop) -> isl.UnionMap:
    """Every dependence of ``scop`` mapped through its program-order schedule (memoised)."""
    return _scheduled(dependences_of(scop).all(), scop.original_schedule())


def carries_no_dependence(scop: Scop, dimension: int) -> bool:
    """True when shared dimension ``d{dimension}`` carries no dependence under program
    order, so a loop over it may run in parallel."""
    n = _dimension_count(scop.original_schedule())
    same = _relation(f"x{dimension + 1} = y{dimension + 1}", n)
    return _dependences_in_program_order(scop).is_subset(same)
