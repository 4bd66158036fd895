"""ArgMax, ArgMin and OneHot: references against ``tf.raw_ops``, and frozen TensorFlow
models in which they are compiled (their expansion into compiled ops) and match TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import lookup


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize(("shape", "axis", "output_type"), [((4, 7), 1, "int64"), ((3, 4, 5), 0, "int32"), ((6,), -1, "int64")])
def test_arg_reference_matches_tensorflow(rng, op, shape, axis, output_type):
    tf = pytest.importorskip("tensorflow")
    x = rng.integers(-3, 3, size=shape).astype(np.float32)  # ties: the first index wins
    node = Node("a", op, ("x:0", "axis:0"), attrs={"output_type": output_type})
    (types,) = lookup(op).infer(node, [TensorType(shape), TensorType((), "int32")], [None, np.int32(axis)])
    (expected,) = lookup(op).reference(node, [x, np.int32(axis)])
    actual = getattr(tf.raw_ops, op)(input=x, dimension=axis, output_type=tf.as_dtype(output_type)).numpy()
    np.testing.assert_array_equal(expected, actual)
    assert expected.dtype == np.dtype(output_type) and types == TensorType(actual.shape, output_type)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_reference_matches_tensorflow(rng, axis):
    tf = pytest.importorskip("tensorflow")
    indices = rng.integers(-1, 6, size=(3, 4)).astype(np.int32)  # -1 and 5: rows of off_value
    node = Node("h", "OneHot", ("i:0", "d:0", "on:0", "off:0"), attrs={"axis": axis})
    inputs = [indices, np.int32(5), np.float32(2.5), np.float32(-1.0)]
    (expected,) = lookup("OneHot").reference(node, inputs)
    actual = tf.raw_ops.OneHot(indices=indices, depth=5, on_value=np.float32(2.5), off_value=np.float32(-1.0), axis=axis).numpy()
    np.testing.assert_array_equal(expected, actual)
    types = [TensorType(np.shape(v), np.asarray(v).dtype.name) for v in inputs]
    assert lookup("OneHot").infer(node, types, [None, np.int32(5), None, None]) == (TensorType(actual.shape, "float32"),)


def test_one_hot_needs_a_constant_depth():
    node = Node("h", "OneHot", ("i:0", "d:0", "on:0", "off:0"))
    types = [TensorType((3,), "int32"), TensorType((), "int32"), TensorType(()), TensorType(())]
    with pytest.raises(ShapeError, match="depth .* must be a compile-time constant"):
        lookup("OneHot").infer(node, types, [None, None, None, None])


def _freeze(tmp_path, function, specs):
    tf = pytest.importorskip("tensorflow")
    from polytf.model_zoo.freeze import freeze_to_graphdef

    path = tmp_path / "index_ops.pb"
    path.write_bytes(freeze_to_graphdef(tf.function(function), specs).SerializeToString())
    return path


def _assert_same_as_tensorflow(model, path, feeds):
    from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow

    expected = run_graphdef_with_tensorflow(path, feeds, list(model.output_names))
    actual = model(**feeds)
    for name in model.output_names:
        assert actual[name].dtype == expected[name].dtype, name
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_arg_reductions_compile_and_match_tensorflow(rng, tmp_path, dtype):
    """ArgMax/ArgMin over every axis, both output types, compiled (no host node), on ties,
    and for floats on NaN, -inf and +inf (TensorFlow's CPU rule: NaN never wins; no value
    above the dtype's lowest gives 0); for integers on the dtype's extremes."""
    tf = pytest.importorskip("tensorflow")
    import polytf

    def model(x):
        return (
            tf.math.argmax(x, axis=0),
            tf.math.argmax(x, axis=2, output_type=tf.int32),
            tf.math.argmin(x, axis=1),
            tf.math.argmin(x, axis=-1, output_type=tf.int32),
        )

    shape = (5, 6, 7)
    path = _freeze(tmp_path, model, [("x", shape, dtype)])
    compiled = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    assert not compiled.host_nodes
    assert not {"ArgMax", "ArgMin"} & {op for kernel in compiled.kernels for _, op in kernel.scop.ops}
    if dtype == "float32":
        x = rng.integers(-3, 3, size=shape).astype(np.float32)  # ties: the first position wins
        x[0, 0, :] = np.nan
        x[1, 1, :] = -np.inf
        x[2, 2, :3] = np.nan
        x[2, 2, 3:] = -np.inf
        x[3, 3, 2] = np.inf
        x[4, :, 4] = np.nan
        x[:, 5, 5] = np.finfo(np.float32).min
    else:
        info = np.iinfo(dtype)
        x = rng.integers(-3, 3, size=shape).astype(dtype)
        x[0, 0, :] = info.min
        x[1, 1, :] = info.max
        x[2, :, 3] = info.min
        x[3, 4, 5] = info.max
    _assert_same_as_tensorflow(compiled, path, {"x": x})


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_one_hot_compiles_and_matches_tensorflow(rng, tmp_path, axis, dtype):
    """OneHot at every axis, on int32 and int64 ids, with out-of-range ids (rows of off_value),
    float and integer on/off values, fused into what reads it."""
    tf = pytest.importorskip("tensorflow")
    import polytf

    weights = tf.constant(rng.standard_normal(5).astype(np.float32))

    def model(ids):
        hot = tf.one_hot(ids, 5, on_value=2.5, off_value=-1.0, axis=axis)
        counts = tf.one_hot(ids, 5, on_value=7, off_value=0, axis=axis, dtype=tf.int32)
        return hot * (weights if axis == -1 else 1.0), counts

    path = _freeze(tmp_path, model, [("ids", (3, 4), dtype)])
    compiled = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    assert not compiled.host_nodes
    ids = rng.integers(-2, 7, size=(3, 4)).astype(dtype)
    _assert_same_as_tensorflow(compiled, path, {"ids": ids})


def _expanded(nodes, outputs):
    from hand_built_graphs import build_graph

    from polytf.passes.pipeline import optimize

    graph, _ = optimize(build_graph(nodes, outputs))
    assert not {"ArgMax", "ArgMin", "OneHot"} & {node.op for node in graph.nodes.values()}
    return graph


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_expanded_arg_reductions_verify_under_every_heuristic_recipe(monkeypatch, op, axis):
    """The kernels of an expanded ArgMax/ArgMin (masks, int selections, int Min reduction),
    compiled under the default and every heuristic recipe of the search space, agree with
    their references exactly (random normal inputs)."""
    from compiled_kernels import verify_all_recipes
    from hand_built_graphs import const, placeholder

    graph = _expanded(
        [placeholder("x", (6, 9, 10)), const("axis", np.int32(axis)),
         Node("a", op, ("x:0", "axis:0"), attrs={"output_type": "int32"}), Node("c", "Cast", ("a:0",), attrs={"SrcT": "int32", "DstT": "float32"})],
        ["c:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    # two kernels: the float Max joins its element-wise producers' kernel (input fusion)
    assert len(kernels) >= 2 and failures == []


def test_expanded_one_hot_verifies_under_every_heuristic_recipe(monkeypatch):
    from compiled_kernels import verify_all_recipes
    from hand_built_graphs import const

    ids = Node("ids", "Placeholder", attrs={"dtype": "int32", "shape": (7, 5)})
    graph = _expanded(
        [ids, const("depth", np.int32(12)), const("on", np.float32(1.0)), const("off", np.float32(0.0)),
         Node("h", "OneHot", ("ids:0", "depth:0", "on:0", "off:0"), attrs={"axis": 1}), Node("r", "Relu", ("h:0",))],
        ["r:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert kernels and failures == []
