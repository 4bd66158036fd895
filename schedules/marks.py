"""Mark nodes of polytf's schedule trees: typed values, encoded and decoded here only.

A mark node (isl manual, "Schedule Trees": ``isl_schedule_node_insert_mark``) carries an
``isl_id`` into the AST (``isl_ast_node_mark``), which is how the schedule builder tells
the code generator what a subtree is for:

- :class:`MicrokernelMark` sits above the register-tile band of the anchor statement:
  the code generator emits the subtree as an unroll-and-jammed micro-kernel.
- :class:`ParallelMark` sits directly above a band and names the members of it whose
  loops may run on all threads; legality (:mod:`polytf.schedules.legality`) proves each
  of those members free of loop-carried dependences, and the code generator distributes
  only a ``for`` node of one of them (isl names the AST iterator of schedule dimension
  ``k`` ``c{k}``; where isl drops the loop because it has one iteration, that part runs
  on one thread).

The id's name is the encoding (``"microkernel 6x16 d0,d1"``, ``"parallel c2"``): it is
what ``polytf show`` prints, and it survives isl's copies of the tree.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

MICROKERNEL = "microkernel"
PARALLEL = "parallel"


@dataclass(frozen=True)
class MicrokernelMark:
    """The register tile below the mark: ``register_sizes[i]`` points of statement
    iterator ``iterators[i]`` (outermost first; the last one is vectorised).

    Example: ``MicrokernelMark((6, 16), ("d0", "d1"))``, named ``"microkernel 6x16 d0,d1"``.
    """

    register_sizes: tuple[int, ...]
    iterators: tuple[str, ...]

    def name(self) -> str:
        return f"{MICROKERNEL} {'x'.join(map(str, self.register_sizes))} {','.join(self.iterators)}"

    def to_id(self) -> isl.Id:
        return isl.Id(self.name())

    @staticmethod
    def from_id(identifier: isl.Id) -> MicrokernelMark | None:
        """The mark an id encodes, or None when it is not a micro-kernel mark."""
        mark = decode_mark(identifier.get_name())
        return mark if isinstance(mark, MicrokernelMark) else None


@dataclass(frozen=True)
class ParallelMark:
    """The band below the mark has members at schedule dimensions ``dimensions`` whose loops
    may run in parallel (AST iterators ``c{k}``); the code generator distributes the
    outermost loop of these that isl generates, in each part of the code under the mark.

    Example: ``ParallelMark((2,))``, named ``"parallel c2"``.
    """

    dimensions: tuple[int, ...]

    @property
    def iterators(self) -> tuple[str, ...]:
        """Names isl's AST generator gives the loops of these schedule dimensions."""
        return tuple(f"c{k}" for k in self.dimensions)

    def name(self) -> str:
        return f"{PARALLEL} {','.join(self.iterators)}"

    def to_id(self) -> isl.Id:
        return isl.Id(self.name())

    @staticmethod
    def from_id(identifier: isl.Id) -> ParallelMark | None:
        """The mark an id encodes, or None when it is not a parallel mark."""
        mark = decode_mark(identifier.get_name())
        return mark if isinstance(mark, ParallelMark) else None


Mark = MicrokernelMark | ParallelMark


def _integers(text: str, separator: str, prefix: str = "") -> tuple[int, ...] | None:
    values = []
    for part in text.split(separator):
        if not part.startswith(prefix) or not part[len(prefix) :].isdigit():
            return None
        values.append(int(part[len(prefix) :]))
    return tuple(values)


def decode_mark(name: str) -> Mark | None:
    """The mark a mark node's id name encodes, or None for a name polytf did not write."""
    parts = name.split(" ")
    if len(parts) != (3 if parts[0] == MICROKERNEL else 2):
        return None
    if parts[0] == MICROKERNEL:
        sizes = _integers(parts[1], "x")
        iterators = tuple(parts[2].split(","))
        return MicrokernelMark(sizes, iterators) if sizes is not None and len(sizes) == len(iterators) else None
    if parts[0] == PARALLEL:
        dimensions = _integers(parts[1], ",", "c")
        return ParallelMark(dimensions) if dimensions is not None else None
    return None


def mark_of(node: isl.AstNode | isl.ScheduleNode) -> Mark | None:
    """The decoded mark of an AST or schedule mark node (None for other nodes)."""
    mark_type = isl.ast_node_type.mark if isinstance(node, isl.AstNode) else isl.schedule_node_type.mark
    if node.get_type() != mark_type:
        return None
    return decode_mark(node.mark_get_id().get_name())


__all__ = ["MICROKERNEL", "PARALLEL", "MicrokernelMark", "ParallelMark", "Mark", "decode_mark", "mark_of"]
