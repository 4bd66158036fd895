"""Property tests: random recipes keep results identical within float32 tolerance.

- Every recipe the search space offers is legal (never a ScheduleError), and its
  compiled kernel equals the identity schedule and the numpy reference.
- Arbitrary recipes (outside the space: any loop order, any reduction tiling) are either
  rejected with ScheduleError, or legal and correct.
- A recipe written to JSON and replayed gives the same schedule tree.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hand_built_graphs import GRAPHS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from roundtrip import ILLEGAL, INVALID, LEGAL, TARGET, outputs_of, roundtrip

from polytf.schedules.builder import build_schedule
from polytf.schedules.recipe import CpuRecipe, ScheduleRecipe
from polytf.schedules.search_space import SearchSpace
from polytf.schedules.structure import anchor_statement, shared_band_depth

SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def host_space(kernel, threads: int) -> SearchSpace:
    """The search space the tuner builds for the host target."""
    return SearchSpace.for_scop(kernel.scop, threads, TARGET.vector_lanes, TARGET.vector_registers)


@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
@SETTINGS
@given(data=st.data())
def test_search_space_recipes_are_legal_and_correct(small_kernels, graph_name, data):
    for kernel in small_kernels(graph_name):
        threads = data.draw(st.sampled_from([1, 2]), label="threads")
        space = host_space(kernel, threads)
        params = {name: data.draw(st.sampled_from(choices), label=name) for name, choices in space.dimensions}
        recipe = space.recipe(params)
        result = roundtrip(kernel, recipe, threads)
        assert result.verdict == LEGAL and result.error is None, f"{recipe}: {result}"
        if not result.ran:  # pytest --cpu: a CPU kind this machine cannot run (its code was made)
            continue
        outputs, identity = outputs_of(kernel, recipe, threads), outputs_of(kernel, CpuRecipe(), 1)
        for name in outputs:
            np.testing.assert_allclose(outputs[name], identity[name], rtol=1e-4, atol=1e-5 * (np.abs(identity[name]).max() + 1e-6))


@st.composite
def arbitrary_recipes(draw, scop):
    depth = shared_band_depth(scop)
    anchor = anchor_statement(scop)
    extents = anchor.extents
    return CpuRecipe(
        tile_sizes=tuple(draw(st.integers(0, extents[k] + 1)) for k in range(depth)),
        tile_order=tuple(draw(st.permutations(range(depth)))),
        reduction_tile_sizes=tuple(draw(st.integers(0, 4)) for _ in anchor.reduction_iterators),
        point_order=tuple(draw(st.permutations(anchor.iterators))),
        vector_width=draw(st.sampled_from([0, 1, 4, 8])),
        unroll=draw(st.sampled_from([0, 1, 2, 4])),
        parallel=draw(st.booleans()),
    )


@pytest.mark.parametrize("graph_name", ["matmul_bias_relu", "conv_same_stride2", "maxpool_same", "softmax"])
@SETTINGS
@given(data=st.data())
def test_arbitrary_recipes_are_rejected_or_correct(small_kernels, graph_name, data):
    kernel = small_kernels(graph_name)[0]
    recipe = data.draw(arbitrary_recipes(kernel.scop))
    result = roundtrip(kernel, recipe, threads=2)
    if result.verdict in (INVALID, ILLEGAL):
        assert "recipe field" in result.message or "dependence" in result.message
        return
    assert result.error is None, f"legal recipe {recipe} computed a wrong result: {result.error}"


@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_json_replay_gives_the_same_tree(small_kernels, graph_name, data):
    kernel = small_kernels(graph_name)[0]
    space = host_space(kernel, 2)
    recipe = space.recipe({name: data.draw(st.sampled_from(choices), label=name) for name, choices in space.dimensions})
    replayed = ScheduleRecipe.from_json(recipe.to_json())
    assert replayed == recipe
    assert str(build_schedule(kernel.scop, replayed, limits=TARGET.limits)) == str(build_schedule(kernel.scop, recipe, limits=TARGET.limits))


def test_search_space_offers_real_choices(small_kernels):
    kernel = small_kernels("matmul_bias_relu")[0]
    space = SearchSpace.for_scop(kernel.scop, threads=2)
    names = dict(space.dimensions)
    assert len(names["point_order"]) == 6  # one reduction: every order of d0, d1, r0 is legal
    assert names["parallel"] == (False, True)
    assert 0 in names["tile_d1"] and 8 in names["tile_d1"]
    assert space.size() > 1000
    assert SearchSpace.for_scop(kernel.scop, threads=1).choices("parallel") == (False,)
    # every enumerated point order keeps the reduction iterators in program order
    conv = small_kernels("conv_same_stride2")[0]
    anchor_reductions = anchor_statement(conv.scop).reduction_iterators
    assert len(anchor_reductions) == 3
    for order in SearchSpace.for_scop(conv.scop, 2).choices("point_order"):
        assert [it for it in order.split(",") if it in anchor_reductions] == list(anchor_reductions)


def test_every_heuristic_recipe_is_in_the_space(small_kernels):
    for name in GRAPHS:
        for kernel in small_kernels(name):
            space = host_space(kernel, 2)
            for recipe in [space.default_recipe(), *space.heuristic_recipes()]:
                assert space.contains(recipe), (name, recipe)
                build_schedule(kernel.scop, recipe, limits=TARGET.limits)


def test_exhaustive_matmul_orders_and_tiles(small_kernels):
    """Every point order x a few tile sizes on the fused MatMul+BiasAdd+Relu."""
    kernel = small_kernels("matmul_bias_relu")[0]
    space = host_space(kernel, 2)
    for order, tile in itertools.product(space.choices("point_order"), [0, 2, 4, 11]):
        params = {name: values[0] for name, values in space.dimensions}
        params.update({"point_order": order, "tile_d1": tile, "tile_d0": 4, "vector_width": 4, "parallel": True})
        result = roundtrip(kernel, space.recipe(params), 2)
        assert result.verdict == LEGAL and result.error is None, (order, tile, result)
