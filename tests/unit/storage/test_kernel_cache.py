"""KernelCache and CacheKey: round trip, key sensitivity, atomic and corrupt records, entries, locks, clear."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import pytest

from polytf.errors import CacheError, CacheWarning
from polytf.schedules.recipe import CpuRecipe
from polytf.storage.cache import CacheKey, KernelCache, TuningRecord, default_cache_dir


def key(**changes):
    base = dict(scop_fingerprint="abc", target={"cpu": "znver5", "features": "+avx512f"}, threads=2, knobs={"codegen": {"optimization_level": 3}})
    base.update(changes)
    return CacheKey(**base)


def record(recipe=CpuRecipe(tile_sizes=(4, 8), vector_width=8)):
    return TuningRecord(key={}, kernel="k0", ops=("MatMul", "Relu"), recipe=recipe.to_dict(), default_latency_s=2e-3, best_latency_s=1e-3, trials=20, failed_trials=1)


def test_round_trip(tmp_path):
    cache = KernelCache(tmp_path)
    assert cache.load(key()) is None
    path = cache.save(record(), key())
    assert path.exists() and path.parent == tmp_path / "records"
    loaded = cache.load(key())
    assert loaded == replace(record(), key=key().as_dict()), "save stores the record under its key"
    assert loaded.key["digest"] == key().digest() == path.stem
    assert loaded.schedule_recipe == CpuRecipe(tile_sizes=(4, 8), vector_width=8)
    assert loaded.speedup == pytest.approx(2.0)
    assert [r.kernel for r in cache.records()] == ["k0"]
    assert not list((tmp_path / "records").glob("*.tmp"))


def test_round_trip_of_the_fields_verify_needs(tmp_path):
    cache = KernelCache(tmp_path)
    tuned = replace(record(), model="/models/m.pb", input_shapes={"x": [1, 784]}, outputs=["out"], complete=False)
    cache.save(tuned, key())
    loaded = cache.load(key())
    assert (loaded.model, loaded.input_shapes, loaded.outputs, loaded.complete) == ("/models/m.pb", {"x": (1, 784)}, ("out",), False)


def test_a_record_of_an_earlier_version_without_the_new_fields_still_parses(tmp_path):
    cache = KernelCache(tmp_path)
    path = cache.save(record(), key())
    data = json.loads(path.read_text())
    for name in ("model", "input_shapes", "outputs", "complete"):
        del data[name]
    path.write_text(json.dumps(data))
    loaded = cache.load(key())
    assert loaded is not None and loaded.model == "" and loaded.complete is True


def test_an_invalid_record_is_never_written(tmp_path):
    cache = KernelCache(tmp_path)
    with pytest.raises(CacheError, match="non-negative"):
        cache.save(replace(record(), trials=-1), key())
    with pytest.raises(CacheError, match="Out of range float"):
        cache.save(replace(record(), best_latency_s=float("nan")), key())
    assert not list((tmp_path / "records").glob("*"))


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


def test_corrupt_record_gives_one_warning_and_no_record(tmp_path):
    cache = KernelCache(tmp_path)
    path = cache.save(record(), key())
    path.write_text("{ not json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.load(key()) is None
    assert len(caught) == 1 and caught[0].category is CacheWarning
    assert str(path) in str(caught[0].message) and "not valid JSON" in str(caught[0].message)


def test_a_record_under_another_key_is_foreign(tmp_path):
    cache = KernelCache(tmp_path)
    cache.save(record(), key(threads=1))
    cache.path_for(key(threads=1)).rename(cache.path_for(key()))
    with pytest.warns(CacheWarning, match="threads is 1 in the record, 2 here"):
        assert cache.load(key()) is None


def test_entries_list_invalid_records_with_the_reason(tmp_path):
    cache = KernelCache(tmp_path)
    good = cache.save(record(), key())
    bad = cache.save(record(), key(threads=1))
    bad.write_text(bad.read_text().replace('"complete": true', '"complete": "false"'))
    copied = cache.records_dir / f"{'0' * 32}.json"
    copied.write_text(good.read_text())
    edited = cache.save(record(), key(threads=3))
    data = json.loads(edited.read_text())
    data["key"]["target"]["cpu"] = "znver3"
    edited.write_text(json.dumps(data))
    entries = {entry.path: entry for entry in cache.entries()}
    assert entries[good].record is not None and entries[good].problem is None
    assert entries[bad].record is None and "field 'complete' must be a JSON boolean" in entries[bad].problem
    assert "does not match its file name" in entries[copied].problem
    assert "does not match the key's fields" in entries[edited].problem
    assert [r.kernel for r in cache.records()] == ["k0"]


def test_lock_names_are_checked(tmp_path):
    cache = KernelCache(tmp_path)
    with cache.lock("study-abc"):
        with cache.lock("study-abc"):  # reentrant within a thread
            assert (tmp_path / "locks" / "study-abc.lock").exists()
    for name in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(CacheError, match="invalid cache lock name"):
            cache.lock(name)


def test_environment_variable_overrides_the_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYTF_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert default_cache_dir() == tmp_path / "elsewhere"
    assert KernelCache().directory == tmp_path / "elsewhere"


def test_clear(tmp_path):
    cache = KernelCache(tmp_path)
    cache.save(record(), key())
    cache.save(record(), key(threads=1))
    (cache.records_dir / "left-by-a-killed-writer.tmp").write_text("{")
    assert cache.clear().records == 2
    assert cache.records() == [] and not list(cache.records_dir.iterdir())


def test_clear_of_a_missing_directory(tmp_path):
    assert KernelCache(tmp_path / "none").clear().records == 0
    assert not (tmp_path / "none").exists()
