"""KernelCache and CacheKey: round trip, key sensitivity, atomic and corrupt records."""

from __future__ import annotations

import pytest

from polytf.errors import CacheError
from polytf.runtime.cache import CacheKey, KernelCache, TuningRecord, default_cache_dir
from polytf.schedules.recipe import ScheduleRecipe


def key(**changes):
    base = dict(scop_fingerprint="abc", target={"cpu": "znver5", "features": "+avx512f"}, threads=2, knobs={"codegen": {"optimization_level": 3}})
    base.update(changes)
    return CacheKey(**base)


def record(recipe=ScheduleRecipe(tile_sizes=(4, 8), vector_width=8)):
    return TuningRecord(key={}, kernel="k0", ops=("MatMul", "Relu"), recipe=recipe.to_dict(), default_latency_s=2e-3, best_latency_s=1e-3, trials=20, failed_trials=1)


def test_round_trip(tmp_path):
    cache = KernelCache(tmp_path)
    assert cache.load(key()) is None
    path = cache.save(record(), key())
    assert path.exists() and path.parent == tmp_path / "records"
    loaded = cache.load(key())
    assert loaded == record()
    assert loaded.schedule_recipe == ScheduleRecipe(tile_sizes=(4, 8), vector_width=8)
    assert loaded.speedup == pytest.approx(2.0)
    assert [r.kernel for r in cache.records()] == ["k0"]
    assert not list((tmp_path / "records").glob("*.tmp"))


@pytest.mark.parametrize(
    "change",
    [
        {"scop_fingerprint": "abd"},
        {"target": {"cpu": "znver4", "features": "+avx512f"}},
        {"target": {"cpu": "znver5", "features": "-avx512f"}},
        {"threads": 1},
        {"knobs": {"codegen": {"optimization_level": 2}}},
        {"versions": {"polytf": "9.9", "islpy": "x", "llvmlite": "y"}},
    ],
)
def test_every_field_changes_the_key(change):
    assert key(**change).digest() != key().digest()


def test_corrupt_record_is_a_cache_error(tmp_path):
    cache = KernelCache(tmp_path)
    path = cache.save(record(), key())
    path.write_text("{ not json")
    with pytest.raises(CacheError, match="unreadable"):
        cache.load(key())


def test_environment_variable_overrides_the_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYTF_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert default_cache_dir() == tmp_path / "elsewhere"
    assert KernelCache().directory == tmp_path / "elsewhere"


def test_clear(tmp_path):
    cache = KernelCache(tmp_path)
    cache.save(record(), key())
    cache.save(record(), key(threads=1))
    assert cache.clear() == 2
    assert cache.records() == []
