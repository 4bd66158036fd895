"""The recipe of a tuning record: parsed into its kind, flat recipes of polytf 61c8331
included; stored in the tagged form; an unknown kind is a malformed record."""

from __future__ import annotations

import pytest

from polytf.errors import CacheError
from polytf.schedules.recipe import CpuRecipe, GpuRecipe
from polytf.storage.tuning_record import parse_record, record_to_json

FLAT_BASE = {"algorithm": "direct", "pack": [], "pad": False, "parallel": False, "register_tile_sizes": [], "shared_memory": [], "tile_order": [], "unroll": 0}


def _record(recipe: dict) -> dict:
    key = {"scop_fingerprint": "1166b22040fad43d", "target": {"target": "cuda"}, "threads": 1, "knobs": {}, "versions": {}, "digest": "0" * 32}
    return {"key": key, "kernel": "k0", "ops": ["MatMul"], "recipe": recipe, "default_latency_s": 2e-3, "best_latency_s": 1e-3, "trials": 3, "failed_trials": 0}


@pytest.mark.parametrize(
    ("flat", "expected"),
    [
        (
            {**FLAT_BASE, "gpu": True, "point_order": ["r0", "d0", "d1"], "reduction_tile_sizes": [16], "shared_memory": ["A0", "A1"], "thread_tile_sizes": [1, 2], "tile_sizes": [0, 32], "vector_width": 0},
            GpuRecipe(tile_sizes=(0, 32), reduction_tile_sizes=(16,), point_order=("r0", "d0", "d1"), thread_tile_sizes=(1, 2), shared_memory=("A0", "A1")),
        ),
        (
            {**FLAT_BASE, "gpu": False, "parallel": True, "point_order": [], "reduction_tile_sizes": [256], "thread_tile_sizes": [], "tile_sizes": [6, 64], "vector_width": 16},
            CpuRecipe(tile_sizes=(6, 64), reduction_tile_sizes=(256,), vector_width=16, parallel=True),
        ),
    ],
    ids=["gpu", "cpu"],
)
def test_a_record_of_61c8331_gets_its_recipe_kind_and_is_rewritten_tagged(flat, expected):
    record = parse_record(_record(flat))
    assert record.schedule_recipe == expected and type(record.schedule_recipe) is type(expected)
    assert record.recipe == expected.to_dict() and record.recipe["kind"] == expected.kind
    assert parse_record(_record(record.recipe)) == record  # the tagged form it is saved in parses back
    assert '"kind": "' + expected.kind + '"' in record_to_json(record)


def test_a_record_with_an_unknown_recipe_kind_is_a_cache_error():
    with pytest.raises(CacheError, match="its recipe is malformed: unknown recipe kind 'tpu'"):
        parse_record(_record({"kind": "tpu", "tile_sizes": [4]}))
