"""Data dependences of a Scop, computed by isl's dataflow analysis.

Memory-based dependences under the original (program-order) schedule:
read-after-write (RAW, flow), write-after-read (WAR, anti) and write-after-write
(WAW, output). A schedule is legal when it keeps every dependence's source before
its sink (Feautrier, "Some efficient solutions to the affine scheduling problem",
1992; isl manual, "Dependence Analysis").
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polytf.poly.scop import Scop


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

    Source: isl manual, ``isl_union_access_info_compute_flow`` with may-sources.
    """
    schedule = scop.original_schedule()
    reads, writes = scop.reads(), scop.writes()

    def flow(sink: isl.UnionMap, source: isl.UnionMap) -> isl.UnionMap:
        info = isl.UnionAccessInfo.from_sink(sink).set_may_source(source).set_schedule_map(schedule)
        return info.compute_flow().get_may_dependence()

    return Dependences(
        read_after_write=flow(reads, writes),
        write_after_read=flow(writes, reads),
        write_after_write=flow(writes, writes),
    )
