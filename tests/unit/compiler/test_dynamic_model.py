"""A model with size symbols: ``polytf.load`` of a GraphDef whose placeholders declare ``-1``
gives a DynamicModel, callable at any size in range and equal to numpy there; its call's
sizes are checked before anything runs; it keeps a bounded number of sizes built."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import polytf
from polytf.compiler.dynamic_model import DynamicModel
from polytf.compiler.loading import load_model
from polytf.compiler.preparation import read_graph
from polytf.compiler.symbolic_inputs import declared_shapes, sized_sources, symbolic_signature
from polytf.config import SizeSymbolConfig
from polytf.errors import GraphError, ShapeError, SizeError
from polytf.graph.size_symbols import SizeSymbol

WEIGHTS = np.arange(20, dtype=np.float32).reshape(5, 4) / 10 - 1


def _tensor(values: np.ndarray) -> str:
    dims = " ".join(f"dim {{ size: {size} }}" for size in values.shape)
    floats = " ".join(f"float_val: {value!r}" for value in values.ravel().tolist())
    return f"tensor {{ dtype: DT_FLOAT tensor_shape {{ {dims} }} {floats} }}"


def _placeholder(name: str, dims: tuple[int, ...]) -> str:
    shape = " ".join(f"dim {{ size: {size} }}" for size in dims)
    return f'node {{ name: "{name}" op: "Placeholder" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }} attr {{ key: "shape" value {{ shape {{ {shape} }} }} }} }}\n'


#: a: [-1, 5] @ w: [5, 4] -> Relu
DENSE = (
    _placeholder("a", (-1, 5))
    + f'node {{ name: "w" op: "Const" attr {{ key: "dtype" value {{ type: DT_FLOAT }} }} attr {{ key: "value" value {{ {_tensor(WEIGHTS)} }} }} }}\n'
    + 'node { name: "mm" op: "MatMul" input: "a" input: "w" attr { key: "T" value { type: DT_FLOAT } } }\n'
    + 'node { name: "out" op: "Relu" input: "mm" attr { key: "T" value { type: DT_FLOAT } } }\n'
)
#: x: [-1, -1] + y: [-1, -1] -> Tanh
PAIR = (
    _placeholder("x", (-1, -1))
    + _placeholder("y", (-1, -1))
    + 'node { name: "sum" op: "AddV2" input: "x" input: "y" attr { key: "T" value { type: DT_FLOAT } } }\n'
    + 'node { name: "out" op: "Tanh" input: "sum" attr { key: "T" value { type: DT_FLOAT } } }\n'
)


@pytest.fixture
def dense(tmp_path):
    path = tmp_path / "dense.pbtxt"
    path.write_text(DENSE)
    return path


@pytest.fixture
def pair(tmp_path):
    path = tmp_path / "pair.pbtxt"
    path.write_text(PAIR)
    return path


def test_unknown_dimensions_become_symbols_named_by_axis(pair):
    signature = symbolic_signature(declared_shapes(read_graph(polytf.ModelSource(pair))), {})
    assert dict(signature.shapes) == {"x": ("N", "S"), "y": ("N", "S")}
    assert dict(signature.symbols) == {"N": SizeSymbol("N"), "S": SizeSymbol("S")}
    named = symbolic_signature(declared_shapes(read_graph(polytf.ModelSource(pair))), {"x": ("B=1..4", "S"), "y": ("B", 3)})
    assert dict(named.shapes) == {"x": ("B", "S"), "y": ("B", 3)}
    assert named.symbols["B"] == SizeSymbol("B", 1, 4)
    with pytest.raises(ShapeError, match="range 1..8 here and 1..4 before"):
        symbolic_signature(declared_shapes(read_graph(polytf.ModelSource(pair))), {"x": ("B=1..4", 2), "y": ("B=1..8", 2)})


def test_a_none_batch_model_loads_with_no_input_shapes_and_runs_at_any_batch(dense, tmp_path):
    model = polytf.load(dense, cache_dir=tmp_path / "cache", progress=False)
    assert isinstance(model, DynamicModel)
    assert model.input_shapes == {"a": ("N", 5)}
    assert model.built_sizes == [{"N": 1}]  # built at load, for the smallest size
    rng = np.random.default_rng(0)
    for batch in (1, 3, 8, 17):
        a = rng.standard_normal((batch, 5)).astype(np.float32)
        out = model(a=a)["out"]
        np.testing.assert_allclose(out, np.maximum(a @ WEIGHTS, 0), rtol=1e-5, atol=1e-6)
    assert model.at_sizes(N=3).input_types["a"].shape == (3, 5)


def test_a_shared_symbol_binds_both_inputs(pair, tmp_path):
    model = polytf.load(pair, cache_dir=tmp_path / "cache", progress=False)
    x, y = np.ones((2, 7), np.float32), np.full((2, 7), 0.5, np.float32)
    np.testing.assert_allclose(model(x=x, y=y)["out"], np.tanh(x + y), rtol=1e-6)
    with pytest.raises(SizeError, match="inputs 'x' and 'y' disagree on S: 7 and 6") as raised:
        model(x=x, y=np.ones((2, 6), np.float32))
    assert (raised.value.input_name, raised.value.symbol) == ("y", "S")
    with pytest.raises(GraphError, match=r"missing \['y'\]"):
        model(x=x)


def test_sizes_outside_the_range_or_zero_are_refused_before_anything_runs(dense, tmp_path, monkeypatch):
    model = polytf.load(dense, input_shapes={"a": ("N=2..4", 5)}, cache_dir=tmp_path / "cache", progress=False)
    assert model.built_sizes == [{"N": 2}]
    built = []
    monkeypatch.setattr(model, "_build", lambda sizes, base: built.append(sizes))  # nothing may be built
    for batch, words in ((0, "size 0 on axis 0"), (1, r"outside its range 2\.\.4"), (5, r"N = 5 on axis 0, outside")):
        with pytest.raises(SizeError, match=words):
            model(a=np.zeros((batch, 5), np.float32))
    with pytest.raises(SizeError, match="axis 1 must be 5"):
        model(a=np.zeros((2, 6), np.float32))
    assert built == []


def test_a_bounded_number_of_sizes_is_kept(dense, tmp_path):
    source = polytf.ModelSource(dense)
    models = {}

    def build(sizes, base):
        models[sizes["N"]] = load_model(source.with_shapes({"a": (sizes["N"], 5)}), polytf.BuildOptions(cache_dir=tmp_path / "cache"))
        return models[sizes["N"]]

    model = DynamicModel(str(dense), symbolic_signature(declared_shapes(read_graph(source)), {}), build, SizeSymbolConfig(sizes_kept=2))
    for batch in (1, 2, 1, 3):
        model(a=np.ones((batch, 5), np.float32))
    assert model.built_sizes == [{"N": 1}, {"N": 3}]  # 2 went first: least recently called
    assert model.at_sizes(N=1) is models[1]


def test_calls_from_several_threads_build_each_size_once(dense, tmp_path):
    model = polytf.load(dense, cache_dir=tmp_path / "cache", progress=False)
    builds = []
    build = model._build
    model._build = lambda sizes, base: builds.append(sizes) or build(sizes, base)
    errors = []

    def call(batch):
        try:
            a = np.full((batch, 5), 0.25, np.float32)
            np.testing.assert_allclose(model(a=a)["out"], np.maximum(a @ WEIGHTS, 0), rtol=1e-5, atol=1e-6)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=call, args=(batch,)) for batch in (4, 4, 6, 4, 6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(sizes["N"] for sizes in builds) == [4, 6]


def test_sized_sources_give_every_bucket_combination(pair):
    sized = sized_sources(polytf.ModelSource(pair), {"N": (1, 8), "S": (3,)})
    assert [(sizes, dict(source.input_shapes)) for sizes, source in sized] == [
        ({"N": 1, "S": 3}, {"x": (1, 3), "y": (1, 3)}),
        ({"N": 8, "S": 3}, {"x": (8, 3), "y": (8, 3)}),
    ]
    with pytest.raises(SizeError, match="no size symbol M"):
        sized_sources(polytf.ModelSource(pair), {"M": (1,)})


def test_a_static_step_names_the_symbol_it_needs_a_size_for(dense):
    from polytf.compiler.preparation import prepare_model

    with pytest.raises(ShapeError, match=r"input 'a' has size symbol N.*--input a:1,5"):
        prepare_model(polytf.ModelSource(dense, input_shapes={"a": ("N", 5)}))
