import numpy as np
import pytest

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import lookup
from polytf.ops.elementwise import broadcast_shapes

BROADCAST_CASES = [
    ((3, 1), (4,)),
    ((2, 3, 4), (4,)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((), ()),
    ((2, 1, 3), (1, 4, 1)),
    ((2, 3), (2, 3)),
]


@pytest.mark.parametrize("op", ["AddV2", "Add", "Sub", "Mul"])
@pytest.mark.parametrize("shapes", BROADCAST_CASES)
def test_binary_lowering_matches_reference(rand, run_op, op, shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1])
    node = Node("n", op, ("a:0", "b:0"))
    (expected,), (got,), statements = run_op(node, [a, b])
    numpy_op = {"AddV2": np.add, "Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op]
    np.testing.assert_allclose(expected, numpy_op(a, b), rtol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert len(statements) == 1
    assert statements[0].iterators == tuple(f"d{i}" for i in range(expected.ndim))


def test_broadcast_uses_constant_index_for_size_one_dims(rand, run_op):
    node = Node("n", "AddV2", ("a:0", "b:0"))
    _, _, (statement,) = run_op(node, [rand(3, 1), rand(4)])
    a_access, b_access = statement.reads
    assert [str(i) for i in a_access.index] == ["d0", "0"]
    assert [str(i) for i in b_access.index] == ["d1"]


def test_broadcast_shapes_rejects_incompatible():
    assert broadcast_shapes((3, 1), (4,)) == (3, 4)
    assert broadcast_shapes((None, 1), (5,)) == (None, 5)
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        broadcast_shapes((3, 2), (4,))


def test_bias_add_and_relu(rand, run_op):
    x, bias = rand(2, 3, 4), rand(4)
    (expected,), (got,), _ = run_op(Node("b", "BiasAdd", ("x:0", "bias:0"), attrs={"data_format": "NHWC"}), [x, bias])
    np.testing.assert_allclose(expected, x + bias, rtol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    (expected,), (got,), (statement,) = run_op(Node("r", "Relu", ("x:0",)), [x])
    np.testing.assert_array_equal(expected, np.maximum(x, 0))
    assert (expected == 0).any() and (expected > 0).any()
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert str(statement.value) == "maximum(X0[d0, d1, d2], 0.0)"


def test_bias_add_checks_its_layout_and_channels():
    definition = lookup("BiasAdd")
    types = [TensorType((1, 3, 4, 4)), TensorType((3,))]
    assert definition.infer(Node("b", "BiasAdd", ("x:0", "b:0"), attrs={"data_format": "NCHW"}), types, [None, None]) == (types[0],)
    with pytest.raises(ShapeError, match="NHWC and NCHW"):
        definition.infer(Node("b", "BiasAdd", ("x:0", "b:0"), attrs={"data_format": "NCDHW"}), types, [None, None])
    with pytest.raises(ShapeError, match="channel dimension"):
        definition.infer(Node("b", "BiasAdd", ("x:0", "b:0")), types, [None, None])


@pytest.mark.parametrize(
    "op,shapes",
    [
        ("AddV2", ((3, 1), (4,))),
        ("Add", ((2, 3, 4), (4,))),
        ("Sub", ((), (2, 3))),
        ("Mul", ((2, 3, 4), (4,))),
        ("Mul", ((2, 1, 3), (1, 4, 1))),
    ],
)
def test_binary_reference_matches_tensorflow(rand, run_op, op, shapes):
    tf = pytest.importorskip("tensorflow")
    a, b = rand(*shapes[0]), rand(*shapes[1])
    (expected,), _, _ = run_op(Node("n", op, ("a:0", "b:0")), [a, b], lower=False)
    actual = getattr(tf.raw_ops, op)(x=a, y=b).numpy()
    np.testing.assert_allclose(expected, actual, rtol=1e-5, atol=1e-6)


def test_bias_add_and_relu_match_tensorflow(rand, run_op):
    tf = pytest.importorskip("tensorflow")
    x, bias = rand(2, 3, 4), rand(4)
    (expected,), _, _ = run_op(Node("b", "BiasAdd", ("x:0", "bias:0")), [x, bias], lower=False)
    np.testing.assert_allclose(expected, tf.raw_ops.BiasAdd(value=x, bias=bias, data_format="NHWC").numpy(), rtol=1e-5, atol=1e-6)
    (expected,), _, _ = run_op(Node("r", "Relu", ("x:0",)), [x], lower=False)
    np.testing.assert_allclose(expected, tf.raw_ops.Relu(features=x).numpy(), rtol=1e-5, atol=1e-6)
