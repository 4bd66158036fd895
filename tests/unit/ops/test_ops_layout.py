"""FusedBatchNormV3 (inference), ConcatV2/Concat and Transpose: numpy reference vs
TensorFlow, the lowering vs the reference (through the interpreter), and compiled kernels
(default and heuristic recipes) vs the reference."""

import numpy as np
import pytest
from compiled_kernels import positive_inputs, verify_all_recipes
from hand_built_graphs import build_graph, const, placeholder
from op_constants import run_op_with_constants

from polytf.errors import ShapeError
from polytf.graph import Node, TensorType
from polytf.ops import ELEMENTWISE, lookup

# --- FusedBatchNormV3 -----------------------------------------------------------------------


def batch_norm_node(op="FusedBatchNormV3", **attrs):
    attrs = {"epsilon": 0.001, "is_training": False, "data_format": "NHWC", **attrs}
    return Node("bn", op, ("x:0", "g:0", "b:0", "m:0", "v:0"), attrs=attrs)


def batch_norm_inputs(rand, shape):
    channels = shape[-1]
    return [rand(*shape), rand(channels), rand(channels), rand(channels), np.abs(rand(channels)) + 0.1]


@pytest.mark.parametrize("op", ["FusedBatchNormV3", "FusedBatchNormV2", "FusedBatchNorm"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 1, 8)])
def test_batch_norm_lowering_matches_reference(rand, run_op, op, shape):
    inputs = batch_norm_inputs(rand, shape)
    x, gamma, beta, mean, variance = inputs
    expected, got, (statement,) = run_op(batch_norm_node(op), inputs)
    np.testing.assert_allclose(expected[0], (x - mean) * gamma / np.sqrt(variance + 0.001) + beta, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)
    assert len(expected) == (6 if op == "FusedBatchNormV3" else 5)
    np.testing.assert_array_equal(expected[1], mean)
    np.testing.assert_array_equal(expected[2], variance)
    assert statement.iterators == ("d0", "d1", "d2", "d3") and not statement.is_reduction
    assert lookup(op).category == ELEMENTWISE


