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
- :class:`GpuMark` sits directly above a band whose members are mapped to the blocks of a
  CUDA grid or to the threads of a block (PPCG's ``kernel`` and ``thread`` marks,
  Verdoolaege et al., TACO 2013); legality proves each mapped member free of
  loop-carried dependences, as for a parallel mark.
- :class:`BarrierMark` sits above a subtree after which every thread of a block waits for
  the others (``__syncthreads``, ``llvm.nvvm.barrier0``): shared-memory copies and the
  compute that reads them. On the CPU it is nothing.

The id's name is the encoding (``"microkernel 6x16 d0,d1"``, ``"parallel c2"``): it is
what ``polytf show`` prints, and it survives isl's copies of the tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from polytf.islpy_on_demand import isl

MICROKERNEL = "microkernel"
PARALLEL = "parallel"
GPU_BLOCKS = "gpu_blocks"
GPU_THREADS = "gpu_threads"
BARRIER = "barrier"
#: CUDA's hardware dimensions, x the fastest-varying (consecutive threads along x read
#: consecutive addresses when it is mapped to the innermost dimension)
HARDWARE_DIMENSIONS = ("x", "y", "z")


def _ast_iterators(dimensions: tuple[int, ...]) -> tuple[str, ...]:
    """The names isl's AST generator gives the loops of schedule dimensions ``dimensions``
    (``c{k}``, isl's default iterator prefix)."""
    return tuple(f"c{k}" for k in dimensions)


class _EncodedMark:
    """A mark whose id's name encodes it (:meth:`name`, decoded by :func:`decode_mark`)."""

    def name(self) -> str:
        raise NotImplementedError

    def to_id(self) -> isl.Id:
        return isl.Id(self.name())

    @classmethod
    def from_id(cls, identifier: isl.Id) -> Mark | None:
        """The mark an id encodes, or None when it is not a mark of this class."""
        mark = decode_mark(identifier.get_name())
        return mark if isinstance(mark, cls) else None


@dataclass(frozen=True)
class MicrokernelMark(_EncodedMark):
    """The register tile below the mark: ``register_sizes[i]`` points of statement
    iterator ``iterators[i]`` (outermost first; the last one is vectorised).

    Example: ``MicrokernelMark((6, 16), ("d0", "d1"))``, named ``"microkernel 6x16 d0,d1"``.
    """

    register_sizes: tuple[int, ...]
    iterators: tuple[str, ...]

    def name(self) -> str:
        return f"{MICROKERNEL} {'x'.join(map(str, self.register_sizes))} {','.join(self.iterators)}"


@dataclass(frozen=True)
class ParallelMark(_EncodedMark):
    """The band below the mark has members at schedule dimensions ``dimensions`` whose loops
    may run in parallel (AST iterators ``c{k}``); the code generator distributes the
    outermost loop of these that isl generates, in each part of the code under the mark.

    Example: ``ParallelMark((2,))``, named ``"parallel c2"``.
    """

    dimensions: tuple[int, ...]

    @property
    def iterators(self) -> tuple[str, ...]:
        """Names isl's AST generator gives the loops of these schedule dimensions."""
        return _ast_iterators(self.dimensions)

    def name(self) -> str:
        return f"{PARALLEL} {','.join(self.iterators)}"


@dataclass(frozen=True)
class GpuMark(_EncodedMark):
    """The band below maps its members at schedule dimensions ``dimensions`` to the blocks
    (``kind == "blocks"``: ``blockIdx``) or threads (``kind == "threads"``: ``threadIdx``)
    of a CUDA launch, member ``dimensions[i]`` to hardware dimension ``hardware[i]``.

    Example: ``GpuMark("threads", (3, 4), ("y", "x"))``, named ``"gpu_threads c3:y,c4:x"``.
    """

    kind: str
    dimensions: tuple[int, ...]
    hardware: tuple[str, ...]

    @property
    def iterators(self) -> tuple[str, ...]:
        """Names isl's AST generator gives the loops of these schedule dimensions."""
        return _ast_iterators(self.dimensions)

    def hardware_of(self, iterator: str) -> str | None:
        """The hardware dimension (``"x"``, ``"y"``, ``"z"``) AST iterator ``iterator`` is
        mapped to, or None."""
        for name, hardware in zip(self.iterators, self.hardware):
            if name == iterator:
                return hardware
        return None

    def name(self) -> str:
        prefix = GPU_BLOCKS if self.kind == "blocks" else GPU_THREADS
        return f"{prefix} {','.join(f'{it}:{hw}' for it, hw in zip(self.iterators, self.hardware))}"


@dataclass(frozen=True)
class BarrierMark(_EncodedMark):
    """After the subtree below, every thread of the block waits for the others."""

    def name(self) -> str:
        return BARRIER


Mark = MicrokernelMark | ParallelMark | GpuMark | BarrierMark


def _gpu_mark(kind: str, text: str) -> GpuMark | None:
    dimensions, hardware = [], []
    for part in text.split(","):
        iterator, _, dimension = part.partition(":")
        if not iterator.startswith("c") or not iterator[1:].isdigit() or dimension not in HARDWARE_DIMENSIONS:
            return None
        dimensions.append(int(iterator[1:]))
        hardware.append(dimension)
    if len(set(hardware)) != len(hardware):
        return None
    return GpuMark(kind, tuple(dimensions), tuple(hardware))


def _integers(text: str, separator: str, prefix: str = "") -> tuple[int, ...] | None:
    values = []
    for part in text.split(separator):
        if not part.startswith(prefix) or not part[len(prefix) :].isdigit():
            return None
        values.append(int(part[len(prefix) :]))
    return tuple(values)


def decode_mark(name: str) -> Mark | None:
    """The mark a mark node's id name encodes, or None for a name polytf did not write."""
    if name == BARRIER:
        return BarrierMark()
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
    if parts[0] in (GPU_BLOCKS, GPU_THREADS):
        return _gpu_mark("blocks" if parts[0] == GPU_BLOCKS else "threads", parts[1])
    return None


def mark_of(node: isl.AstNode | isl.ScheduleNode) -> Mark | None:
    """The decoded mark of an AST or schedule mark node (None for other nodes)."""
    mark_type = isl.ast_node_type.mark if isinstance(node, isl.AstNode) else isl.schedule_node_type.mark
    if node.get_type() != mark_type:
        return None
    return decode_mark(node.mark_get_id().get_name())


__all__ = [
    "MICROKERNEL",
    "PARALLEL",
    "GPU_BLOCKS",
    "GPU_THREADS",
    "BARRIER",
    "HARDWARE_DIMENSIONS",
    "MicrokernelMark",
    "ParallelMark",
    "GpuMark",
    "BarrierMark",
    "Mark",
    "decode_mark",
    "mark_of",
]
