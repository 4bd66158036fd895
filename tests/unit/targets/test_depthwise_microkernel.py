"""The depthwise micro-kernel (:mod:`polytf.targets.depthwise_microkernel`): recognised from the
Scop's statements and accesses, chosen by the default recipe, and equal to the numpy reference
over shapes, strides, paddings, filter sizes, channel counts that are no multiple of the vector
width and register tiles, with the bias + Relu6 epilogue on the registers; what it does not
handle (a channel multiplier of 2) goes to the generic emitter and is still right."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import build_graph, const, kernels_of, placeholder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from roundtrip import LEGAL, roundtrip

from polytf.graph import Node
from polytf.schedules.builder import build_ast, schedule_scop
from polytf.schedules.recipe import CpuRecipe
from polytf.schedules.search_space import SearchSpace
from polytf.targets.cpu import CpuTarget
from polytf.targets.depthwise_pattern import Window, match_depthwise
from polytf.targets.llvm_codegen import KernelModuleBuilder

TARGET = CpuTarget()


def depthwise_graph(
    height,
    width,
    channels,
    kernel=3,
    stride=1,
    padding="SAME",
    multiplier=1,
    epilogue=True,
    seed=0,
    batch=1,
    dilation=1,
    activation="Relu6",
):
    """``x -> DepthwiseConv2dNative -> (BiasAdd -> Relu6)``, random filter and bias."""
    rng = np.random.default_rng(seed)
    nodes = [
        placeholder("x", (batch, height, width, channels)),
        const("f", rng.standard_normal((kernel, kernel, channels, multiplier)).astype(np.float32)),
        Node(
            "dw",
            "DepthwiseConv2dNative",
            ("x:0", "f:0"),
            attrs={
                "strides": (1, stride, stride, 1),
                "dilations": (1, dilation, dilation, 1),
                "padding": padding,
                "data_format": "NHWC",
            },
        ),
    ]
    output = "dw:0"
    if epilogue:
        nodes += [
            const("b", rng.standard_normal(channels * multiplier).astype(np.float32)),
            Node("bias", "BiasAdd", ("dw:0", "b:0"), attrs={"data_format": "NHWC"}),
            Node("relu6", activation, ("bias:0",), attrs={"alpha": 0.2} if activation == "LeakyRelu" else {}),
        ]
        output = "relu6:0"
    return build_graph(nodes, [output])


def default_recipe(kernel, threads=2):
    return SearchSpace.for_scop(
        kernel.scop, threads=threads, lanes=TARGET.vector_lanes, registers=TARGET.vector_registers, caches=TARGET.cache_sizes
    ).default_recipe()


def builder_of(kernel, recipe):
    scheduled = schedule_scop(kernel.scop, recipe, limits=TARGET.limits)
    return KernelModuleBuilder(
        scheduled.scop, build_ast(scheduled.schedule), parallel=recipe.parallel, native_vector_width=TARGET.vector_lanes
    )


def test_the_pattern_is_read_from_the_statements():
    (kernel,) = kernels_of(depthwise_graph(9, 8, 12, kernel=3, stride=2, padding="SAME"))
    pattern = match_depthwise(kernel.scop)
    assert pattern is not None
    assert (pattern.batch, pattern.channels, pattern.initial, len(pattern.epilogue)) == (1, 12, 0.0, 1)
    assert pattern.height == Window(input_size=9, output_size=5, taps=3, stride=2, dilation=1, pad=1)
    assert pattern.width == Window(input_size=8, output_size=4, taps=3, stride=2, dilation=1, pad=0)
    # right border: tap 2 of output column 3 reads input column 8
    assert pattern.width.valid_taps(0) == (0, 1, 2) and pattern.width.valid_taps(3) == (0, 1)
    assert pattern.height.valid_taps(0) == (1, 2)


def test_a_channel_multiplier_is_left_to_the_generic_emitter():
    (kernel,) = kernels_of(depthwise_graph(6, 6, 5, multiplier=2))
    assert match_depthwise(kernel.scop) is None


def test_the_default_recipe_reads_the_input_in_place_and_uses_the_kernel():
    (kernel,) = kernels_of(depthwise_graph(10, 10, 20))
    recipe = default_recipe(kernel)
    assert not recipe.pad and recipe.register_tile_sizes  # no zero-padded copy per call
    builder = builder_of(kernel, recipe)
    assert builder.depthwise is not None and builder.depthwise.columns % TARGET.vector_lanes == 0
    text = str(builder.build())
    assert f"<{builder.depthwise.columns // (builder.depthwise.columns // TARGET.vector_lanes)} x float>" in text
    assert "llvm.masked.load" in text  # 20 channels: the last vector of the block is masked
    assert "GOMP_parallel" in text  # rows split over the threads
    # a zero-padded copy is no longer the pattern: the generic emitter runs its AST
    assert builder_of(kernel, CpuRecipe(**{**recipe.__dict__, "pad": True})).depthwise is None


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.tuples(st.integers(1, 11), st.integers(1, 13)),
    channels=st.integers(1, 21),
    kernel_size=st.sampled_from([3, 5]),
    stride=st.sampled_from([1, 2]),
    padding=st.sampled_from(["SAME", "VALID"]),
    epilogue=st.booleans(),
    threads=st.sampled_from([1, 2]),
)
def test_the_default_recipe_matches_the_reference(size, channels, kernel_size, stride, padding, epilogue, threads):
    height, width = size
    if padding == "VALID" and (height < kernel_size or width < kernel_size):
        height, width = height + kernel_size, width + kernel_size
    (kernel,) = kernels_of(depthwise_graph(height, width, channels, kernel_size, stride, padding, epilogue=epilogue))
    assert match_depthwise(kernel.scop) is not None
    result = roundtrip(kernel, default_recipe(kernel, threads), threads)
    assert result.verdict == LEGAL and result.error is None, result


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.integers(1, 7),
    vectors=st.integers(1, 3),
    channels=st.integers(1, 40),
    stride=st.sampled_from([1, 2]),
    multiplier=st.sampled_from([1, 1, 2]),
    vector_width=st.sampled_from([0, 0, 4, 1]),
)
def test_register_tiles_match_the_reference(rows, vectors, channels, stride, multiplier, vector_width):
    """Any register tile over (ow, c): the depthwise kernel for a multiplier of 1, the generic
    micro-kernel for 2 (its padded copy or its guarded loops)."""
    (kernel,) = kernels_of(depthwise_graph(9, 10, channels, 3, stride, "SAME", multiplier=multiplier, seed=rows))
    lanes = TARGET.vector_lanes
    extents = kernel.scop.statements[1].extents
    rows = min(rows, extents[2])
    columns = min(vectors, -(-extents[3] // lanes)) * lanes  # the validator's bounds: the extent rounded up to the lanes,
    rows = min(rows, TARGET.vector_registers // (columns // lanes))  # and the registers
    recipe = CpuRecipe(
        tile_sizes=(0, 0, -(-extents[2] // rows) * rows, -(-extents[3] // columns) * columns),
        register_tile_sizes=(0, 0, rows, columns),
        parallel=True,
        vector_width=vector_width,
    )
    result = roundtrip(kernel, recipe, threads=2)
    assert result.verdict == LEGAL and result.error is None, result
    assert (builder_of(kernel, recipe).depthwise is not None) == (multiplier == 1)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_rows_split_over_more_threads_than_rows(threads):
    (kernel,) = kernels_of(depthwise_graph(2, 5, 16, stride=2))
    result = roundtrip(kernel, default_recipe(kernel, threads), threads)
    assert result.verdict == LEGAL and result.error is None, result


@pytest.mark.parametrize("batch, dilation, padding", [(2, 1, "SAME"), (3, 2, "SAME"), (2, 2, "VALID")])
def test_batches_and_dilated_windows_match_the_reference(batch, dilation, padding):
    (kernel,) = kernels_of(depthwise_graph(8, 9, 11, batch=batch, dilation=dilation, padding=padding))
    pattern = match_depthwise(kernel.scop)
    assert pattern is not None and pattern.batch == batch and pattern.width.dilation == dilation
    result = roundtrip(kernel, default_recipe(kernel), threads=2)
    assert result.verdict == LEGAL and result.error is None, result


@pytest.mark.parametrize("threads", [1, 2])
def test_an_epilogue_the_vectors_cannot_take_runs_element_by_element(threads):
    """LeakyRelu is a selection: the bias add stays on the registers, the selection runs with
    the generic statement code on each stored element."""
    (kernel,) = kernels_of(depthwise_graph(7, 9, 13, stride=2, activation="LeakyRelu"))
    pattern = match_depthwise(kernel.scop)
    assert pattern is not None and len(pattern.scalar_epilogue) >= 1
    result = roundtrip(kernel, default_recipe(kernel, threads), threads)
    assert result.verdict == LEGAL and result.error is None, result
