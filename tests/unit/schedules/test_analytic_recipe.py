"""The analytic default recipe: BLIS-style blocking from the target's lanes, registers and
caches (Low et al., TOMS 2016), checked for its numbers and, like every recipe, against
the reference on both vector widths."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import (
    build_graph,
    const,
    graph_conv_bias_relu,
    graph_depthwise,
    graph_matmul_bias_relu,
    graph_maxpool,
    kernels_of,
    placeholder,
)
from roundtrip import AVX2_LIMITS, AVX512_LIMITS, LEGAL, TARGET, roundtrip

from polytf.graph import Node
from polytf.schedules.analytic_recipe import CacheSizes, analytic_blocking, balanced_tile, even_rows
from polytf.schedules.search_space import SearchSpace
from polytf.schedules.structure import anchor_statement, shared_band_depth
from polytf.schedules.validation import validate_recipe
from polytf.targets.host_caches import host_cache_sizes, parse_cache_size

CACHES = CacheSizes(48 * 1024, 2 * 1024 * 1024, 32 * 1024 * 1024)


@pytest.mark.parametrize("extent, most, rows", [(14, 12, 7), (56, 12, 12), (28, 12, 10), (7, 12, 7), (13, 6, 5), (1, 6, 1), (6, 6, 6)])
def test_even_rows_use_the_fewest_tiles_of_equal_size(extent, most, rows):
    assert even_rows(extent, most) == rows
    assert -(-extent // rows) == -(-extent // most)  # no more tiles than with the largest rows


@pytest.mark.parametrize("limits, register_tile", [(AVX2_LIMITS, (6, 16)), (AVX512_LIMITS, (12, 32))])
def test_register_tile_fills_three_quarters_of_the_vector_registers(limits, register_tile):
    kernel = kernels_of(graph_matmul_bias_relu(96, 2100, 64))[0]
    anchor = anchor_statement(kernel.scop)
    blocking = analytic_blocking(anchor, 2, limits.vector_lanes, limits.vector_registers, CACHES, 2, (("A1", 2100 * 64 * 4),), (("A0", 96 * 2100 * 4),))
    assert (blocking.register_rows, blocking.register_columns) == register_tile
    assert limits.accumulators(register_tile) <= limits.vector_registers * 3 // 4
    assert blocking.reduction_tile == 240  # one long reduction: BLIS's kc, 2100 as 9 even blocks
    assert blocking.column_tile % blocking.register_columns == 0
    assert blocking.column_tile * blocking.reduction_tile * 4 <= CACHES.l2_bytes // 2


def test_big_weights_put_their_panels_outermost_and_split_them_between_threads():
    kernel = kernels_of(graph_conv_bias_relu(7, 7, 64, 128, stride=1))[0]
    anchor = anchor_statement(kernel.scop)
    depth = shared_band_depth(kernel.scop)
    weights, activations = (("A1", 3 * 3 * 64 * 128 * 4),), (("A0", 9 * 9 * 64 * 4),)
    blocking = analytic_blocking(anchor, depth, 16, 32, CACHES, 2, weights, activations)
    assert blocking.weights_outer and blocking.register_rows == 7  # 7 output columns: one tile of 7
    assert blocking.column_tile <= 64  # 128 output channels: a panel per thread at least
    flipped = analytic_blocking(anchor, depth, 16, 32, CACHES, 2, weights, (("A0", 10**9),))
    assert not flipped.weights_outer


@pytest.mark.parametrize(
    "extent, most, multiple, threads, tile",
    [(128, 48, 16, 2, 32), (128, 64, 16, 2, 64), (512, 16, 16, 2, 16), (96, 48, 16, 2, 48), (80, 48, 16, 2, 48), (160, 64, 16, 3, 64), (8, 16, 16, 2, 16)],
)
def test_balanced_tiles_leave_no_thread_with_an_extra_tile(extent, most, multiple, threads, tile):
    assert balanced_tile(extent, most, multiple, threads) == tile
    busiest = lambda t: -(-(-(-extent // t)) // threads) * t  # noqa: E731 - the work of the busiest thread
    assert all(busiest(tile) * 32 <= busiest(other) * 33 for other in range(multiple, most + 1, multiple))


def test_weights_outer_channel_tiles_divide_evenly_among_threads():
    """ResNet50's 3x3 convolutions over 128 channels, with a 512 KiB L2 (48 columns fit half
    of it): 4 tiles of 32 on 2 threads, not 48 + 48 + 32 (one thread with two thirds of the work)."""
    kernel = kernels_of(graph_conv_bias_relu(28, 28, 128, 128, stride=1))[0]
    anchor = anchor_statement(kernel.scop)
    caches = CacheSizes(32 * 1024, 512 * 1024, 32 * 1024 * 1024)
    weights, activations = (("A1", 9 * 128 * 128 * 4),), (("A0", 30 * 30 * 128 * 4),)
    blocking = analytic_blocking(anchor, shared_band_depth(kernel.scop), 8, 16, caches, 2, weights, activations)
    assert blocking.weights_outer and blocking.column_tile == 32
    assert analytic_blocking(anchor, shared_band_depth(kernel.scop), 8, 16, caches, 1, weights, activations).column_tile == 48


@pytest.mark.parametrize(
    "graph",
    [
        graph_matmul_bias_relu(37, 530, 29),
        graph_matmul_bias_relu(1, 64, 10),
        graph_conv_bias_relu(14, 14, 8, 40, stride=1),
        graph_conv_bias_relu(9, 7, 3, 5, stride=2),
        graph_maxpool(9, 8, 16, padding="VALID"),
        graph_maxpool(9, 8, 16, padding="SAME"),
    ],
    ids=["matmul", "matvec", "conv_same", "conv_strided", "maxpool_valid", "maxpool_same"],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_default_recipe_is_valid_legal_and_correct(graph, threads):
    for kernel in kernels_of(graph):
        space = SearchSpace.for_scop(kernel.scop, threads, TARGET.vector_lanes, TARGET.vector_registers, CACHES)
        recipe = space.default_recipe()
        assert space.contains(recipe)  # the tuner starts from it
        for limits in (AVX2_LIMITS, AVX512_LIMITS):
            avx = SearchSpace.for_scop(kernel.scop, threads, limits.vector_lanes, limits.vector_registers, CACHES)
            validate_recipe(kernel.scop, avx.default_recipe(), limits)
        result = roundtrip(kernel, recipe, threads)
        assert result.verdict == LEGAL and result.error is None, f"{recipe}: {result}"


def test_contractions_get_a_register_tile_and_the_rest_the_plain_default():
    conv = kernels_of(graph_conv_bias_relu(14, 14, 8, 40, stride=1))[0]
    space = SearchSpace.for_scop(conv.scop, 2, 16, 32, CACHES)
    assert any(space.default_recipe().register_tile_sizes) and space.default_recipe().pad
    same_pool = kernels_of(graph_maxpool(9, 8, 16, padding="SAME"))[0]
    pooled = SearchSpace.for_scop(same_pool.scop, 2, 16, 32, CACHES)
    assert pooled.default_recipe() == pooled.plain_recipe()  # a guarded window that cannot be padded


def test_cache_sizes_are_read_from_sysfs_text(tmp_path):
    for index, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"), (3, "Unified", "32M")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert host_cache_sizes.__wrapped__(tmp_path) == CacheSizes(48 * 1024, 2048 * 1024, 32 * 1024 * 1024)
    assert host_cache_sizes.__wrapped__(tmp_path / "missing") == CacheSizes()
    assert parse_cache_size("bogus") is None and parse_cache_size("512") == 512
    assert host_cache_sizes().l1_bytes >= 16 * 1024


def test_outputs_between_one_and_two_vectors_get_one_masked_tile():
    """24 output channels on AVX-512: one 32-wide register tile, its second vector masked
    (each activation broadcast once per tile), not 16 + 8 in two tiles; 16 channels: one
    vector; AVX2: 24 channels are three whole vectors, two tiles of 16 + 8."""
    kernel = kernels_of(graph_conv_bias_relu(14, 14, 8, 24, stride=1))[0]
    anchor = anchor_statement(kernel.scop)
    reads = ((("A1", 9 * 8 * 24 * 4),), (("A0", 16 * 16 * 8 * 4),))
    blocking = analytic_blocking(anchor, shared_band_depth(kernel.scop), 16, 32, CACHES, 2, *reads)
    assert (blocking.register_rows, blocking.register_columns) == (7, 32)  # 14 output columns: two tiles of 7 rows
    narrow = kernels_of(graph_conv_bias_relu(14, 14, 8, 16, stride=1))[0]
    one_vector = analytic_blocking(anchor_statement(narrow.scop), shared_band_depth(narrow.scop), 16, 32, CACHES, 2, *reads)
    assert one_vector.register_columns == 16
    wide = analytic_blocking(anchor, shared_band_depth(kernel.scop), 8, 16, CACHES, 2, *reads)
    assert wide.register_columns == 16  # AVX2: 24 >= 2 x 8 lanes


def test_a_depthwise_input_counts_as_activations_not_weights():
    """A depthwise convolution (or a pooling) reads its input through every output
    dimension: the input is the activations, so its channel tiles do not go outermost."""
    graph = graph_depthwise((2, 16, 16, 48), multiplier=1, seed=0)
    kernel = kernels_of(graph)[0]
    for limits in (AVX512_LIMITS, AVX2_LIMITS):
        recipe = SearchSpace.for_scop(kernel.scop, 2, limits.vector_lanes, limits.vector_registers, CACHES).default_recipe()
        assert any(recipe.register_tile_sizes)
        assert recipe.tile_order[0] == 0  # batch outermost (parallel), not the 48 channels
    # run on the host: the host's register file bounds the tile
    recipe = SearchSpace.for_scop(kernel.scop, 2, TARGET.vector_lanes, TARGET.vector_registers, CACHES).default_recipe()
    result = roundtrip(kernel, recipe, 2)
    assert result.verdict == LEGAL and result.error is None, f"{recipe}: {result}"


def test_panels_pack_reused_operands_only():
    """A global mean reads each input element once (its input is indexed by every output
    dimension): packing it would only copy it; a filter, reused by every output pixel, is packed."""
    mean = build_graph(
        [placeholder("x", (1, 12, 12, 32)), const("axes", np.array([1, 2], dtype=np.int32)), Node("mean", "Mean", ("x:0", "axes:0"), attrs={"keep_dims": False})],
        ["mean:0"],
    )
    (kernel,) = kernels_of(mean)
    recipe = SearchSpace.for_scop(kernel.scop, 2, TARGET.vector_lanes, TARGET.vector_registers, CACHES).default_recipe()
    assert any(recipe.register_tile_sizes) and recipe.pack == ()
    result = roundtrip(kernel, recipe, 2)
    assert result.verdict == LEGAL and result.error is None, f"{recipe}: {result}"
    conv = kernels_of(graph_conv_bias_relu(14, 14, 8, 40, stride=1))[0]
    packed = SearchSpace.for_scop(conv.scop, 2, TARGET.vector_lanes, TARGET.vector_registers, CACHES).default_recipe().pack
    assert packed and all(conv.scop.array(array).role == "input" for array in packed)
    assert len(packed) == 1  # the filter, not the activations


@pytest.mark.parametrize("threads", [2, 3])
def test_a_matmul_with_more_activations_than_weights_splits_its_rows_among_the_threads(threads):
    """A 1x1 convolution as a MatMul ([H*W, C] x [C, O], small weights): its rows are the
    only dimension to share, so each thread gets a tile of rows (the recipe is parallel)."""
    kernel = kernels_of(graph_matmul_bias_relu(m=600, k=24, n=40))[0]
    recipe = SearchSpace.for_scop(kernel.scop, threads, TARGET.vector_lanes, TARGET.vector_registers, CACHES).default_recipe()
    rows = recipe.tile_sizes[0]
    assert recipe.parallel and 0 < rows < 600 and -(-600 // rows) >= threads
    assert rows % recipe.register_tile_sizes[0] == 0
    result = roundtrip(kernel, recipe, threads)
    assert result.verdict == LEGAL and result.error is None, f"{recipe}: {result}"
    single = SearchSpace.for_scop(kernel.scop, 1, TARGET.vector_lanes, TARGET.vector_registers, CACHES).default_recipe()
    assert single.tile_sizes[0] == 0 or single.tile_sizes[0] >= 600  # one thread: no split


def test_row_tiles_keep_their_block_of_the_output_in_l2():
    """ResNet50's 1x1 expansion as a GEMM, [3136, 64] x [64, 256] with a 512 KiB L2: the zero
    fill, the micro-kernels and the epilogue sweep a row tile's output block in turn, so the
    block (rows x 256 floats) stays within a quarter of L2 (not 1572 rows, 1.6 MB, per thread),
    and the tiles still divide evenly (within 1/32) between the threads."""
    kernel = kernels_of(graph_matmul_bias_relu(m=3136, k=64, n=256))[0]
    caches = CacheSizes(32 * 1024, 512 * 1024, 32 * 1024 * 1024)
    recipe = SearchSpace.for_scop(kernel.scop, 2, 8, 16, caches).default_recipe()
    rows, columns = recipe.tile_sizes
    assert recipe.parallel and rows % recipe.register_tile_sizes[0] == 0
    assert rows * min(columns, 256) * 4 <= caches.l2_bytes // 4
    tiles = -(-3136 // rows)
    assert -(-tiles // 2) * rows * 32 <= 3136 // 2 * 33


@pytest.mark.parametrize("depth, tiled", [(576, False), (1024, False), (2048, True)])
def test_a_reduction_is_tiled_only_when_the_row_panel_leaves_l1(depth, tiled):
    """MobileNetV2's [196, 576] x [576, 96] keeps its reduction whole (a 6-row panel of 576
    floats fits a 32 KiB L1), so its micro-kernel starts from zero and applies the epilogue in
    registers; ResNet50's K = 2048 is cut into blocks of 256."""
    kernel = kernels_of(graph_matmul_bias_relu(196, depth, 96))[0]
    caches = CacheSizes(32 * 1024, 512 * 1024, 32 * 1024 * 1024)
    blocking = analytic_blocking(anchor_statement(kernel.scop), 2, 8, 16, caches, 2, (("A1", depth * 96 * 4),), (("A0", 196 * depth * 4),))
    assert bool(blocking.reduction_tile) == tiled
    if tiled:
        assert blocking.reduction_tile == 256


