"""What a target lets a recipe use: vector lanes and registers on a CPU, threads and
shared memory per block and grid extents on a GPU; tiles rounded up to multiples.

Recipe validation (:mod:`polytf.schedules.validation`), the search spaces and the GPU
mapping read these, and each target states its own (:attr:`polytf.targets.target.Target.limits`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TargetLimits", "GRID_LIMITS", "round_up"]

#: blocks a CUDA grid may have along x, y, z (CUDA C++ Programming Guide, "Compute
#: Capabilities", maximum x-, y- and z-dimension of a grid of thread blocks)
GRID_LIMITS = (2**31 - 1, 65535, 65535)


@dataclass(frozen=True)
class TargetLimits:
    """What recipe validation needs to know of the target.

    The defaults are conservative: x86-64 with AVX2 (8 float32 lanes, 16 vector
    registers), whose caps also hold on AVX-512 machines.

    Attributes:
        vector_lanes: float32 lanes of a vector register (16 with AVX-512, 8 with AVX2).
        vector_registers: vector registers (32 with AVX-512, 16 with AVX2).
        max_threads_per_block: GPU: threads a block may have.
        shared_memory_per_block: GPU: shared memory a block may use, bytes.
    """

    vector_lanes: int = 8
    vector_registers: int = 16
    max_threads_per_block: int = 1024
    shared_memory_per_block: int = 48 * 1024

    def accumulators(self, register_sizes: tuple[int, ...]) -> int:
        """Vector registers the accumulators of a register tile take: the product of its
        sizes, the innermost (vectorised) one counted in vectors of ``vector_lanes``."""
        sizes = [size for size in register_sizes if size]
        if not sizes:
            return 0
        count = -(-sizes[-1] // self.vector_lanes)
        for size in sizes[:-1]:
            count *= size
        return count


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is at least ``value``."""
    return -(-value // multiple) * multiple
