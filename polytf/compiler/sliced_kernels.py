"""Which kernels of a dynamic model at a batch size run as the smallest size's kernels, slice
by slice, instead of being compiled (:mod:`polytf.poly.sample_slicing`,
:mod:`polytf.runtime.cpu.sliced_kernel`).

A dynamic model (:mod:`polytf.compiler.dynamic_model`) builds each batch size ``N`` it is
called with as a static model; with the model at the batch symbol's smallest size ``b``
built (its *base*), each kernel of ``N``

- with a tuning record at ``N`` (``polytf tune --buckets N=8`` tuned it) is compiled with
  the record's recipe: a bucket's tuned kernel is its own object;
- else, when the kernel at ``N`` is the base's kernel over ``N / b`` slices, runs as the
  base's compiled kernel, once per slice: no isl or LLVM work, the object shared by every
  size (its slices entry takes the number of slices as an argument);
- but not when a slice is too small to run alone as fast as inside the kernel at ``N``:
  fewer than :data:`MIN_SLICE_POINTS` iteration points (a normalisation's or a depthwise
  convolution's few microseconds a sample, where the call costs as much as the work), or
  fewer points than the arrays every slice reads whole (the weights) have bytes (a
  classifier's ``[1, 1280] x [1280, 1000]`` per sample re-reads 5 MB of weights where the
  kernel at ``N`` reads them once: 3.8x the time at batch 8).

Measured in the model (`znver5`, 2 threads, MobileNetV2 and the Transformer encoder at batch
8, median of 7 alternating rounds): slicing every separable kernel but the classifier, 1.00-1.03x
and 0.94-1.02x the static model's time; with :data:`MIN_SLICE_POINTS`, 44 of 59 and 8 of 13
kernels sliced, 0.99x and 1.01-1.02x (results/dynamic_shapes.md).
"""

from __future__ import annotations

import math
from collections.abc import Collection

from polytf.compiler.prepared_model import PreparedModel
from polytf.poly.access_bounds import array_bytes
from polytf.poly.sample_slicing import SampleSlicing, sample_slicing
from polytf.poly.scop import Scop
from polytf.runtime.cpu.compiled_model import CompiledModel
from polytf.runtime.cpu.sliced_kernel import sliced_kernel
from polytf.targets.target import CompiledKernel

__all__ = ["MIN_SLICE_POINTS", "kernel_slicing", "sliced_kernels"]

#: The fewest iteration points (all statements) a slice must have to run as its own call
#: (module docstring): about 2 MFLOP of a convolution.
MIN_SLICE_POINTS = 2**20


def sliced_kernels(prepared: PreparedModel, base: CompiledModel, recorded: Collection[str] = ()) -> dict[str, CompiledKernel]:
    """Kernel name -> the kernel of ``prepared`` (a batch size ``N``) as ``base``'s kernel run
    on slices, for each kernel that has no tuning record (``recorded``: the names of those
    that do) and is sample-separable against the base's
    (:func:`~polytf.poly.sample_slicing.sample_slicing`).

    Args:
        prepared: the model at ``N``, before its kernels are compiled.
        base: the same model built at a batch size dividing ``N`` (same other sizes).
        recorded: kernels compiled from a record at ``N`` instead.
    """
    compiled = {kernel.scop.name: kernel for kernel in base.kernels}
    result = {}
    for lowered in prepared.kernels:
        name = lowered.scop.name
        kernel = compiled.get(name)
        if kernel is None or name in recorded:
            continue
        slicing = kernel_slicing(lowered.scop, kernel.scop)
        if slicing is not None:
            result[name] = sliced_kernel(kernel, lowered.scop, slicing, base.threads)
    return result


def kernel_slicing(scop: Scop, base: Scop) -> SampleSlicing | None:
    """How the kernel ``scop`` (at batch size ``N``) runs as the kernel ``base`` (the same
    model's at a batch size dividing ``N``) on slices, or None when it is compiled at ``N``:
    not sample-separable (:func:`~polytf.poly.sample_slicing.sample_slicing`), or a slice
    too small to run alone (module docstring)."""
    slicing = sample_slicing(scop, base)
    return slicing if slicing is not None and _large_enough(base, slicing) else None


def _large_enough(base: Scop, slicing: SampleSlicing) -> bool:
    """Whether a slice of ``base`` has at least :data:`MIN_SLICE_POINTS` iteration points, and
    at least as many as the arrays it reads whole (stride 0) have bytes (module docstring).

    The points are those of each statement's box of extents, its constraints (a convolution's
    padding) left out: counting them would take isl, which a warm load never runs (a warm load
    of a batch decides again which kernels it slices)."""
    points = sum(math.prod(statement.extents) for statement in base.statements)
    whole = sum(array_bytes(array) for array, stride in zip(base.arrays, slicing.strides) if stride == 0)
    return points >= max(whole, MIN_SLICE_POINTS)
