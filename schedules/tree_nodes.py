"""Building blocks of polytf's schedule trees, shared by the CPU builder
(:mod:`polytf.schedules.builder`) and the GPU mapping (:mod:`polytf.schedules.gpu_mapping`).

isl manual, "Schedule Trees": a band is a ``MultiUnionPwAff`` with one member per loop,
each member a piecewise affine expression per statement; a sequence node runs its filters'
statements one after the other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from polytf.islpy_on_demand import isl
from polytf.poly.scop import balanced_union
from polytf.poly.statement import Statement

#: A band member: the isl expression of a statement (over its iterators).
MemberExpression = Callable[[Statement], str]


def partial_schedule(statements: Sequence[Statement], members: Sequence[MemberExpression]) -> isl.MultiUnionPwAff:
    """The partial schedule of a band ``[member_0, member_1, ...]`` over ``statements``, e.g. the member
    ``lambda s: "floor(d0/64)"`` gives ``{ S0[d0, d1] -> [(floor(d0/64))]; S1[...] -> ... }``."""
    parts = []
    for member in members:
        pieces = "; ".join(f"{s.name}[{', '.join(s.iterators)}] -> [({member(s)})]" for s in statements)
        parts.append(f"{{ {pieces} }}")
    return isl.MultiUnionPwAff(f"[{', '.join(parts)}]")


def union_domain(statements: Sequence[Statement]) -> isl.UnionSet:
    """The union of the statements' iteration domains."""
    empty = isl.UnionSet.empty(isl.Space.params_alloc(isl.DEFAULT_CONTEXT, 0))
    return balanced_union([isl.UnionSet.from_set(s.domain()) for s in statements], empty)


def insert_statement_sequence(node: isl.ScheduleNode, statements: Sequence[Statement], subtree: Callable[[isl.ScheduleNode, Statement], isl.ScheduleNode]) -> isl.ScheduleNode:
    """Below ``node``, one statement after the other in program order (a sequence of one
    filter per statement; nothing for a single statement), each filter's subtree built by
    ``subtree(node below the filter, statement)``, which returns a node of the new tree.
    Returns a node of the new tree (the sequence, or the single statement's subtree's)."""
    return insert_unit_sequence(node, [(statement,) for statement in statements], lambda below, unit: subtree(below, unit[0]))


def insert_unit_sequence(
    node: isl.ScheduleNode, units: Sequence[tuple[Statement, ...]], subtree: Callable[[isl.ScheduleNode, tuple[Statement, ...]], isl.ScheduleNode]
) -> isl.ScheduleNode:
    """As :func:`insert_statement_sequence`, over units of one or more statements (one filter
    per unit, the union of its statements' domains), in program order."""
    if len(units) == 1:
        return subtree(node, units[0])
    filters = isl.UnionSetList.alloc(isl.DEFAULT_CONTEXT, len(units))
    for unit in units:
        filters = filters.add(union_domain(unit))
    node = node.insert_sequence(filters)
    for index, unit in enumerate(units):
        node = subtree(node.child(index).child(0), unit)
        while node.get_type() != isl.schedule_node_type.sequence:
            node = node.parent()
    return node


__all__ = ["MemberExpression", "partial_schedule", "union_domain", "insert_statement_sequence", "insert_unit_sequence"]
