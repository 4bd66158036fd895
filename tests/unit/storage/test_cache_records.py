"""Untrusted tuning records: a corrupt, foreign, malformed or illegal record never makes
``polytf.load`` crash or compute wrong values; it is skipped with exactly one CacheWarning
naming the file and the reason, and the kernel gets its default recipe."""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from graphdef_builders import write_matmul_graphdef

import polytf
from polytf.compiler.kernel_compilation import default_recipe
from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import PreparedModel, prepare_model
from polytf.compiler.recorded_recipes import cache_key, cached_recipes
from polytf.config import CodegenConfig
from polytf.errors import CacheWarning
from polytf.schedules.recipe import ScheduleRecipe
from polytf.storage.cache import KernelCache, TuningRecord
from polytf.targets.cpu import CpuTarget

THREADS = 2
M, K, N = 6, 32, 96
#: legal for the MatMul kernel [6, 32] x [32, 96]
TUNED_RECIPE = {"tile_sizes": [3, 32], "vector_width": 8}


def write_matmul_model(path: Path, seed: int = 0) -> np.ndarray:
    """A GraphDef ``mm = MatMul(x: [M, K], w: Const [K, N])``; returns w."""
    return write_matmul_graphdef(path, M, K, N, seed)


@pytest.fixture(scope="module")
def matmul(tmp_path_factory):
    """(model path, weights, kernel, cache key, default recipe) of the MatMul model."""
    path = tmp_path_factory.mktemp("model") / "matmul.pb"
    weights = write_matmul_model(path)
    kernel = prepare_model(path).kernels[0]
    codegen = CodegenConfig()
    key = cache_key(kernel, CpuTarget(codegen), THREADS, codegen)
    return path, weights, kernel, key, default_recipe(kernel, THREADS)


def good_record(matmul) -> dict:
    path, _, kernel, key, _ = matmul
    record = TuningRecord(
        key=key.as_dict(),
        kernel=kernel.scop.name,
        ops=("MatMul",),
        recipe=TUNED_RECIPE,
        default_latency_s=2e-5,
        best_latency_s=1e-5,
        trials=3,
        failed_trials=1,
        model=str(path),
        input_shapes={"x": [M, K]},
    )
    return json.loads(json.dumps(asdict(record)))


def write_record(cache_dir: Path, matmul, content) -> Path:
    """Write ``content`` (a dict as JSON, or raw text or bytes) where the kernel's record belongs."""
    cache = KernelCache(cache_dir)
    path = cache.path_for(matmul[3])
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, dict):
        content = json.dumps(content)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def load_with_warnings(matmul, cache_dir):
    model_path, weights, *_ = matmul
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = polytf.load(model_path, cache_dir=cache_dir, threads=THREADS)
    x = np.random.default_rng(1).standard_normal((M, K)).astype(np.float32)
    np.testing.assert_allclose(model(x=x)["mm"], x @ weights, rtol=1e-4, atol=1e-4)
    return model, [w for w in caught if issubclass(w.category, CacheWarning)]


def assert_default_with_one_warning(matmul, cache_dir, record_path, reason):
    model, caught = load_with_warnings(matmul, cache_dir)
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert str(record_path) in message and reason in message and "default recipe" in message, message
    assert model.tuned_kernels == ()
    assert model.recipes[matmul[2].scop.name] == matmul[4]


def test_a_valid_record_is_used(matmul, tmp_path):
    write_record(tmp_path, matmul, good_record(matmul))
    model, caught = load_with_warnings(matmul, tmp_path)
    assert caught == []
    assert model.tuned_kernels == (matmul[2].scop.name,)
    assert model.recipes[matmul[2].scop.name] == ScheduleRecipe.from_dict(TUNED_RECIPE)


def _edited(**changes):
    def edit(record):
        record.update(changes)
        return record

    return edit


def _edited_key(section, field, value):
    def edit(record):
        record["key"][section][field] = value
        return record

    return edit


def _edited_recipe(recipe):
    def edit(record):
        record["recipe"] = recipe
        return record

    return edit


def _text(text):
    return lambda record: text


