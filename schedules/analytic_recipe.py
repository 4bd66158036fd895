"""The analytic default recipe: BLIS-style blocking computed from the target, not searched.

Low, Igual, Smith and Quintana-Orti, "Analytical Modeling Is Enough for High-Performance
BLIS" (ACM TOMS 43(2), 2016) derive every blocking parameter of a GEMM from the
machine: the register tile ``mr x nr`` from the vector width and register count, the
reduction block ``kc`` so that a micro-panel stays in L1, the panel ``nc`` of the packed
operand from the L2 size. polytf applies the same model to the anchor statement of every
kernel with a reduction (MatMul, Conv2D, DepthwiseConv2dNative, pooling), whose loops
are ``for d0..d{p-1}`` (outputs) ``for r*`` (reductions)::

    for d_last_tile in [0, N) step nc:          # the packed panel of the vectorised operand
      for d*:                                   # remaining outputs (rows: M, or H and W)
        for d_row_tile step mr:                 #   register tile rows
          for d_last_point step nr:             #   register tile columns (nr / lanes vectors)
            for r*:  acc[mr][nr] += A[.., r] * B[r, ..]   (the micro-kernel)

The choices, with ``L`` float32 lanes and ``R`` vector registers (:class:`TargetLimits`)
and the cache sizes of :class:`CacheSizes`:

- ``nr = 2 L`` (``L`` when the vectorised extent is at most ``L``; between ``L`` and ``2 L``
  one tile of two vectors, the second masked, rather than a whole vector and a masked one:
  MobileNetV2's 144 -> 24 projection at batch 8 on AVX-512, 0.75 ms against 0.96 with its
  residual add, caches flushed, 2 threads: each row of the activations is broadcast once
  per tile instead of twice); ``mr`` the largest row
  count whose ``mr * nr / L`` accumulators fill at most three quarters of ``R`` (6 x 16 on
  AVX2, 12 x 32 on AVX-512), then evened out over the extent (14 rows: two tiles of 7,
  not 12 + 2), and when the evened rows leave a third of the accumulators unused, ``nr``
  grows to three vectors (7 rows: ``4 x 24``, not ``4 x 16``; 30% faster on ResNet50's
  7x7x512 3x3 convolutions, one thread, caches flushed), except where the threads share
  the weights' panels and three-vector panels would give one thread more columns than
  two-vector ones (512 channels on 2 threads: 6 panels of 48 against 5, where 8 of 32
  each measured 9% faster in the model on AVX-512); when a read indexes the vectorised dimension through a floor division (a
  grouped convolution's ``floor(o / Og)``), ``nr`` is a multiple of that divisor too (and of
  ``L``): a register tile of whole groups keeps the index affine in the micro-kernel
  (4 x 24 for 24 outputs per group on AVX2);
- ``kc`` about 256 (``K`` cut into even blocks of at most 256, rounded up to the lanes) for a
  single reduction (a MatMul's ``K``) too long for the register tile's row panel
  (``mr x K`` floats) to stay in L1, else no reduction tile: an untiled reduction lets the
  micro-kernel start from zero and apply the epilogue in registers
  (:func:`polytf.schedules.builder.register_tile_run`), which measured 2x on MobileNetV2's
  ``[196, 576] x [576, 96]`` projection. Where the weights' panels are the outer loop (see
  below), the row panel need only stay within an eighth of L2, the panel of ``K x nc``
  weights in the other half: ResNet50's conv5 ``[49, 2048] x [2048, 512]`` products on 2
  threads, AVX-512, took 0.38 ms each in the model with ``kc = 256``, 0.25 ms untiled, and
  InceptionV3's ``[64, 1280..2048] x [.., 192..448]`` ones 0.25-0.44 ms against 0.14-0.29;
  a convolution's ``kh x kw x C`` is swept whole (its
  packed filter panel is sized instead);
- ``nc``: the largest multiple of ``nr`` whose packed panel (``K x nc`` floats) takes at
  most half of L2, at most ``N / threads`` so that every thread gets a panel;
- loop order: when the operand indexed by the vectorised dimension (the weights) is
  larger than the other operand (the activations), that dimension's tiles are the
  outermost, parallel loop (each thread keeps its own panel in L2 and streams the
  activations past it), ``nc`` then cut so that every thread gets as many columns as it
  can (:func:`balanced_tile`: 128 columns as 4 x 32 on 2 threads, not 48 + 48 + 32); otherwise the natural order, parallel over the first output
  dimension that has more than one iteration; when no dimension outside the rows has one
  iteration per thread (a MatMul with more activations than weights: a 1x1 convolution's
  ``[H*W, C] x [C, O]``), the rows are cut into tiles shared among the threads, else every
  thread but one would wait: at most ``ceil(M / threads)`` rows (a multiple of ``mr``), at
  most as many as keep the tile's block of the output (rows x ``nc``) in a quarter of L2
  (the zero fill, the micro-kernels and the fused epilogue sweep it one after the other:
  3136 x 256 outputs in tiles of 1572 rows were three trips to L3), balanced over the
  threads (:func:`balanced_tile`);
- pack the panels of the vectorised operand, and zero-pad a padded convolution's input,
  except a depthwise convolution's (:func:`depthwise_window`): its micro-kernel
  (:mod:`polytf.targets.depthwise_microkernel`) reads the input in place and skips the
  padding taps, a copy of the input per call less.

Kernels without a reduction keep the plain default: program order, parallel when legal,
LLVM's own vectorisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polytf.poly.affine import AffineExpr, FloorDiv, Modulo
from polytf.poly.flops import is_contraction
from polytf.poly.statement import Statement
from polytf.schedules.target_limits import round_up

__all__ = ["CacheSizes", "AnalyticBlocking", "analytic_blocking", "balanced_tile", "busiest_share", "depthwise_window", "even_rows", "register_column_multiple"]

#: Reduction block of a single long reduction (BLIS ``kc``), in elements.
REDUCTION_BLOCK = 256


@dataclass(frozen=True)
class CacheSizes:
    """Data cache sizes of one core, in bytes (the defaults: a common x86-64 core).

    Attributes:
        l1_bytes: L1 data cache.
        l2_bytes: L2 cache (private on current x86-64 and Arm server cores).
        l3_bytes: last-level cache (shared by all cores).
    """

    l1_bytes: int = 32 * 1024
    l2_bytes: int = 1024 * 1024
    l3_bytes: int = 8 * 1024 * 1024


@dataclass(frozen=True)
class AnalyticBlocking:
    """The blocking of one kernel (indices are shared-band dimensions).

    Attributes:
        register_rows: ``mr`` (0: the register tile has no row dimension).
        register_columns: ``nr``, a multiple of the vector lanes.
        column_tile: ``nc``, the cache tile of the vectorised dimension (a multiple of nr).
        row_tile: the cache tile of the row dimension (0: the whole extent).
        reduction_tile: ``kc`` of the first reduction iterator (0: untiled).
        weights_outer: the vectorised dimension's tiles form the outermost loop.
        pad: zero-pad a padded window's input (False: a depthwise convolution, read in place).
    """

    register_rows: int
    register_columns: int
    column_tile: int
    row_tile: int
    reduction_tile: int
    weights_outer: bool
    pad: bool = True


def depthwise_window(anchor: Statement, iterator: str) -> bool:
    """Whether ``anchor`` is a depthwise convolution's update: a sum of products
    (:func:`~polytf.poly.flops.is_contraction`) over window iterators whose every read indexes
    the vectorised output dimension ``iterator`` as itself (input channel = output channel,
    no floor division: a channel multiplier of 1)."""
    if not anchor.reduction_iterators or not is_contraction(anchor):
        return False
    plain = AffineExpr.of(iterator)
    reads = [access for access in anchor.value.loads() if access != anchor.write]
    return bool(reads) and all(
        plain in access.index and not any(isinstance(i, (FloorDiv, Modulo)) for i in access.index) for access in reads
    )


def even_rows(extent: int, most: int) -> int:
    """The fewest-tiles row count: ``ceil(extent / ceil(extent / most))`` (14 rows with
    ``most`` 12 give tiles of 7 and 7 instead of 12 and 2)."""
    if extent <= 0 or most <= 0:
        return max(0, min(extent, most))
    tiles = -(-extent // most)
    return -(-extent // tiles)


def register_column_multiple(anchor: Statement, iterator: str) -> int:
    """The multiple of which a register tile's columns over ``iterator`` (the vectorised
    dimension, tiles starting at multiples of their size) must be for every floor division
    and modulo index of ``anchor``'s reads to stay affine inside the tile: ``floor(c*i / D)``
    is ``c*t/D * k + floor(c*j / D)`` at ``i = t*k + j`` when ``D`` divides ``c*t``. The least
    common multiple over those indices; 1 when there are none (MatMul, Conv2D)."""
    multiple = 1
    for access in anchor.reads:
        for index in access.index:
            if isinstance(index, (FloorDiv, Modulo)):
                coefficient = index.numerator.coefficient(iterator)
                if coefficient:
                    multiple = math.lcm(multiple, index.divisor // math.gcd(coefficient, index.divisor))
    return multiple


def busiest_share(extent: int, tile: int, threads: int) -> int:
    """Iterations of a parallel loop over ``extent`` in tiles of ``tile`` that its busiest
    thread of ``threads`` runs: ``ceil(ceil(extent / tile) / threads) * tile`` (a last,
    partial tile counted whole)."""
    return -(-(-(-extent // tile)) // threads) * tile


def balanced_tile(extent: int, most: int, multiple: int, threads: int) -> int:
    """The tile of a parallel loop over ``extent`` that gives its ``threads`` (almost) the
    least work on the busiest thread: the largest multiple of ``multiple`` up to ``most``
    whose ``ceil(tiles / threads) * tile`` (``tiles = ceil(extent / tile)``) is within
    1/32 of the least (smaller tiles balance finer but each costs a trip through the loops).

    128 output channels in tiles of at most 48 on 2 threads: 48 makes three tiles, two on
    one thread (96 channels against 64 on the other: the kernel runs at 2/3 of the FMA
    peak); 32 makes four, two per thread (64 each)."""
    if most < multiple or threads <= 1:
        return most
    candidates = range(multiple, most + 1, multiple)
    least = min(busiest_share(extent, tile, threads) for tile in candidates)
    return max(tile for tile in candidates if busiest_share(extent, tile, threads) * 32 <= least * 33)


def _round_down(value: int, multiple: int) -> int:
    return max(multiple, value // multiple * multiple)


def analytic_blocking(
    anchor: Statement,
    depth: int,
    lanes: int,
    registers: int,
    caches: CacheSizes,
    threads: int,
    vectorised_reads: tuple[tuple[str, int], ...],
    other_reads: tuple[tuple[str, int], ...],
    column_multiple: int = 1,
) -> AnalyticBlocking | None:
    """The analytic blocking of ``anchor`` (see the module docstring), or None when it
    has no reduction, or its shared band does not reach its innermost output dimension
    (the one the register tile vectorises).

    Args:
        anchor: the kernel's anchor statement (output iterators, then reduction iterators).
        depth: depth of the shared outer band (the ``d`` dimensions that can be tiled).
        lanes: float32 lanes of a vector register.
        registers: vector registers.
        caches: per-core cache sizes.
        threads: threads the kernel runs on.
        vectorised_reads: ``(array, bytes)`` of the arrays the anchor reads through the
            vectorised (last shared) dimension and no other output dimension: the weights
            of a convolution or MatMul.
        other_reads: ``(array, bytes)`` of the other arrays it reads (the activations,
            including a depthwise convolution's or a pooling's input).
        column_multiple: ``nr`` must be a multiple of it (:func:`register_column_multiple`);
            ignored when its multiples of ``L`` do not fit in the registers or exceed the
            vectorised extent.
    """
    reductions = anchor.reduction_iterators
    if not reductions or depth == 0 or depth != len(anchor.output_iterators):
        return None  # nothing to block, or the vectorised dimension would not be the innermost output
    extents = dict(zip(anchor.iterators, anchor.extents))
    last = anchor.extents[depth - 1]
    columns = 2 * lanes if last > lanes else lanes  # 24 columns on 16 lanes: one 32-wide tile cut short (masked)
    budget = registers * 3 // 4
    unit = math.lcm(lanes, max(1, column_multiple))
    if columns % unit and unit // lanes <= budget and unit <= round_up(last, lanes):
        columns = unit  # whole groups of a grouped convolution per register tile
    most_rows = max(1, budget // (columns // lanes))
    row_extent = anchor.extents[depth - 2] if depth > 1 else 0
    rows = even_rows(row_extent, most_rows) if depth > 1 else 0
    if rows == 1:
        rows = 0
    weights_bytes = sum(size for _, size in vectorised_reads)
    activation_bytes = sum(size for _, size in other_reads)
    weights_outer = bool(vectorised_reads) and weights_bytes >= activation_bytes
    reduction_tile = 0
    reduction = math.prod(extents[r] for r in reductions)
    long = extents[reductions[0]] if len(reductions) == 1 else 0
    # the register tile's row panel (mr x K floats) must stay in L1 while the micro-kernels
    # sweep the columns; where the weights' panels are the outer loop, in an eighth of L2
    row_panel_bytes = caches.l2_bytes // 8 if weights_outer else caches.l1_bytes
    if long > 2 * REDUCTION_BLOCK and max(rows, 1) * long * 4 > row_panel_bytes:
        blocks = -(-long // REDUCTION_BLOCK)
        reduction_tile = round_up(-(-long // blocks), lanes)  # even blocks: 576 is not 256 + 256 + 64
        reduction = reduction_tile
    shared_columns = weights_outer and threads > 1

    def column_tile_of(columns: int) -> int:
        panel_columns = caches.l2_bytes // 2 // max(1, reduction * 4)
        tile = min(_round_down(panel_columns, columns), round_up(last, columns))
        if shared_columns:
            tile = balanced_tile(last, min(tile, _round_down(-(-last // threads), columns)), columns, threads)
        return tile

    def busiest_columns(columns: int) -> int:
        return busiest_share(last, column_tile_of(columns), threads)

    wider = lanes * min(3, budget // rows) if rows and columns == 2 * lanes else columns
    if wider > columns and last >= 2 * wider and (not shared_columns or busiest_columns(wider) * 32 <= busiest_columns(columns) * 33):
        # evened-out rows leave accumulators unused (7 output columns: tiles of 4 and 3 rows
        # of 2 vectors, 8 and 6 accumulators): a third vector per row fills them (4 x 24),
        # unless the threads that share the columns would then get unequal shares (512
        # channels in panels of 48: 6 panels on one thread, 5 on the other, against 8 of 32
        # each; ResNet50's 7x7x512 3x3 convolutions at batch 1 on 2 threads, AVX-512:
        # 0.65 ms each in the model with 7 x 48, 0.57 with 7 x 32)
        columns = wider
    column_tile = column_tile_of(columns)
    row_tile = 0
    if depth > 1 and reduction_tile:
        # a GEMM: the block of the row operand (mc x kc floats) takes about half of L2
        row_tile = min(_round_down(caches.l2_bytes // 2 // (reduction * 4), max(rows, 1)), round_up(row_extent, max(rows, 1)))
    if threads > 1 and depth > 1 and not weights_outer and math.prod(anchor.extents[: depth - 2]) < threads:
        # nothing outside the rows to share among the threads (a MatMul, a batch of one
        # matrix): the rows are cut into one tile per thread, the parallel loop
        split = round_up(-(-row_extent // threads), max(rows, 1))
        # the zero fill, the micro-kernels and the epilogue each sweep a row tile's block of
        # the output: a block within a quarter of L2 stays there between the sweeps
        block_rows = _round_down(caches.l2_bytes // 4 // (column_tile * 4), max(rows, 1))
        split = balanced_tile(row_extent, min(split, block_rows), max(rows, 1), threads)
        if split < row_extent:
            row_tile = min(row_tile, split) if row_tile else split
    pad = not depthwise_window(anchor, anchor.iterators[depth - 1])
    return AnalyticBlocking(rows, columns, column_tile, row_tile, reduction_tile, weights_outer, pad)
