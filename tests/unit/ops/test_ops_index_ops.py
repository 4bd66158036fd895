"""ArgMax, ArgMin and OneHot: references against ``tf.raw_ops``, and a frozen TensorFlow
model in which they run on the host between compiled kernels."""

from __future__ import annotations

import numpy as np
import pytest

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import registry


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize(("shape", "axis", "output_type"), [((4, 7), 1, "int64"), ((3, 4, 5), 0, "int32"), ((6,), -1, "int64")])
def test_arg_reference_matches_tensorflow(rng, op, shape, axis, output_type):
    tf = pytest.importorskip("tensorflow")
    x = rng.integers(-3, 3, size=shape).astype(np.float32)  # ties: the first index wins
    node = Node("a", op, ("x:0", "axis:0"), attrs={"output_type": output_type})
    (types,) = registry.lookup(op).infer(node, [TensorType(shape), TensorType((), "int32")], [None, np.int32(axis)])
    (expected,) = registry.lookup(op).reference(node, [x, np.int32(axis)])
    actual = getattr(tf.raw_ops, op)(input=x, dimension=axis, output_type=tf.as_dtype(output_type)).numpy()
    np.testing.assert_array_equal(expected, actual)
    assert expected.dtype == np.dtype(output_type) and types == TensorType(actual.shape, output_type)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_reference_matches_tensorflow(rng, axis):
    tf = pytest.importorskip("tensorflow")
    indices = rng.integers(-1, 6, size=(3, 4)).astype(np.int32)  # -1 and 5: rows of off_value
    node = Node("h", "OneHot", ("i:0", "d:0", "on:0", "off:0"), attrs={"axis": axis})
    inputs = [indices, np.int32(5), np.float32(2.5), np.float32(-1.0)]
    (expected,) = registry.lookup("OneHot").reference(node, inputs)
    actual = tf.raw_ops.OneHot(indices=indices, depth=5, on_value=np.float32(2.5), off_value=np.float32(-1.0), axis=axis).numpy()
    np.testing.assert_array_equal(expected, actual)
    types = [TensorType(np.shape(v), np.asarray(v).dtype.name) for v in inputs]
    assert registry.lookup("OneHot").infer(node, types, [None, np.int32(5), None, None]) == (TensorType(actual.shape, "float32"),)


def test_one_hot_needs_a_constant_depth():
    node = Node("h", "OneHot", ("i:0", "d:0", "on:0", "off:0"))
    types = [TensorType((3,), "int32"), TensorType((), "int32"), TensorType(()), TensorType(())]
    with pytest.raises(ShapeError, match="depth .* must be a compile-time constant"):
        registry.lookup("OneHot").infer(node, types, [None, None, None, None])


def test_argmax_and_one_hot_run_on_the_host_inside_a_compiled_model(tmp_path):
    tf = pytest.importorskip("tensorflow")
    import polytf
    from polytf.model_zoo.freeze import freeze_to_graphdef
    from polytf.model_zoo.tensorflow_runner import run_graphdef_with_tensorflow

    weights = tf.constant(np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32))

    def model(x):
        logits = tf.matmul(x, weights)
        chosen = tf.one_hot(tf.argmax(logits, axis=-1), 5)
        return tf.nn.relu(logits) * chosen

    path = tmp_path / "argmax.pb"
    path.write_bytes(freeze_to_graphdef(tf.function(model), [("x", (4, 6))]).SerializeToString())
    compiled = polytf.load(path, cache_dir=tmp_path / "cache")
    assert sorted(node.op for node in compiled.host_nodes) == ["ArgMax", "OneHot"]
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    (name,) = compiled.output_names
    np.testing.assert_allclose(compiled(x=x)[name], run_graphdef_with_tensorflow(path, {"x": x}, [name])[name], rtol=1e-5, atol=1e-6)