def test_batch_norm_reference_matches_tensorflow(rand, run_op):
    tf = pytest.importorskip("tensorflow")
    inputs = batch_norm_inputs(rand, (2, 5, 4, 6))
    expected, _, _ = run_op(batch_norm_node(epsilon=0.01), inputs, lower=False)
    x, scale, offset, mean, variance = inputs
    actual = tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=mean, variance=variance, epsilon=0.01, is_training=False)
    np.testing.assert_allclose(expected[0], actual[0].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(expected[1], actual[1].numpy())  # batch_mean = mean
    np.testing.assert_array_equal(expected[2], actual[2].numpy())  # batch_variance = variance
    # reserve_space_1..3 are TensorFlow internals (their shapes differ between CPU kernels, e.g.
    # () with oneDNN on AVX-512 and (0,) elsewhere): only the documented outputs are compared
    assert len(expected) == len(actual) == 6


def test_batch_norm_rejects_training_mode_and_bad_shapes():
    definition = lookup("FusedBatchNormV3")
    types = [TensorType((1, 2, 2, 3))] + [TensorType((3,))] * 4
    with pytest.raises(ShapeError, match="is_training=True"):
        definition.infer(batch_norm_node(is_training=True), types, [None] * 5)
    with pytest.raises(ShapeError, match="is_training=True"):  # TensorFlow's default
        definition.infer(Node("bn", "FusedBatchNormV3", ("x:0", "g:0", "b:0", "m:0", "v:0")), types, [None] * 5)
    with pytest.raises(ShapeError, match="NHWC"):
        definition.infer(batch_norm_node(data_format="NCHW"), types, [None] * 5)
    with pytest.raises(ShapeError, match="variance must have shape"):
        definition.infer(batch_norm_node(), types[:4] + [TensorType((4,))], [None] * 5)


# --- ConcatV2 / Concat ----------------------------------------------------------------------


def concat_node(count, op="ConcatV2"):
    values = tuple(f"x{k}:0" for k in range(count))
    inputs = ("axis:0", *values) if op == "Concat" else (*values, "axis:0")
    return Node("concat", op, inputs, attrs={"N": count})


CONCAT_CASES = [
    ([(2, 3, 4), (2, 5, 4)], 1),
    ([(2, 3, 4), (2, 3, 1), (2, 3, 2)], -1),
    ([(1, 2, 2, 3), (1, 2, 2, 5)], 3),
    ([(3, 2), (1, 2), (4, 2), (2, 2)], 0),
    ([(2, 0, 3), (2, 2, 3)], -2),  # an empty input
]


@pytest.mark.parametrize("shapes,axis", CONCAT_CASES)
@pytest.mark.parametrize("op", ["ConcatV2", "Concat"])
def test_concat_lowering_matches_reference(rand, shapes, axis, op):
    values = [rand(*s) for s in shapes]
    axis_value = np.int32(axis)
    inputs = [axis_value, *values] if op == "Concat" else [*values, axis_value]
    (expected,), (got,), statements = run_op_with_constants(concat_node(len(values), op), inputs)
    np.testing.assert_array_equal(expected, np.concatenate(values, axis=axis))
    np.testing.assert_array_equal(got, expected)
    assert len(statements) == sum(1 for s in shapes if s[axis])
    assert all(s.extents == expected.shape for s in statements)  # one shared band


@pytest.mark.parametrize("shapes,axis", CONCAT_CASES)
def test_concat_reference_matches_tensorflow(rand, shapes, axis):
    tf = pytest.importorskip("tensorflow")
    values = [rand(*s) for s in shapes]
    (expected,), _, _ = run_op_with_constants(concat_node(len(values)), [*values, np.int64(axis)], lower=False)
    np.testing.assert_array_equal(expected, tf.raw_ops.ConcatV2(values=values, axis=np.int64(axis)).numpy())


def test_concat_rejects_bad_inputs():
    definition = lookup("ConcatV2")
    assert definition.data_input_indices(3) == (0, 1)
    assert lookup("Concat").data_input_indices(3) == (1, 2)
    types = [TensorType((2, 3)), TensorType((2, 4)), TensorType((), "int32")]
    with pytest.raises(ShapeError, match="compile-time constant"):
        definition.infer(concat_node(2), types, [None, None, None])
    with pytest.raises(ShapeError, match="out of range"):
        definition.infer(concat_node(2), types, [None, None, np.int32(2)])
    with pytest.raises(ShapeError, match="dimension 1"):
        definition.infer(concat_node(2), types, [None, None, np.int32(0)])
    with pytest.raises(ShapeError, match="rank"):
        definition.infer(concat_node(2), [types[0], TensorType((2, 3, 1)), types[2]], [None, None, np.int32(0)])


# --- Transpose ------------------------------------------------------------------------------


def transpose_node():
    return Node("transpose", "Transpose", ("x:0", "perm:0"), attrs={})


TRANSPOSE_CASES = [((3, 4), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4, 5), (0, 3, 1, 2)), ((2, 3, 4, 5), (0, 1, 2, 3)), ((5,), (0,))]


@pytest.mark.parametrize("shape,perm", TRANSPOSE_CASES)
def test_transpose_lowering_matches_reference(rand, shape, perm):
    x = rand(*shape)
    (expected,), (got,), (statement,) = run_op_with_constants(transpose_node(), [x, np.asarray(perm, np.int32)])
    np.testing.assert_array_equal(expected, np.transpose(x, perm))
    np.testing.assert_array_equal(got, expected)
    iterators = [f"d{k}" for k in range(len(shape))]
    source = [iterators[perm.index(axis)] for axis in range(len(shape))]
    assert str(statement) == f"S0[{', '.join(iterators)}]: Y0[{', '.join(iterators)}] = X0[{', '.join(source)}]"


@pytest.mark.parametrize("shape,perm", TRANSPOSE_CASES)
def test_transpose_reference_matches_tensorflow(rand, shape, perm):
    tf = pytest.importorskip("tensorflow")
    x = rand(*shape)
    (expected,), _, _ = run_op_with_constants(transpose_node(), [x, np.asarray(perm, np.int64)], lower=False)
    np.testing.assert_array_equal(expected, tf.raw_ops.Transpose(x=x, perm=np.asarray(perm, np.int64)).numpy())


