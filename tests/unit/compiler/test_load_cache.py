"""A warm load does nothing twice: the prepared model, the packed weights and the default
recipes a cold load made are kept beside the compiled code and mapped by the next load of the
same file, which reads no GraphDef, runs no graph pass, lowering, weight packing, recipe check,
isl or LLVM, and gives the same outputs bit for bit; a changed file, a corrupt entry or other
settings build again."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from graphdef_builders import write_dense_chain_graphdef

import polytf
from polytf.compiler import code_cache, preparation
from polytf.errors import CacheWarning
from polytf.plan import constant_layout
from polytf.storage.model_images import ModelImageCache
from polytf.targets.cpu import CpuTarget

WIDTHS = (24, 40, 16, 8)


def _fail(what: str):
    def fail(*args, **kwargs):
        raise AssertionError(f"a warm load ran {what}")

    return fail


#: (module, attribute, what) of every step a warm load must not run
NOT_ON_A_WARM_LOAD = [
    (preparation, "load_graph", "the GraphDef reader"),
    (preparation, "infer_types", "shape inference"),
    (preparation, "optimize", "the graph passes"),
    (preparation, "lower_with_fallback", "the lowering"),
    (preparation, "place_in_consumer_buffers", "the buffer placement"),
    (constant_layout, "packed_constants", "the weight packing (and Winograd transform)"),
    (code_cache, "validate_recipe", "the recipe validator"),
    (CpuTarget, "compile", "isl and LLVM"),
    (CpuTarget, "search_space", "the default-recipe analysis (isl dependences)"),
]


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "chain.pb"
    weights = write_dense_chain_graphdef(path, WIDTHS)
    return path, weights


def _x() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((3, WIDTHS[0])).astype(np.float32)


def test_a_warm_load_runs_no_pass_packing_validation_isl_or_llvm(model, tmp_path, monkeypatch):
    path, weights = model
    cold = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)
    assert cold.packed_weights, "the test model must pack weights ahead of time"
    expected = cold(h0=_x())
    kinds = sorted(entry.name.split(".")[1] for entry, _ in ModelImageCache(tmp_path / "cache").entries())
    assert kinds == ["file", "packed", "placeholders", "prepared"]
    for owner, name, what in NOT_ON_A_WARM_LOAD:
        monkeypatch.setattr(owner, name, _fail(what))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        warm = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)
    outputs = warm(h0=_x())
    assert outputs.keys() == expected.keys()
    for name in expected:
        assert outputs[name].tobytes() == expected[name].tobytes()
    reference = _x()
    for w in weights:
        reference = np.maximum(reference @ w, 0)
    np.testing.assert_allclose(next(iter(outputs.values())), reference, rtol=1e-5, atol=1e-5)
    assert all(not value.flags.writeable for value in warm.packed_weights.values())  # mapped from the cache file


def test_a_changed_file_is_prepared_again(model, tmp_path):
    path, _ = model
    polytf.load(path, cache_dir=tmp_path / "cache", progress=False)
    weights = write_dense_chain_graphdef(path, WIDTHS, seed=7)  # same shapes, other weights
    reference = _x()
    for w in weights:
        reference = np.maximum(reference @ w, 0)
    outputs = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)(h0=_x())
    np.testing.assert_allclose(next(iter(outputs.values())), reference, rtol=1e-5, atol=1e-5)


def test_a_corrupt_entry_is_one_warning_and_built_again(model, tmp_path):
    path, _ = model
    expected = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)(h0=_x())
    for entry, _ in ModelImageCache(tmp_path / "cache").entries():
        if ".prepared." in entry.name or ".packed." in entry.name:
            data = bytearray(entry.read_bytes())
            data[-1] ^= 0xFF
            entry.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)(h0=_x())
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(messages) == 2 and all("SHA-256 does not match" in message for message in messages), messages
    for name in expected:
        assert outputs[name].tobytes() == expected[name].tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # rewritten: the next load uses them again
        polytf.load(path, cache_dir=tmp_path / "cache", progress=False)


def test_without_the_code_cache_nothing_is_kept(model, tmp_path):
    path, _ = model
    polytf.load(path, cache_dir=tmp_path / "cache", progress=False, compile_cache=False)
    assert ModelImageCache(tmp_path / "cache").entries() == []


def test_cache_clear_removes_the_model_entries(model, tmp_path, capsys):
    from polytf.cli import main

    path, _ = model
    polytf.load(path, cache_dir=tmp_path / "cache", progress=False)
    assert main(["cache", "clear", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "4 model entries" in capsys.readouterr().out
    assert ModelImageCache(tmp_path / "cache").entries() == []


def test_a_dynamic_model_maps_every_size_built_before(tmp_path, monkeypatch):
    path = tmp_path / "dense.pbtxt"
    weights = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)
    floats = " ".join(f"float_val: {value!r}" for value in weights.ravel().tolist())
    path.write_text(
        'node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } '
        'attr { key: "shape" value { shape { dim { size: -1 } dim { size: 5 } } } } }\n'
        'node { name: "w" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "value" value { tensor { '
        f"dtype: DT_FLOAT tensor_shape {{ dim {{ size: 5 }} dim {{ size: 4 }} }} {floats} }} }} }} }}\n"
        'node { name: "out" op: "MatMul" input: "a" input: "w" attr { key: "T" value { type: DT_FLOAT } } }\n'
    )
    cold = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)
    a3 = np.arange(15, dtype=np.float32).reshape(3, 5)
    expected = cold(a=a3)["out"]
    for owner, name, what in NOT_ON_A_WARM_LOAD:
        monkeypatch.setattr(owner, name, _fail(what))
    warm = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)  # N=1 at load, N=3 at the call: both kept
    assert warm(a=a3)["out"].tobytes() == expected.tobytes()
    np.testing.assert_allclose(expected, a3 @ weights, rtol=1e-5)
    with pytest.raises(AssertionError, match="the GraphDef reader"):
        warm(a=np.ones((4, 5), np.float32))  # a size never built: read, prepared and compiled now


def test_a_warm_load_of_a_sliced_batch_runs_no_isl(tmp_path, monkeypatch):
    from graphdef_builders import write_conv_graphdef

    from polytf.compiler import sliced_kernels
    from polytf.poly import flops
    from polytf.runtime.cpu.sliced_kernel import SampleLoop

    path = tmp_path / "conv.pb"
    write_conv_graphdef(path, (6, 6, 3), 8, 3, 1, "SAME")  # padding: constraints isl would count
    monkeypatch.setattr(sliced_kernels, "MIN_SLICE_POINTS", 0)
    x = np.random.default_rng(5).standard_normal((3, 6, 6, 3)).astype(np.float32)
    cold = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)
    expected = cold(x=x)["relu"]
    assert all(isinstance(kernel.function, SampleLoop) for kernel in cold.at_sizes(N=3).kernels)
    flops._points.cache_clear()
    for owner, name, what in [*NOT_ON_A_WARM_LOAD, (flops, "_count", "isl's point counting")]:
        monkeypatch.setattr(owner, name, _fail(what))
    warm = polytf.load(path, cache_dir=tmp_path / "cache", progress=False)
    assert warm(x=x)["relu"].tobytes() == expected.tobytes()
    assert all(isinstance(kernel.function, SampleLoop) for kernel in warm.at_sizes(N=3).kernels)
