"""An exported model whose batch is an argument: every kernel runs its batch-``b`` code on the
``N / b`` slices of the batch (:mod:`polytf.poly.sample_slicing`), through its slices entry
point (``<kernel>_slices``: :mod:`polytf.targets.llvm_codegen`).

``polytf compile`` of a model with a ``None`` batch lowers it at the batch symbol's smallest
size ``b`` and at ``2 b``; each kernel must be the same at both but for the batch (else the
export names the kernel that mixes samples and asks for a fixed batch). The model is laid out
at ``b`` (:func:`polytf.export.model_layout.layout_model`); a call at ``N`` then has ``count =
N / b`` slices and

- the caller's inputs and outputs are ``N``-sized, each kernel's argument moved on by its
  slice's bytes per run (:class:`SlicedCall`);
- the workspace's arena (intermediates and temporaries, placed by liveness at ``b``) is
  stretched by ``count``: a buffer at arena offset ``o`` lives at ``count * o``, so buffers
  apart at ``b`` stay apart (``[o, o + s)`` and ``[o', o' + s')`` disjoint give ``[count o,
  count (o + s))`` and ``[count o', count (o' + s'))`` disjoint), and its slice ``k`` at
  ``count * o + k * s``; the buffers after the arena move on by ``(count - 1)`` arena sizes;
- each scratch array a kernel's code writes has one copy per thread (``copies``, the thread
  count the model was exported for): the runs of a thread use its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from polytf.export.kernel_code import LinkableKernel
from polytf.poly.access_bounds import array_bytes
from polytf.poly.sample_slicing import SampleSlicing

__all__ = ["ExportedBatch", "SlicedCall", "sliced_linkable_kernel"]


@dataclass(frozen=True)
class ExportedBatch:
    """The batch argument of an exported model.

    Attributes:
        symbol: the size symbol (``N``).
        multiple: the batch the kernels were compiled for (``b``): a call's batch is a
            multiple of it.
        minimum, maximum: the symbol's range (``maximum`` None: unbounded).
    """

    symbol: str
    multiple: int
    minimum: int
    maximum: int | None

    def accepts(self, batch: int) -> bool:
        """Whether a call may pass ``batch``."""
        return batch >= self.minimum and (self.maximum is None or batch <= self.maximum) and batch % self.multiple == 0


@dataclass(frozen=True)
class SlicedCall:
    """How one kernel runs on the slices of a batch.

    Attributes:
        strides: per argument (``kernel.arrays`` order), bytes per slice (0: the same buffer
            for every run, a weight or a scratch array).
        thread_strides: per argument, bytes per thread copy (a scratch array the code writes).
        copies: threads that have a copy (the kernel runs on at most so many; 0: no copies,
            any thread count).
    """

    strides: tuple[int, ...]
    thread_strides: tuple[int, ...]
    copies: int


def sliced_linkable_kernel(kernel: LinkableKernel, slicing: SampleSlicing, threads: int) -> tuple[LinkableKernel, SlicedCall]:
    """``kernel`` (compiled at batch ``b``) with one copy per thread (``threads``) of each
    scratch array its code writes (``[threads, *shape]``, so that the layout gives it room),
    and how it runs on slices.

    Raises:
        ValueError: ``slicing`` does not give one stride per array of ``kernel.scop``.
    """
    own = len(kernel.scop.arrays)
    if len(slicing.strides) != own:
        raise ValueError(f"kernel {kernel.symbol}: {len(slicing.strides)} strides for {own} arrays")
    packed = {copy.write.array for copy in kernel.constant_copies}  # written at export, then only read
    threads = max(1, int(threads))
    arrays, thread_strides = list(kernel.arrays[:own]), [0] * own
    for info in kernel.arrays[own:]:
        shared = info.name not in packed and threads > 1
        arrays.append(replace(info, shape=(threads, *info.shape)) if shared else info)
        thread_strides.append(array_bytes(info) if shared else 0)
    argument_bytes = tuple(needed + (threads - 1) * copy for needed, copy in zip(kernel.argument_bytes, thread_strides))
    call = SlicedCall(slicing.strides + (0,) * (len(kernel.arrays) - own), tuple(thread_strides), threads if any(thread_strides) else 0)
    return replace(kernel, arrays=tuple(arrays), argument_bytes=argument_bytes), call
