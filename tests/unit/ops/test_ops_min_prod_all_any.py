"""Min, Prod, All and Any reductions: references against TensorFlow, lowerings against the
references, compiled kernels, compile-time folding of All/Any."""

from __future__ import annotations

import numpy as np
import pytest
from compiled_kernels import verify_all_recipes
from hand_built_graphs import build_graph, const, placeholder
from op_constants import run_op_with_constants

from polytf.errors import ShapeError
from polytf.graph import Node
from polytf.ops import lookup

CASES = [((3, 4, 5), [1], False), ((3, 4, 5), [0, 2], True), ((6,), [0], False), ((2, 3), [], True), ((2, 3, 4), [-1, 0], False)]


def _node(op, keep_dims):
    return Node("r", op, ("x:0", "axes:0"), attrs={"keep_dims": keep_dims})


@pytest.mark.parametrize("op", ["Min", "Prod"])
@pytest.mark.parametrize("shape,axes,keep_dims", CASES)
def test_min_prod_lowering_matches_reference(rand, op, shape, axes, keep_dims):
    x = rand(*shape)
    (expected,), (got,), _ = run_op_with_constants(_node(op, keep_dims), [x, np.asarray(axes, np.int32)])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Min", "Prod"])
@pytest.mark.parametrize("shape,axes,keep_dims", CASES)
def test_min_prod_references_match_tensorflow(rand, op, shape, axes, keep_dims):
    tf = pytest.importorskip("tensorflow")
    x = rand(*shape)
    (ours,), _, _ = run_op_with_constants(_node(op, keep_dims), [x, np.asarray(axes, np.int32)], lower=False)
    theirs = getattr(tf.raw_ops, op)(input=x, axis=np.asarray(axes, np.int32), keep_dims=keep_dims).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    integers = np.arange(np.prod(shape), dtype=np.int32).reshape(shape) % 5 - 2
    (ours,), _, _ = run_op_with_constants(_node(op, keep_dims), [integers, np.asarray(axes, np.int32)], lower=False)
    np.testing.assert_array_equal(ours, getattr(tf.raw_ops, op)(input=integers, axis=np.asarray(axes, np.int32), keep_dims=keep_dims).numpy())


@pytest.mark.parametrize("op", ["All", "Any"])
@pytest.mark.parametrize("shape,axes,keep_dims", CASES)
def test_all_any_references_match_tensorflow(op, shape, axes, keep_dims):
    tf = pytest.importorskip("tensorflow")
    x = np.random.default_rng(7).random(shape) < 0.7
    (ours,), _, _ = run_op_with_constants(_node(op, keep_dims), [x, np.asarray(axes, np.int32)], lower=False)
    assert ours.dtype == np.bool_
    np.testing.assert_array_equal(ours, getattr(tf.raw_ops, op)(input=x, axis=np.asarray(axes, np.int32), keep_dims=keep_dims).numpy())


def test_all_any_fold_through_their_reference():
    value = np.asarray([[True, False], [True, True]])
    for op, expected in (("All", [False, True]), ("Any", [True, True])):
        definition = lookup(op)
        assert definition.foldable and definition.dtypes == ("bool",)
        np.testing.assert_array_equal(definition.reference(_node(op, False), [value, np.asarray([1], np.int32)])[0], expected)
    with pytest.raises(ShapeError, match="must be bool"):
        lookup("All").reference(_node("All", False), [np.ones((2, 2), np.float32), np.asarray([1], np.int32)])


@pytest.mark.parametrize("op", ["All", "Any"])
@pytest.mark.parametrize("shape,axes,keep_dims", CASES)
def test_all_any_lowering_matches_reference(op, shape, axes, keep_dims):
    x = np.random.default_rng(3).random(shape) < (0.9 if op == "All" else 0.1)
    (expected,), (got,), _ = run_op_with_constants(_node(op, keep_dims), [x, np.asarray(axes, np.int32)])
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, expected)


def test_all_any_over_run_time_masks_compile_and_match_tensorflow(tmp_path):
    """All/Any over masks computed at run time are compiled kernels (no host node)."""
    tf = pytest.importorskip("tensorflow")
    import polytf
    from polytf.model_zoo.freeze import freeze_to_graphdef
    from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow

    def model(x):
        every = tf.reduce_all(x > -1.0, axis=-1)
        some = tf.reduce_any(x > 1.5, axis=[0, 2], keepdims=True)
        return tf.where(every, 1.0, 0.0), tf.cast(some, tf.float32) + tf.reduce_sum(x)

    path = tmp_path / "all_any.pb"
    path.write_bytes(freeze_to_graphdef(tf.function(model), [("x", (3, 4, 6))]).SerializeToString())
    compiled = polytf.load(path, cache_dir=tmp_path / "cache", fallback=False)
    assert not compiled.host_nodes and {"All", "Any"} <= {op for kernel in compiled.kernels for _, op in kernel.scop.ops}
    x = np.random.default_rng(5).standard_normal((3, 4, 6)).astype(np.float32)
    x[0] = np.abs(x[0])  # a row where All holds
    expected = run_graphdef_with_tensorflow(path, {"x": x}, list(compiled.output_names))
    actual = compiled(x=x)
    for name in compiled.output_names:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-5)
    assert 0 < actual["Identity"].sum() < actual["Identity"].size, "the test should see both outcomes of All"


@pytest.mark.parametrize("op", ["Min", "Prod"])
def test_min_prod_compile_correctly(monkeypatch, op):
    graph = build_graph(
        [placeholder("x", (3, 7, 10)), const("axes", np.asarray([1], np.int32)),
         Node("r", op, ("x:0", "axes:0"), attrs={"keep_dims": False}), Node("relu", "Relu", ("r:0",))],
        ["relu:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert [k.scop.ops for k in kernels] == [(("r", op), ("relu", "Relu"))]
    assert failures == []
