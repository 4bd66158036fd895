"""The memory plan of a model call: buffers that are never live at the same time share memory.

Every call of a model needs a buffer for each tensor passed between its steps
(INTERMEDIATE) and each kernel temporary (PRIVATE, role ``"temporary"``). Given one buffer
each, a CNN's execution context is the sum of all its activations (MobileNetV2 at batch 1:
27 MB), although only the tensors of a few neighbouring layers are live at any step. As
XLA's buffer assignment (``xla/service/buffer_assignment.cc`` and its heap simulator,
``heap_simulator.cc``) and TVM's graph memory planner (``StorageRewrite``,
``relay/backend/graph_plan_memory.cc``) do, the plan gives each such buffer a byte offset in
one *arena* so that buffers whose live ranges overlap never overlap in memory.

Live ranges. Steps (kernels and host steps) run one after the other in execution order. A
buffer is live over the closed range ``[first step that binds it, last step that binds
it]``. Closed ranges make a step's inputs and outputs live at that step together, so a
kernel never reads and writes overlapping memory. The binding plan already resolved what
shares a buffer before this plan: a view (Reshape, Squeeze, ...) is bound to its base's
storage tensor, and a tensor placed inside a concatenation or padding
(:mod:`polytf.plan.buffer_placement`) is accessed through the enclosing buffer, so each
lives as long as everything that touches the buffer. A kernel temporary is live at its own
step only. Host steps receive their buffers only while they run (they copy their results
into them), so they keep no reference past their step.

A kernel's scratch array (a packed panel, a zero-padded or im2col copy) also lives at its
kernel's step only when the kernel's copy statements write all of it on every call, before
anything reads it (the schedule builder runs the copies first): a zero-padded copy writes
its halo and its interior, a full panel every element
(:func:`polytf.plan.binding_plan.scratch_written_whole`, checked with isl on the copies'
write relations). A scratch array with elements no copy writes (the
padding of a last, partial panel) keeps a buffer of its own, which the runtimes zero-fill
once, as the kernel may read those elements as zeros.

Not planned (each keeps a buffer of its own): the caller's inputs and fresh outputs, and the
model's constants (shared by every context, read-only).

Offsets. Greedy by size (Pisarchyk & Lee, "Efficient Memory Management for Deep Neural Net
Inference", 2020, section 4.3 "Greedy by Size for Offset Calculation"): buffers are taken
from the largest down; each goes into the smallest gap, between the buffers already placed
whose live ranges overlap its own, that holds it, or above the highest of them. Every
offset is a multiple of :data:`~polytf.plan.buffers.ALIGNMENT_BYTES` (64: a cache line, a
full AVX-512 vector), as every buffer of the runtime is.

The plan is a pure function of the binding plan: the CPU runtime's execution contexts (one
arena each) and the AOT export's workspace use the same offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from polytf.plan.binding_plan import ModelPlan
from polytf.plan.bindings import INTERMEDIATE, PRIVATE, HostPlan, KernelPlan
from polytf.plan.buffers import ALIGNMENT_BYTES
from polytf.schedules.data_layout import SCRATCH

__all__ = [
    "BufferLifetime",
    "MemoryPlan",
    "assign_offsets",
    "buffer_lifetimes",
    "plan_memory",
    "temporary_key",
]


def _aligned(nbytes: int) -> int:
    return -(-int(nbytes) // ALIGNMENT_BYTES) * ALIGNMENT_BYTES


def temporary_key(step: int, slot: int) -> str:
    """The key of the kernel temporary in argument ``slot`` of step ``step`` (execution order)."""
    return f"step {step}/slot {slot}"


@dataclass(frozen=True)
class BufferLifetime:
    """One buffer the plan places.

    Attributes:
        key: the storage tensor of an INTERMEDIATE, :func:`temporary_key` of a temporary.
        nbytes: its size in bytes (at least 1).
        first_step, last_step: the closed range of steps (execution order) it is live in.
    """

    key: str
    nbytes: int
    first_step: int
    last_step: int

    def overlaps(self, other: BufferLifetime) -> bool:
        """Whether both are live at some step."""
        return self.first_step <= other.last_step and other.first_step <= self.last_step


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offsets of the call buffers of a model in one arena.

    Attributes:
        lifetimes: every buffer placed, with its live range.
        offsets: key -> byte offset in the arena (a multiple of ``ALIGNMENT_BYTES``).
        arena_bytes: the arena's size (a multiple of ``ALIGNMENT_BYTES``; 0 when empty).
    """

    lifetimes: tuple[BufferLifetime, ...]
    offsets: dict[str, int]
    arena_bytes: int

    @property
    def unshared_bytes(self) -> int:
        """Bytes the same buffers take when each has its own (aligned) memory."""
        return sum(_aligned(lifetime.nbytes) for lifetime in self.lifetimes)

    def view(self, arena: np.ndarray, key: str, shape: Sequence[int], dtype: str) -> np.ndarray:
        """The C-contiguous array ``key`` holds inside ``arena`` (a uint8 array of
        :attr:`arena_bytes` bytes whose data starts on an aligned address)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        start = self.offsets[key]
        return arena[start : start + count * dtype.itemsize].view(dtype).reshape(tuple(shape))


def assign_offsets(lifetimes: Iterable[BufferLifetime]) -> MemoryPlan:
    """Offsets for ``lifetimes``, greedy by size (see the module): no two buffers live at the
    same step overlap in memory, and the arena is at most the sum of their aligned sizes.

    Args:
        lifetimes: buffers with distinct keys, ``nbytes >= 0``, ``first_step <= last_step``.

    Returns:
        The plan (deterministic: ties are broken by first step, then key).
    """
    lifetimes = tuple(lifetimes)
    order = sorted(lifetimes, key=lambda b: (-_aligned(max(b.nbytes, 1)), b.first_step, b.key))
    placed: list[tuple[int, int, BufferLifetime]] = []  # (offset, aligned bytes, buffer)
    offsets: dict[str, int] = {}
    arena = 0
    for buffer in order:
        size = _aligned(max(buffer.nbytes, 1))
        best, best_gap, cursor = None, None, 0
        for offset, nbytes, other in sorted((p for p in placed if p[2].overlaps(buffer)), key=lambda p: p[0]):
            gap = offset - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, offset + nbytes)
        start = cursor if best is None else best
        placed.append((start, size, buffer))
        offsets[buffer.key] = start
        arena = max(arena, start + size)
    return MemoryPlan(lifetimes, offsets, arena)


def _nbytes(shape: Sequence[int], dtype: str) -> int:
    return (int(np.prod(shape, dtype=np.int64)) if len(shape) else 1) * np.dtype(dtype).itemsize


def buffer_lifetimes(plan: ModelPlan) -> list[BufferLifetime]:
    """The live range and size of every INTERMEDIATE, kernel temporary and scratch array
    written whole (``plan.scratch_written_whole``) of ``plan``.

    A temporary's size is the larger of its shape's bytes and the bytes its kernel's access
    relations need (``argument_bytes``).
    """
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    sizes: dict[str, int] = {storage: _nbytes(shape, dtype) for storage, (shape, dtype) in plan.intermediates.items()}

    def touch(key: str, step: int) -> None:
        first.setdefault(key, step)
        last[key] = step

    for position, step in enumerate(plan.steps):
        if isinstance(step, HostPlan):
            bindings = list(step.sources) + [binding for _, binding in step.destinations]
            for binding in bindings:
                if binding.kind == INTERMEDIATE:
                    touch(binding.key, position)
            continue
        assert isinstance(step, KernelPlan)
        whole = plan.scratch_written_whole.get(position, frozenset())
        for slot, (binding, info) in enumerate(zip(step.bindings, step.kernel.arrays)):
            if binding.kind == INTERMEDIATE:
                touch(binding.key, position)
            elif binding.kind == PRIVATE and (info.role != SCRATCH or info.name in whole):
                key = temporary_key(position, slot)
                sizes[key] = max(_nbytes(info.shape, info.dtype), int(step.kernel.argument_bytes[slot]))
                touch(key, position)
    return [BufferLifetime(key, sizes[key], first[key], last[key]) for key in first]


def plan_memory(plan: ModelPlan) -> MemoryPlan:
    """The memory plan of a model's call buffers: :func:`assign_offsets` of :func:`buffer_lifetimes`."""
    return assign_offsets(buffer_lifetimes(plan))