def test_transpose_rejects_bad_perm():
    definition = lookup("Transpose")
    types = [TensorType((2, 3, 4)), TensorType((3,), "int32")]
    with pytest.raises(ShapeError, match="compile-time constant"):
        definition.infer(transpose_node(), types, [None, None])
    with pytest.raises(ShapeError, match="not a permutation"):
        definition.infer(transpose_node(), types, [None, np.asarray([0, 1, 1], np.int32)])
    with pytest.raises(ShapeError, match="not a permutation"):
        definition.infer(transpose_node(), types, [None, np.asarray([0, 1], np.int32)])


# --- compiled kernels: default and heuristic recipes ------------------------------------------


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt")  # the bench's first, random variance
def test_conv_batch_norm_relu_fuses_and_compiles_correctly(monkeypatch):
    rng = np.random.default_rng(7)
    graph = build_graph(
        [
            placeholder("x", (1, 8, 7, 3)),
            const("f", _rand(rng, 3, 3, 3, 16)),
            *(const(name, _rand(rng, 16)) for name in ("g", "b", "m")),
            const("v", np.abs(_rand(rng, 16)) + 0.1),
            Node("conv", "Conv2D", ("x:0", "f:0"), attrs={"strides": (1, 1, 1, 1), "padding": "SAME", "data_format": "NHWC", "dilations": (1, 1, 1, 1)}),
            Node("bn", "FusedBatchNormV3", ("conv:0", "g:0", "b:0", "m:0", "v:0"), attrs={"epsilon": 0.001, "is_training": False}),
            Node("relu", "Relu", ("bn:0",)),
        ],
        ["relu:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph, inputs=positive_inputs("v:0"))
    assert [k.scop.ops for k in kernels] == [(("conv", "Conv2D"), ("bn", "FusedBatchNormV3"), ("relu", "Relu"))]
    assert failures == []


@pytest.mark.parametrize("axis", [-1, 1])
def test_concat_relu_compiles_correctly(monkeypatch, axis):
    graph = build_graph(
        [
            placeholder("x", (2, 5, 3, 8)),
            placeholder("y", (2, 5, 3, 16) if axis == -1 else (2, 2, 3, 8)),
            const("axis", np.int32(axis)),
            Node("concat", "ConcatV2", ("x:0", "y:0", "axis:0"), attrs={"N": 2}),
            Node("relu", "Relu", ("concat:0",)),
        ],
        ["relu:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert [k.scop.ops for k in kernels] == [(("concat", "ConcatV2"), ("relu", "Relu"))]
    assert failures == []


@pytest.mark.parametrize("perm", [(0, 2, 1), (2, 0, 1)])
def test_transpose_relu_compiles_correctly(monkeypatch, perm):
    graph = build_graph(
        [
            placeholder("x", (3, 17, 10)),
            const("perm", np.asarray(perm, np.int32)),
            Node("transpose", "Transpose", ("x:0", "perm:0")),
            Node("relu", "Relu", ("transpose:0",)),
        ],
        ["relu:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert [k.scop.ops for k in kernels] == [(("transpose", "Transpose"), ("relu", "Relu"))]
    assert failures == []


def test_transpose_of_a_square_tensor_does_not_fuse_into_its_producer(monkeypatch):
    """Same shape as its producer's output, but read at other indices: its own group."""
    graph = build_graph(
        [
            placeholder("x", (6, 6)),
            Node("relu", "Relu", ("x:0",)),
            const("perm", np.asarray((1, 0), np.int32)),
            Node("transpose", "Transpose", ("relu:0", "perm:0")),
        ],
        ["transpose:0"],
    )
    kernels, failures = verify_all_recipes(monkeypatch, graph)
    assert [k.scop.ops for k in kernels] == [(("relu", "Relu"),), (("transpose", "Transpose"),)]
    assert failures == []
