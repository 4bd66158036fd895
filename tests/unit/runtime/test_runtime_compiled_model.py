"""CompiledModel on hand-built graphs: results, input checking, views and constants."""

from __future__ import annotations

import numpy as np
import pytest
from hand_built_graphs import build_graph, graph_matmul_bias_relu, reshaped_matmul_nodes

from polytf.compiler.model_builder import build_model
from polytf.compiler.preparation import PreparedModel
from polytf.errors import GraphError, ShapeError
from polytf.lowering.lowered_kernel import lower_group
from polytf.passes.fusion import partition
from polytf.runtime.cpu.compiled_model import CompiledModel


def compile_graph(graph, threads=2):
    groups = partition(graph)
    prepared = PreparedModel(graph, groups, tuple(lower_group(graph, g) for g in groups), ())
    return build_model(prepared, threads=threads)


def test_matmul_bias_relu_matches_numpy():
    graph = graph_matmul_bias_relu()
    model = compile_graph(graph)
    x = np.random.default_rng(0).standard_normal((7, 13)).astype(np.float32)
    (out,) = model(x=x).values()
    expected = np.maximum(x @ graph.constants["w:0"] + graph.constants["b:0"], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert list(model(x=x)) == ["relu"]


def test_reshape_is_a_view_and_constants_are_bound():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    graph = build_graph(reshaped_matmul_nodes(w), ["out:0"])
    model = compile_graph(graph)
    x = rng.standard_normal((2, 3, 2)).astype(np.float32)
    np.testing.assert_allclose(model(x=x)["out"], x.reshape(2, 6) @ w, rtol=1e-5, atol=1e-5)


def test_input_errors_name_the_placeholder():
    model = compile_graph(graph_matmul_bias_relu())
    with pytest.raises(ShapeError, match="input 'x' has shape \\(3, 13\\)"):
        model(x=np.zeros((3, 13), np.float32))
    with pytest.raises(GraphError, match="missing \\['x'\\]"):
        model()
    with pytest.raises(GraphError, match="unknown \\['y'\\]"):
        model(x=np.zeros((7, 13), np.float32), y=1)


def test_outputs_are_fresh_copies():
    model = compile_graph(graph_matmul_bias_relu())
    x = np.ones((7, 13), np.float32)
    first = model(x=x)["relu"]
    first[...] = -5
    assert (model(x=x)["relu"] >= 0).all()
    assert isinstance(model, CompiledModel) and model.threads == 2


def test_inputs_are_read_in_place_or_converted_and_never_kept():
    graph = graph_matmul_bias_relu()
    model = compile_graph(graph)
    rng = np.random.default_rng(2)
    expected = lambda x: np.maximum(x @ graph.constants["w:0"] + graph.constants["b:0"], 0)  # noqa: E731
    contiguous = rng.standard_normal((7, 13)).astype(np.float32)
    before = contiguous.copy()
    first = model(x=contiguous)["relu"]
    np.testing.assert_array_equal(contiguous, before)  # the caller's array is not written
    strided = rng.standard_normal((13, 7)).astype(np.float64).T  # non-contiguous, float64
    second = model(x=strided)["relu"]
    np.testing.assert_allclose(second, expected(strided.astype(np.float32)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(first, expected(before), rtol=1e-5, atol=1e-5)  # not overwritten by the second call
    assert not np.shares_memory(first, second)
    # run_kernels after a call uses the model's own buffers, not the caller's freed arrays
    del contiguous
    model.latency_s({"x": before}, repeats=2, warmup=1)


#: a: [ROWS, 5] @ a constant [5, 4]; ROWS -1 leaves the dimension free
MATMUL_PBTXT = """
node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: ROWS } dim { size: 5 } } } } }
node { name: "w" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 5 } dim { size: 4 } } float_val: 0.5 } } } }
node { name: "out" op: "MatMul" input: "a" input: "w" attr { key: "T" value { type: DT_FLOAT } } }
"""


@pytest.mark.parametrize("rows", [6, -1], ids=["fixed in the GraphDef", "free in the GraphDef"])
def test_a_wrong_shape_gets_advice_that_works(rows, tmp_path):
    import polytf

    path = tmp_path / "m.pbtxt"
    path.write_text(MATMUL_PBTXT.replace("ROWS", str(rows)))
    model = polytf.load(path, input_shapes={"a": (6, 5)}, cache_dir=tmp_path / "cache", compile_cache=False)
    with pytest.raises(ShapeError) as raised:
        model(a=np.ones((7, 5), np.float32))
    message = str(raised.value)
    if rows == -1:  # compiling for (7, 5) works: the message says how
        assert "input_shapes={'a': (7, 5)}" in message and "--input a:7,5" in message
        polytf.load(path, input_shapes={"a": (7, 5)}, cache_dir=tmp_path / "cache", compile_cache=False)
    else:  # it cannot: the message says why, and suggests nothing that fails
        assert "the GraphDef fixes dimension 0 to 6" in message and "input_shapes=" not in message
        with pytest.raises(ShapeError, match="conflicts with its declared shape"):
            polytf.load(path, input_shapes={"a": (7, 5)}, cache_dir=tmp_path / "cache", compile_cache=False)


def test_a_placeholder_is_named_as_its_node_or_its_tensor():
    model = compile_graph(graph_matmul_bias_relu())
    x = np.ones((7, 13), np.float32)
    np.testing.assert_array_equal(model(**{"x:0": x})["relu"], model(x=x)["relu"])
    with pytest.raises(GraphError, match=r"unknown \['xx'\] \(did you mean 'x'\?\)"):
        model(xx=x)
    with pytest.raises(GraphError, match=r"given twice .*\['x:0'\]"):
        model(**{"x": x, "x:0": x})
