"""Data dependences of a Scop, computed by isl's dataflow analysis.

Memory-based dependences under the original (program-order) schedule:
read-after-write (RAW, flow), write-after-read (WAR, anti) and write-after-write
(WAW, output). A schedule is legal when it keeps every dependence's source before
its sink (Feautrier, "Some efficient solutions to the affine scheduling problem",
1992; isl manual, "Dependence Analysis").
"""

from __future__ import annotations

from dataclasses import dataclass

from polytf.islpy_on_demand import isl
from polytf.poly.scop import Scop, balanced_union


@dataclass(frozen=True)
class Dependences:
    """RAW, WAR and WAW dependences as isl union maps ``{ S[x] -> T[y] }``."""

    read_after_write: isl.UnionMap
    write_after_read: isl.UnionMap
    write_after_write: isl.UnionMap

    def all(self) -> isl.UnionMap:
        return self.read_after_write.union(self.write_after_read).union(self.write_after_write)

    def named(self) -> tuple[tuple[str, isl.UnionMap], ...]:
        return (("RAW", self.read_after_write), ("WAR", self.write_after_read), ("WAW", self.write_after_write))


def compute_dependences(scop: Scop) -> Dependences:
    """Memory-based dependences of ``scop`` under its original schedule.

    Without must-sources nothing kills a dependence, so isl's dataflow analysis with
    may-sources (isl manual, ``isl_union_access_info_compute_flow``) gives every pair of
    accesses to one element where the source runs first. That relation is computed here
    directly, in time linear in the pairs of accesses that share an array (not in the
    statement pairs): join the accesses on the element (``source -> element -> sink``),
    then keep the pairs the original schedule orders source first, i.e. statement ``S``
    before ``T`` in program order, or the same statement at a lexicographically smaller
    iteration (:meth:`Scop.original_schedule`: ``S_n[x] -> [n, x]``).
    """
    reads, writes = scop.reads(), scop.writes()
    position = {statement.name: index for index, statement in enumerate(scop.statements)}
    return Dependences(
        read_after_write=_ordered_pairs(writes, reads, position),
        write_after_read=_ordered_pairs(reads, writes, position),
        write_after_write=_ordered_pairs(writes, writes, position),
    )


def _ordered_pairs(sources: isl.UnionMap, sinks: isl.UnionMap, position: dict[str, int]) -> isl.UnionMap:
    """``{ S[x] -> T[y] : sources(S[x]) = sinks(T[y]), S[x] runs before T[y] }``."""
    pairs = sources.apply_range(sinks.reverse())
    kept: list[isl.UnionMap] = []

    def keep(relation: isl.Map) -> None:
        source = position[relation.get_tuple_name(isl.dim_type.in_)]
        sink = position[relation.get_tuple_name(isl.dim_type.out)]
        if source == sink:
            relation = relation.intersect(isl.Map.lex_lt(relation.get_space().domain()))
        if source <= sink and not relation.is_empty():
            kept.append(isl.UnionMap.from_map(relation.coalesce()))

    pairs.foreach_map(keep)
    return balanced_union(kept, isl.UnionMap.empty(pairs.get_space()))