def _truncated(record):
    text = json.dumps(record, indent=2)
    return text[: len(text) // 2]


def _without(name):
    def edit(record):
        del record[name]
        return record

    return edit


CASES = {
    "corrupt JSON": (_text("{ not json"), "not valid JSON"),
    "truncated file": (_truncated, "not valid JSON"),
    "empty file": (_text(""), "not valid JSON"),
    "not UTF-8": (_text(b"\xff\xfe{\x00"), "not valid JSON"),
    "deeply nested": (_text("[" * 100_000), "not valid JSON"),
    "an array": (_text("[1, 2]"), "JSON array, not an object"),
    "oversized": (_text(" " * (1 << 21) + "{}"), "larger than a record can be"),
    "complete is a string": (_edited(complete="false"), "field 'complete' must be a JSON boolean"),
    "recipe is null": (_edited(recipe=None), "field 'recipe' must be a JSON object, not null"),
    "trials is a string": (_edited(trials="3"), "field 'trials' must be a non-negative integer"),
    "trials is a float": (_edited(trials=3.0), "field 'trials' must be a non-negative integer"),
    "key is an array": (_edited(key=[]), "field 'key' must be a JSON object"),
    "latency is NaN": (_edited(best_latency_s=float("nan")), "field 'best_latency_s' must be a finite non-negative number"),
    "negative latency": (_edited(default_latency_s=-1.0), "field 'default_latency_s' must be a finite non-negative number"),
    "more failures than trials": (_edited(failed_trials=9), "failed_trials (9) exceeds trials (3)"),
    "ops not strings": (_edited(ops=[1]), "field 'ops' must be an array of strings"),
    "unknown field": (_edited(speedup=2.0), "unknown field(s) 'speedup'"),
    "missing field": (_without("recipe"), "required field(s) recipe missing"),
    "foreign CPU": (_edited_key("target", "cpu", "not-this-cpu"), "target.cpu is 'not-this-cpu' in the record"),
    "foreign polytf version": (_edited_key("versions", "polytf", "9.9.9"), "versions.polytf is '9.9.9' in the record"),
    "foreign knob": (_edited_key("knobs", "codegen", {"optimization_level": 0, "fast_math": True}), "knobs.codegen.optimization_level is 0 in the record"),
    "recipe with an unknown field": (_edited_recipe({**TUNED_RECIPE, "swizzle": True}), "unknown recipe fields ['swizzle']"),
    "recipe field of the wrong type": (_edited_recipe({"tile_sizes": "3"}), "recipe field tile_sizes must be a list of integers"),
    "illegal recipe: packing the output": (
        _edited_recipe({"tile_sizes": [3, 96], "register_tile_sizes": [3, 32], "pack": ["A2"]}),
        "recipe field pack = ['A2'] is invalid",
    ),
    "illegal recipe: tile_sizes of the wrong length": (_edited_recipe({"tile_sizes": [3, 32, 4]}), "recipe field tile_sizes"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_an_unusable_record_falls_back_to_the_default_recipe(matmul, tmp_path, case):
    edit, reason = CASES[case]
    path = write_record(tmp_path, matmul, edit(good_record(matmul)))
    assert_default_with_one_warning(matmul, tmp_path, path, reason)


def test_a_record_with_both_cpu_and_version_edited_names_both(matmul, tmp_path):
    record = good_record(matmul)
    record["key"]["target"]["cpu"] = "not-this-cpu"
    record["key"]["versions"]["polytf"] = "9.9.9"
    path = write_record(tmp_path, matmul, record)
    _, caught = load_with_warnings(matmul, tmp_path)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert str(path) in message and "target.cpu is 'not-this-cpu'" in message and "versions.polytf is '9.9.9'" in message


def test_a_record_copied_from_another_kernel_is_foreign(matmul, tmp_path):
    record = good_record(matmul)
    record["key"]["scop_fingerprint"] = "another kernel"
    path = write_record(tmp_path, matmul, record)
    assert_default_with_one_warning(matmul, tmp_path, path, "scop_fingerprint is 'another kernel' in the record")


def test_any_exception_while_compiling_a_record_falls_back(matmul, tmp_path, monkeypatch):
    """A recipe that passes validation but trips the compiler (a polytf bug) still cannot stop a load."""
    path = write_record(tmp_path, matmul, good_record(matmul))
    original = CpuTarget.compile

    def compile_or_fail(self, scop, recipe, constant_arrays=frozenset()):
        if recipe.tile_sizes == (3, 32):
            raise IndexError("index out of range deep in the code generator")
        return original(self, scop, recipe, constant_arrays)

    monkeypatch.setattr(CpuTarget, "compile", compile_or_fail)
    assert_default_with_one_warning(matmul, tmp_path, path, "IndexError: index out of range")


@pytest.mark.parametrize("content", ["{ truncated", "illegal recipe"])
def test_identical_kernels_sharing_a_bad_record_warn_once(tmp_path, content):
    from hand_built_graphs import build_graph, placeholder

    from polytf.graph import Node
    from polytf.lowering.lowered_kernel import lower_group
    from polytf.passes.fusion import partition

    graph = build_graph([placeholder("x", (4, 8)), placeholder("y", (4, 8)), Node("a", "Relu", ("x:0",)), Node("b", "Relu", ("y:0",))], ["a:0", "b:0"])
    groups = tuple(partition(graph))
    kernels = tuple(lower_group(graph, group) for group in groups)
    prepared = PreparedModel(graph, groups, kernels, ())
    codegen = CodegenConfig()
    target = CpuTarget(codegen)
    cache = KernelCache(tmp_path)
    keys = [cache_key(k, target, THREADS, codegen) for k in kernels]
    assert len(kernels) == 2 and keys[0] == keys[1], "the two Relu kernels should share one cache key"
    if content == "illegal recipe":
        record = TuningRecord(key={}, kernel="k", ops=("Relu",), recipe={"tile_sizes": [1, 2, 3]}, default_latency_s=1.0, best_latency_s=1.0, trials=1, failed_trials=0)
        cache.save(record, keys[0])
    else:
        cache.path_for(keys[0]).parent.mkdir(parents=True)
        cache.path_for(keys[0]).write_text(content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = build_model(prepared, target=target, threads=THREADS, cached=cached_recipes(prepared, cache, target, THREADS, codegen))
    assert len([w for w in caught if issubclass(w.category, CacheWarning)]) == 1
    assert model.tuned_kernels == ()
