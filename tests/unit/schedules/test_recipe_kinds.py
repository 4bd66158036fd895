"""The two recipe kinds over one core: JSON with a kind tag, and recipes written before the
kinds existed (polytf 61c8331: one flat object with ``"gpu"`` and every field)."""

from __future__ import annotations

import json

import pytest

from polytf.errors import ScheduleError
from polytf.schedules.recipe import RECIPE_KINDS, CpuRecipe, GpuRecipe, ScheduleRecipe

CPU = CpuRecipe(
    tile_sizes=(3, 96), reduction_tile_sizes=(256,), point_order=("d1", "d0", "r0"), unroll=2, pad=True, algorithm="im2col",
    tile_order=(1, 0), vector_width=16, parallel=True, register_tile_sizes=(3, 32), pack=("A1",),
)
GPU = GpuRecipe(
    tile_sizes=(0, 32), reduction_tile_sizes=(16,), point_order=("r0", "d0", "d1"), unroll=4, pad=True,
    thread_tile_sizes=(1, 2), shared_memory=("A0", "A1"),
)
#: a CPU recipe as polytf 61c8331 wrote it in a tuning record (every field of both kinds)
FLAT_CPU = {
    "algorithm": "direct",
    "gpu": False,
    "pack": ["A1"],
    "pad": False,
    "parallel": True,
    "point_order": ["d1", "d0", "r0"],
    "reduction_tile_sizes": [0],
    "register_tile_sizes": [6, 16],
    "shared_memory": [],
    "thread_tile_sizes": [],
    "tile_order": [1, 0],
    "tile_sizes": [6, 256],
    "unroll": 0,
    "vector_width": 0,
}
#: a GPU recipe as polytf 61c8331 wrote it (``polytf tune --target cuda``)
FLAT_GPU = {
    "algorithm": "direct",
    "gpu": True,
    "pack": [],
    "pad": False,
    "parallel": False,
    "point_order": ["r0", "d0", "d1"],
    "reduction_tile_sizes": [16],
    "register_tile_sizes": [],
    "shared_memory": ["A0", "A1"],
    "thread_tile_sizes": [1, 2],
    "tile_order": [],
    "tile_sizes": [0, 32],
    "unroll": 0,
    "vector_width": 0,
}


@pytest.mark.parametrize("recipe", [CPU, GPU, CpuRecipe(), GpuRecipe()], ids=["cpu", "gpu", "default cpu", "default gpu"])
def test_each_kind_round_trips_through_json_with_its_tag(recipe):
    data = recipe.to_dict()
    assert data["kind"] == recipe.kind and "gpu" not in data
    assert set(data) == {"kind", *type(recipe).FIELD_TYPES}
    assert ScheduleRecipe.from_dict(data) == recipe and type(ScheduleRecipe.from_dict(data)) is type(recipe)
    assert ScheduleRecipe.from_json(recipe.to_json()) == recipe
    assert json.loads(recipe.to_json()) == data


def test_the_kinds_share_the_core_and_only_it():
    core = set(ScheduleRecipe.FIELD_TYPES)
    assert core == {"tile_sizes", "reduction_tile_sizes", "point_order", "unroll", "pad", "algorithm"}
    assert set(CpuRecipe.FIELD_TYPES) & set(GpuRecipe.FIELD_TYPES) == core
    assert RECIPE_KINDS == {"cpu": CpuRecipe, "gpu": GpuRecipe}
    with pytest.raises(TypeError, match="CpuRecipe or a GpuRecipe"):
        ScheduleRecipe(tile_sizes=(4,))
    assert CPU != CpuRecipe(**{**CPU.__dict__, "parallel": False}) and hash(GPU) == hash(GpuRecipe(**GPU.__dict__))


@pytest.mark.parametrize(("flat", "kind"), [(FLAT_CPU, CpuRecipe), (FLAT_GPU, GpuRecipe)], ids=["cpu", "gpu"])
def test_a_flat_recipe_of_61c8331_parses_into_its_kind_with_its_values(flat, kind):
    recipe = ScheduleRecipe.from_dict(flat)
    assert type(recipe) is kind
    for name in kind.FIELD_TYPES:
        value = getattr(recipe, name)
        assert (list(value) if isinstance(value, tuple) else value) == flat[name], name


def test_unused_fields_of_the_other_kind_and_omitted_fields_of_a_flat_recipe():
    # the natural tile order a validated GPU recipe carried is "not used" too
    assert ScheduleRecipe.from_dict({**FLAT_GPU, "tile_order": [0, 1]}) == ScheduleRecipe.from_dict(FLAT_GPU)
    # fields omitted by hand take their defaults, as before: no "gpu" means a CPU recipe
    assert ScheduleRecipe.from_dict({"tile_sizes": [4, 8], "gpu": True}) == GpuRecipe(tile_sizes=(4, 8))
    assert ScheduleRecipe.from_dict({"tile_sizes": [4, 8]}) == CpuRecipe(tile_sizes=(4, 8))


def test_the_describe_line_is_the_one_of_the_flat_recipes():
    assert ScheduleRecipe.from_dict(FLAT_GPU).describe() == "tile -x32, rtile 16, order r0,d0,d1, gpu, threadtile 1x2, shared A0,A1"
    assert ScheduleRecipe.from_dict(FLAT_CPU).describe() == "tile 6x256, order d1,d0,r0, regtile 6x16, pack A1, parallel"
    assert CpuRecipe().describe() == "default"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "tpu", "tile_sizes": [4]}, "unknown recipe kind 'tpu'; known kinds: cpu, gpu"),
        ({"kind": None}, "unknown recipe kind None"),
        ({"kind": "gpu", "vector_width": 8}, r"unknown gpu recipe fields \['vector_width'\]"),
        ({"kind": "cpu", "shared_memory": ["A0"]}, r"unknown cpu recipe fields \['shared_memory'\]"),
        ({"kind": "cpu", "gpu": False}, r"unknown cpu recipe fields \['gpu'\]"),
        ({"kind": "gpu", "thread_tile_sizes": [1.5]}, "thread_tile_sizes must be a list of integers"),
        ({"gpu": "true"}, "gpu must be a boolean"),
    ],
)
def test_an_unknown_kind_or_a_field_of_the_other_kind_is_a_schedule_error(data, message):
    with pytest.raises(ScheduleError, match=message):
        ScheduleRecipe.from_dict(data)

