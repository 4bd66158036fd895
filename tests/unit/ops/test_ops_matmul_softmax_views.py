import numpy as np
import pytest

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import NO_OUTPUT, SOURCE, VIEW, lookup, supported_ops


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_lowering_and_tensorflow(rand, run_op, transpose_a, transpose_b):
    a = rand(*((4, 3) if transpose_a else (3, 4)))
    b = rand(*((5, 4) if transpose_b else (4, 5)))
    node = Node("mm", "MatMul", ("a:0", "b:0"), attrs={"transpose_a": transpose_a, "transpose_b": transpose_b})
    (expected,), (got,), _ = run_op(node, [a, b])
    assert expected.shape == (3, 5)
    np.testing.assert_allclose(expected, (a.T if transpose_a else a) @ (b.T if transpose_b else b), rtol=1e-5)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    tf = pytest.importorskip("tensorflow")
    actual = tf.raw_ops.MatMul(a=a, b=b, transpose_a=transpose_a, transpose_b=transpose_b).numpy()
    np.testing.assert_allclose(expected, actual, rtol=1e-5, atol=1e-6)


def test_matmul_rejects_inner_mismatch():
    with pytest.raises(ShapeError, match="inner"):
        lookup("MatMul").infer(
            Node("mm", "MatMul", ("a:0", "b:0")), [TensorType((3, 4)), TensorType((5, 6))], [None, None]
        )


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
def test_softmax_lowering_matches_reference(rand, run_op, shape):
    x = rand(*shape) * 3
    (expected,), (got,), statements = run_op(Node("sm", "Softmax", ("x:0",)), [x])
    np.testing.assert_allclose(expected.sum(axis=-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    rank = len(shape)
    row = tuple(f"d{i}" for i in range(rank - 1))
    assert [s.iterators for s in statements] == [
        row,
        row + ("r0",),
        row + (f"d{rank - 1}",),
        row,
        row + ("r0",),
        row + (f"d{rank - 1}",),
    ]
    assert [s.is_reduction for s in statements] == [False, True, False, False, True, False]
    assert statements[-1].write.array == "Y0"


def test_softmax_is_stable_for_large_logits(run_op):
    x = np.array([[1000.0, 1001.0, 999.0]], np.float32)
    (expected,), (got,), _ = run_op(Node("sm", "Softmax", ("x:0",)), [x])
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
def test_softmax_reference_matches_tensorflow(rand, run_op, shape):
    tf = pytest.importorskip("tensorflow")
    x = rand(*shape) * 3
    (expected,), _, _ = run_op(Node("sm", "Softmax", ("x:0",)), [x], lower=False)
    np.testing.assert_allclose(expected, tf.raw_ops.Softmax(logits=x).numpy(), rtol=1e-5, atol=1e-6)


def test_softmax_rejects_scalar():
    with pytest.raises(ShapeError, match="rank >= 1"):
        lookup("Softmax").infer(Node("sm", "Softmax", ("x:0",)), [TensorType(())], [None])


@pytest.mark.parametrize(
    "in_shape,target,out_shape",
    [((2, 3, 4), (-1, 4), (6, 4)), ((2, 3, 4), (4, -1), (4, 6)), ((6,), (2, 3), (2, 3)), ((1, 1), (), ())],
)
def test_reshape(rand, run_op, in_shape, target, out_shape):
    x = rand(*in_shape)
    shape = np.array(target, np.int32)
    (expected,), _, _ = run_op(Node("r", "Reshape", ("x:0", "s:0")), [x, shape], lower=False)
    assert expected.shape == out_shape
    np.testing.assert_array_equal(expected.reshape(-1), x.reshape(-1))
    tf = pytest.importorskip("tensorflow")
    np.testing.assert_array_equal(expected, tf.raw_ops.Reshape(tensor=x, shape=shape).numpy())


def test_reshape_errors():
    infer = lookup("Reshape").infer
    node = Node("r", "Reshape", ("x:0", "s:0"))
    x = TensorType((2, 3))
    with pytest.raises(ShapeError, match="compile-time constant"):
        infer(node, [x, TensorType((2,), "int32")], [None, None])
    with pytest.raises(ShapeError, match="more than one -1"):
        infer(node, [x, TensorType((2,), "int32")], [None, np.array([-1, -1])])
    with pytest.raises(ShapeError, match="cannot reshape"):
        infer(node, [x, TensorType((2,), "int32")], [None, np.array([4, -1])])
    with pytest.raises(ShapeError, match="cannot reshape"):
        infer(node, [x, TensorType((2,), "int32")], [None, np.array([5, 1])])


@pytest.mark.parametrize(
    "in_shape,dims,out_shape",
    [
        ((1, 3, 1, 2), (), (3, 2)),
        ((1, 3, 1, 2), (0,), (3, 1, 2)),
        ((1, 3, 1, 2), (-2,), (1, 3, 2)),
        ((1, 3, 1, 2), (0, 2), (3, 2)),
        ((1, 1), (), ()),
    ],
)
def test_squeeze(rand, run_op, in_shape, dims, out_shape):
    x = rand(*in_shape)
    (expected,), _, _ = run_op(Node("s", "Squeeze", ("x:0",), attrs={"squeeze_dims": dims}), [x], lower=False)
    assert expected.shape == out_shape
    tf = pytest.importorskip("tensorflow")
    np.testing.assert_array_equal(expected, tf.raw_ops.Squeeze(input=x, axis=list(dims)).numpy())


def test_squeeze_rejects_non_unit_dim():
    with pytest.raises(ShapeError, match="not 1"):
        lookup("Squeeze").infer(
            Node("s", "Squeeze", ("x:0",), attrs={"squeeze_dims": (1,)}), [TensorType((1, 3))], [None]
        )
    with pytest.raises(ShapeError, match="out of range"):
        lookup("Squeeze").infer(
            Node("s", "Squeeze", ("x:0",), attrs={"squeeze_dims": (2,)}), [TensorType((1, 3))], [None]
        )


def test_identity_noop_and_sources(rand, run_op):
    x = rand(2, 3)
    (expected,), _, _ = run_op(Node("i", "Identity", ("x:0",)), [x], lower=False)
    np.testing.assert_array_equal(expected, x)
    assert run_op(Node("n", "NoOp"), [], lower=False)[0] == ()
    value = np.arange(6, dtype=np.int32).reshape(2, 3)
    const = Node("c", "Const", attrs={"value": value, "dtype": "int32"})
    assert lookup("Const").infer(const, [], []) == (TensorType((2, 3), "int32"),)
    np.testing.assert_array_equal(lookup("Const").reference(const, [])[0], value)
    ph = Node("p", "Placeholder", attrs={"shape": (None, 4), "dtype": "float32"})
    assert lookup("Placeholder").infer(ph, [], []) == (TensorType((None, 4), "float32"),)
    for op in ("Placeholder", "Const", "Identity", "Reshape", "Squeeze", "NoOp"):
        assert lookup(op).lower is None
    assert lookup("Reshape").data_inputs == (0,)


#: compute ops registered without a lowering on purpose (polytf.ops.top_k: a sort)
HOST_ONLY_OPS = {"TopKV2"}


def test_every_definition_cites_its_source():
    for op in supported_ops():
        definition = lookup(op)
        assert definition.source.startswith("tensorflow/core/ops/"), op
        emits_no_code = definition.category in (SOURCE, VIEW, NO_OUTPUT)
        if op in HOST_ONLY_OPS:  # a reference and no lowering: run on the host (polytf.lowering.host_fallback)
            assert definition.lower is None and not emits_no_code, op
        else:
            assert (definition.lower is None) == emits_no_code, op
