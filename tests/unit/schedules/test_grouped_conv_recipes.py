"""Property test: every recipe the search space offers for a grouped convolution (random
groups, channels per group, outputs per group, kernel, stride, dilation and padding) is legal
and its compiled kernel equals the numpy reference within float32 tolerance."""

from __future__ import annotations

import numpy as np
from hand_built_graphs import build_graph, const, kernels_of, placeholder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from roundtrip import LEGAL, TARGET, roundtrip

from polytf.graph import Node
from polytf.lowering.shape_inference import infer_types
from polytf.passes.expansion import expand_ops
from polytf.schedules.analytic_recipe import register_column_multiple
from polytf.schedules.search_space import SearchSpace
from polytf.schedules.structure import anchor_statement


@st.composite
def grouped_geometries(draw):
    """``(groups, channels per group, outputs per group, kernel, stride, dilation, padding,
    height, width)`` of a grouped convolution whose window fits its input."""
    groups = draw(st.integers(2, 4), label="groups")
    group_channels = draw(st.sampled_from([1, 2, 3]), label="channels per group")
    group_filters = draw(st.sampled_from([1, 2, 3, 8]), label="outputs per group")
    kernel = draw(st.sampled_from([1, 2, 3]), label="kernel")
    stride = draw(st.sampled_from([1, 2]), label="stride")
    dilation = draw(st.sampled_from([1, 2]), label="dilation")
    padding = draw(st.sampled_from(["SAME", "VALID"]), label="padding")
    effective = (kernel - 1) * dilation + 1
    height = draw(st.integers(effective, effective + 6), label="height")
    width = draw(st.integers(effective, effective + 6), label="width")
    return groups, group_channels, group_filters, kernel, stride, dilation, padding, height, width


def grouped_kernel(groups, group_channels, group_filters, kernel, stride, dilation, padding, height, width):
    """The fused kernel of ``Relu(BiasAdd(Conv2D(x, grouped filter)))`` after the graph
    optimizer's expansion."""
    rng = np.random.default_rng(groups * 100 + group_channels * 10 + group_filters)
    attrs = {
        "strides": (1, stride, stride, 1),
        "dilations": (1, dilation, dilation, 1),
        "padding": padding,
        "data_format": "NHWC",
    }
    filters = groups * group_filters
    graph = build_graph(
        [
            placeholder("x", (1, height, width, groups * group_channels)),
            const("f", rng.standard_normal((kernel, kernel, group_channels, filters)).astype(np.float32)),
            const("b", rng.standard_normal(filters).astype(np.float32)),
            Node("conv", "Conv2D", ("x:0", "f:0"), attrs=attrs),
            Node("bias", "BiasAdd", ("conv:0", "b:0"), attrs={"data_format": "NHWC"}),
            Node("relu", "Relu", ("bias:0",)),
        ],
        ["relu:0"],
    )
    expanded, _ = expand_ops(graph)
    (lowered,) = kernels_of(infer_types(expanded.with_changes(types={}, constants={})))
    return lowered


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(geometry=grouped_geometries(), data=st.data())
def test_search_space_recipes_of_grouped_convolutions_are_legal_and_correct(geometry, data):
    kernel = grouped_kernel(*geometry)
    assert kernel.scop.ops[0] == ("conv", "GroupedConv2D")
    threads = data.draw(st.sampled_from([1, 2]), label="threads")
    space = SearchSpace.for_scop(kernel.scop, threads, TARGET.vector_lanes, TARGET.vector_registers)
    params = {name: data.draw(st.sampled_from(choices), label=name) for name, choices in space.dimensions}
    recipe = data.draw(st.sampled_from([space.recipe(params), space.default_recipe()]), label="recipe")
    result = roundtrip(kernel, recipe, threads)
    assert result.verdict == LEGAL and result.error is None, f"{geometry} {recipe}: {result}"


def test_register_tiles_hold_whole_groups_where_one_fits():
    """24 outputs per group: the micro-kernel's group index ``floor(d3/24)`` is affine only in
    tiles of whole groups, so AVX2 (8 lanes, 16 registers) gets 24-column tiles (4 x 24 by
    default); 8 outputs per group fit the usual 16 columns; a plain or depthwise convolution is
    not constrained."""
    grouped = grouped_kernel(2, 2, 24, 3, 1, 1, "SAME", 9, 10)
    anchor = anchor_statement(grouped.scop)
    assert register_column_multiple(anchor, "d3") == 24
    space = SearchSpace.for_scop(grouped.scop, 2, 8, 16)
    assert space.default_recipe().register_tile_sizes[-2:] == (4, 24)
    assert {tile.split("x")[1] for tile in space.choices("register_tile") if tile != "none"} == {"24"}
    eight = SearchSpace.for_scop(grouped_kernel(4, 2, 8, 3, 1, 1, "SAME", 9, 10).scop, 2, 8, 16)
    assert eight.default_recipe().register_tile_sizes[-1] == 16
    depthwise = grouped_kernel(4, 1, 1, 3, 1, 1, "SAME", 9, 10)
    assert register_column_multiple(anchor_statement(depthwise.scop), "d3") == 1
