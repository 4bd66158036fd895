"""Warm starts: a recipe of one kernel mapped into the space of a kernel of another shape."""

from __future__ import annotations

import random

import pytest
from hand_built_graphs import graph_conv_bias_relu, graph_matmul_bias_relu, kernels_of

from polytf.autotune.tuner import KernelTuning
from polytf.autotune.warm_start import WarmStarts, kernel_family, map_params, nearest_choice, warm_start_params
from polytf.runtime.cpu.kernel_bench import Measurement
from polytf.schedules.validation import validate_recipe
from polytf.targets.cpu import CpuTarget

TARGET = CpuTarget()
THREADS = 2

PAIRS = {
    "matmul": (lambda: graph_matmul_bias_relu(96, 256, 384), lambda: graph_matmul_bias_relu(7, 13, 11)),
    "conv": (lambda: graph_conv_bias_relu(h=32, w=30, c=16, o=32), lambda: graph_conv_bias_relu()),
}


@pytest.fixture(scope="module", params=sorted(PAIRS))
def pair(request):
    """(source kernel, its space, target kernel, its space): same ops, other shapes."""
    build_source, build_target = PAIRS[request.param]
    source, target = kernels_of(build_source())[0], kernels_of(build_target())[0]
    return source, TARGET.search_space(source.scop, THREADS), target, TARGET.search_space(target.scop, THREADS)


def sampled_recipes(space, count, seed=0):
    rng = random.Random(seed)
    recipes = [space.default_recipe(), *space.heuristic_recipes()]
    recipes += [space.recipe({name: rng.choice(choices) for name, choices in space.dimensions}) for _ in range(count)]
    return recipes


def test_kernels_that_differ_in_shape_are_one_family(pair):
    source, source_space, target, target_space = pair
    assert source_space.extents != target_space.extents
    assert kernel_family(source, source_space) == kernel_family(target, target_space)


def test_mapped_parameters_are_choices_of_the_other_space_and_valid(pair):
    source, source_space, target, target_space = pair
    mapped = 0
    for recipe in sampled_recipes(source_space, 60):
        params = warm_start_params(recipe, source_space, target_space, target, TARGET.limits)
        if params is None:
            continue
        mapped += 1
        assert set(params) == {name for name, _ in target_space.dimensions}
        for name, choices in target_space.dimensions:
            assert any(params[name] == c and type(params[name]) is type(c) for c in choices), (name, params[name], choices)
        validate_recipe(target.scop, target_space.recipe(params), TARGET.limits)
    assert mapped >= 50  # nearly every recipe carries over


def test_a_best_recipe_carries_over_to_a_kernel_of_another_shape(pair):
    source, source_space, target, target_space = pair
    # the source's heuristic (register-tiled, packed) recipe: its structure survives the mapping
    recipe = source_space.heuristic_recipes()[0]
    params = warm_start_params(recipe, source_space, target_space, target, TARGET.limits)
    assert params is not None
    source_params = source_space.params(recipe)
    for name in ("point_order", "vector_width", "unroll", "pad", "algorithm"):
        if source_params[name] in target_space.choices(name):
            assert params[name] == source_params[name]


def test_nearest_choice():
    assert nearest_choice(64, (0, 2, 4, 8, 11)) == 11
    assert nearest_choice(0, (0, 2, 4)) == 0
    assert nearest_choice(6, (0, 4, 8)) == 4  # a tie: the earlier choice
    assert nearest_choice("6x16", ("none", "0x8", "2x8", "4x8")) == "4x8"
    assert nearest_choice("none", ("none", "2x8")) == "none"
    assert nearest_choice(True, (False,)) is False
    assert nearest_choice(1, (False, True)) is False  # an int is no bool: the first choice
    assert nearest_choice("d2,r0,d1,d0", ("d0,d1,r0", "d1,d0,r0")) == "d0,d1,r0"  # another form: the first choice
    space = TARGET.search_space(kernels_of(graph_matmul_bias_relu())[0].scop, 1)
    assert map_params({}, space) == {name: choices[0] for name, choices in space.dimensions}


def test_warm_starts_are_offered_to_similar_tasks_once_nearest_shape_first(pair):
    source, source_space, target, target_space = pair
    family = kernel_family(target, target_space)
    registry = WarmStarts(TARGET.limits)
    assert registry.offers(1, family, target_space, target, limit=5) == []
    registry.record(0, family, source_space, source_space.heuristic_recipes()[0])
    registry.record(2, ("Other",), source_space, source_space.default_recipe())  # another family: never offered
    first = registry.offers(1, family, target_space, target, limit=5)
    assert len(first) == 1
    assert registry.offers(1, family, target_space, target, limit=5) == []  # once
    registry.record(0, family, source_space, source_space.default_recipe())  # a new best: offered too
    assert len(registry.offers(1, family, target_space, target, limit=0)) == 0
    assert len(registry.offers(1, family, target_space, target, limit=5)) <= 1


def test_an_enqueued_warm_start_is_the_next_trial(pair):
    source, source_space, target, target_space = pair
    params = warm_start_params(source_space.heuristic_recipes()[0], source_space, target_space, target, TARGET.limits)
    tried = []

    def evaluator(recipe):
        tried.append(recipe)
        return Measurement((1e-6,) * 3)

    with KernelTuning(target, TARGET, threads=THREADS, evaluator=evaluator) as tuning:
        tuning.run(1)  # the baseline and trial 0 (the default recipe, enqueued when the study was made)
        tuning.enqueue(params)
        tuning.enqueue(params)  # skipped: already there
        assert tuning.waiting_trials() == 1
        result = tuning.run(2)
    assert result.trials == 2 and tried[-1] == target_space.recipe(params)