@pytest.mark.parametrize("width, register_tile", [(7, (4, 24)), (8, (4, 24)), (14, (5, 16)), (28, (6, 16))])
def test_evened_rows_that_leave_accumulators_unused_get_a_third_vector(width, register_tile):
    """AVX2, 512 output channels: 7 or 8 output columns even out to tiles of 4 rows, whose two
    vectors per row would fill 8 of the 12 accumulators: the tile gets a third vector (4 x 24);
    5 and 6 rows keep two vectors (10 and 12 accumulators)."""
    kernel = kernels_of(graph_conv_bias_relu(width, width, 16, 512, stride=1))[0]
    blocking = analytic_blocking(anchor_statement(kernel.scop), shared_band_depth(kernel.scop), 8, 16, CACHES, 2, (("A1", 9 * 16 * 512 * 4),), (("A0", 10**9),))
    assert (blocking.register_rows, blocking.register_columns) == register_tile
    assert blocking.register_rows * blocking.register_columns // 8 <= 12


@pytest.mark.parametrize("threads, register_tile, column_tile", [(2, (7, 32), 32), (1, (7, 48), 48)])
def test_a_third_vector_that_would_share_the_panels_unequally_is_left_out(threads, register_tile, column_tile):
    """AVX-512, 7x7 outputs, 512 channels, the weights' panels shared by the threads (ResNet50's
    conv5 3x3 layers): 7 rows of 3 vectors make 48-column panels, 11 of them, so one thread
    computes 288 channels and the other 224; 7 rows of 2 vectors make 16 panels of 32, 256
    channels each. On one thread nothing is shared and the third vector stays."""
    kernel = kernels_of(graph_conv_bias_relu(7, 7, 512, 512, stride=1))[0]
    weights, activations = (("A1", 9 * 512 * 512 * 4),), (("A0", 9 * 9 * 512 * 4),)
    caches = CacheSizes(48 * 1024, 1024 * 1024, 32 * 1024 * 1024)
    blocking = analytic_blocking(anchor_statement(kernel.scop), shared_band_depth(kernel.scop), 16, 32, caches, threads, weights, activations)
    assert blocking.weights_outer
    assert (blocking.register_rows, blocking.register_columns, blocking.column_tile) == (*register_tile, column_tile)
    if threads > 1:
        panels = -(-512 // blocking.column_tile)
        assert panels % threads == 0  # every thread gets as many panels


def test_a_long_reduction_stays_whole_where_the_weights_panels_are_the_outer_loop():
    """ResNet50's conv5 1x1 product at batch 1, [49, 2048] x [2048, 512], AVX-512: the weights
    are the larger operand, so each thread keeps a panel of them in L2 and the activations'
    10-row panels (80 KiB, more than L1) stream past it; the reduction stays whole (no
    ``kc``), and the panel of K x nc weights takes at most half of L2. With the activations
    the larger operand, the same K is cut into blocks of 256."""
    kernel = kernels_of(graph_matmul_bias_relu(49, 2048, 512))[0]
    caches = CacheSizes(48 * 1024, 1024 * 1024, 32 * 1024 * 1024)
    anchor = anchor_statement(kernel.scop)
    blocking = analytic_blocking(anchor, 2, 16, 32, caches, 2, (("A1", 2048 * 512 * 4),), (("A0", 49 * 2048 * 4),))
    assert blocking.weights_outer and blocking.reduction_tile == 0
    assert blocking.register_rows * 2048 * 4 > caches.l1_bytes  # it would have been tiled by the L1 rule
    assert 2048 * blocking.column_tile * 4 <= caches.l2_bytes // 2
    streamed = analytic_blocking(anchor, 2, 16, 32, caches, 2, (("A1", 2048 * 512 * 4),), (("A0", 10**9),))
    assert not streamed.weights_outer and streamed.reduction_tile == 256
